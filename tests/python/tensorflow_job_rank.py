"""One rank of the multi-process TensorFlow scenarios that test_tensorflow_jobs.py starts by hand
(each rank gets only TF_CONFIG, so a rank can die without a launcher stopping the others).

    python tensorflow_job_rank.py death-tape     the last rank SIGKILLs itself mid-training
                                                 (DistributedGradientTape in tf.function)
    python tensorflow_job_rank.py death-fit      the same inside Keras model.fit
                                                 (DistributedOptimizer)
    python tensorflow_job_rank.py order THREADS function|wrap [--unchained]
                                                 independent collectives whose inputs become ready
                                                 in a different order on each rank, TF's inter-op
                                                 pool limited to THREADS threads, in a tf.function
                                                 or a tf.compat.v1.wrap_function graph

Contract: a surviving rank prints "RESULT ok <details>" and exits 0 when what it saw is right,
or exits non-zero with the reason; the victim dies of SIGKILL (exit status -9 to the parent).
"--unchained" turns off ringfold.tensorflow's trace-order chaining of graph collectives (the
mechanism the order scenario guards) so the parent can show that the scenario then hangs.
"""
import os
import signal
import sys
import time

scenario = sys.argv[1]
if scenario == 'order':
    import tensorflow as tf
    # Must happen before TensorFlow's runtime starts.
    tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[2]))
import numpy as np
import tensorflow as tf

import ringfold.tensorflow as hvd

TIMEOUT = float(os.environ['RINGFOLD_TIMEOUT'])
hvd.init()
rank, size = hvd.rank(), hvd.size()
victim = size - 1


def fail(message):
    sys.exit('rank %d: %s' % (rank, message))


def check_death_error(error, elapsed, where):
    """What a survivor must see: within RINGFOLD_TIMEOUT (+ slack for 2 shared cores), an error
    Horovod's TF code recognizes. Inside a graph TensorFlow re-raises the py-function's
    HorovodInternalError as tf.errors.UnknownError whose message names the class and the
    Horovod op (horovod.tensorflow.elastic.run keys on 'HorovodAllreduce' in that message)."""
    text = str(error)
    if elapsed > TIMEOUT + 10:
        fail('%s: the error came after %.1f s (RINGFOLD_TIMEOUT %.0f s)' % (where, elapsed, TIMEOUT))
    if not isinstance(error, tf.errors.UnknownError):
        fail('%s: %s is not tf.errors.UnknownError: %s' % (where, type(error).__name__, text))
    if 'HorovodInternalError' not in text or 'HorovodAllreduce' not in text:
        fail('%s: the message does not say HorovodInternalError / HorovodAllreduce: %s' % (where, text))
    if 'rank %d' % victim not in text:
        fail('%s: the message does not name the dead rank %d: %s' % (where, victim, text))
    # Later calls fail at once, eagerly as ringfold's own class (also tf.errors.UnknownError).
    try:
        hvd.allreduce(tf.ones(2), name='after_death')
    except hvd.HorovodInternalError as later:
        if not isinstance(later, tf.errors.UnknownError):
            fail('eager error after the death is not tf.errors.UnknownError')
    else:
        fail('an allreduce after the death did not raise')
    line = next(l for l in text.splitlines() if 'HorovodInternalError' in l)
    print('RESULT ok %s: %s after %.2f s: %s' % (where, type(error).__name__, elapsed, line[:200]),
          flush=True)


def model_and_data(seed):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.layers.Input((16,)),
                                 tf.keras.layers.Dense(32, activation='relu'),
                                 tf.keras.layers.Dense(4)])
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(64, 16)).astype(np.float32)
    y = rng.integers(0, 4, size=64)
    return model, x, y


def die():
    time.sleep(0.5)              # the survivors are waiting in this step's allreduce by now
    os.kill(os.getpid(), signal.SIGKILL)


def death_tape():
    model, x, y = model_and_data(1)
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    for _ in range(3):
        step(x, y)
    print('STARTED', flush=True)
    if rank == victim:
        die()
    start = time.monotonic()
    try:
        for _ in range(100000):
            step(x, y)
    except tf.errors.OpError as e:
        check_death_error(e, time.monotonic() - start, 'DistributedGradientTape')
        return
    fail('training went on without the dead rank')


def death_fit():
    model, x, y = model_and_data(2)
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001))
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    started = []

    class Kill(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                print('STARTED', flush=True)
                if rank == victim:
                    die()
                started.append(time.monotonic())
    xs, ys = np.tile(x, (200, 1)), np.tile(y, 200)
    try:
        model.fit(xs, ys, batch_size=8, epochs=2, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Kill()])
    except tf.errors.OpError as e:
        check_death_error(e, time.monotonic() - started[0], 'model.fit')
        return
    fail('model.fit finished without the dead rank')


def order(threads, kind, unchained):
    """2 * PER_SIDE independent allreduces per graph, traced in the same order on every rank.
    On rank 0 the first half's inputs are ready at once and the second half's only after a
    sleeping py-function; on the other ranks the reverse. A collective that waits holds an
    inter-op thread, so without a common order rank 0's threads all wait in the first half while
    the other ranks' all wait in the second, each for the other: a deadlock (it ends at
    RINGFOLD_STALL_SHUTDOWN_TIME with an error, or at the parent's bound)."""
    from ringfold.tensorflow import mpi_ops
    if unchained:
        real_run = mpi_ops._run

        def run_unchained(*args, **kwargs):
            with mpi_ops._chain_lock:
                mpi_ops._graph_chain.clear()     # nothing to chain to: the ops stay independent
            return real_run(*args, **kwargs)
        mpi_ops._run = run_unchained
    per_side = 4

    def sleepy(a):
        time.sleep(0.5)
        return a

    def slow(t):
        out = tf.numpy_function(sleepy, [t], tf.float32, stateful=True)
        out.set_shape(t.shape)
        return out

    def many(x):
        early = x if rank == 0 else slow(x)
        late = slow(x) if rank == 0 else x
        outs = [hvd.allreduce(early + i, op=hvd.Sum, name='order_first_%d' % i)
                for i in range(per_side)]
        outs += [hvd.allreduce(late + i, op=hvd.Sum, name='order_second_%d' % i)
                 for i in range(per_side)]
        return tf.stack(outs)
    if kind == 'function':
        # tf.function adds automatic control dependencies between stateful ops (ringfold's are),
        # so TensorFlow itself runs them in trace order here.
        many = tf.function(many)
    else:
        # tf.compat.v1.wrap_function (TF1-style graphs in TF2) adds none: only ringfold's
        # chaining orders the collectives.
        many = tf.compat.v1.wrap_function(many, [tf.TensorSpec([4], tf.float32)])
    print('STARTED', flush=True)
    start = time.monotonic()
    try:
        for _ in range(3):
            out = many(tf.zeros(4))
    except tf.errors.OpError as e:
        fail('order: %s after %.1f s: %s' % (type(e).__name__, time.monotonic() - start,
                                              str(e).splitlines()[0][:300]))
    expect = np.array([[size * (i % per_side)] * 4 for i in range(2 * per_side)], np.float32)
    if not np.array_equal(out.numpy(), expect):
        fail('order: wrong sums %s' % out.numpy())
    print('RESULT ok order: %s, %d inter-op thread(s), 3 calls in %.2f s'
          % (kind, threads, time.monotonic() - start), flush=True)


if scenario == 'death-tape':
    death_tape()
elif scenario == 'death-fit':
    death_fit()
elif scenario == 'order':
    order(int(sys.argv[2]), sys.argv[3], '--unchained' in sys.argv[4:])
else:
    fail('unknown scenario %r' % scenario)
