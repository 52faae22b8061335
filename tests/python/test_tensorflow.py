"""ringfold.tensorflow under ringfoldrun (tests/python/run.sh tensorflow NP): every collective
x dtype x op, eager and inside tf.function, their gradients, DistributedGradientTape against
one process training on the concatenated batch, object helpers, errors and the XLA guard.
Skipped where TensorFlow is not installed (the torch venv)."""
import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')
import ringfold.tensorflow as hvd  # noqa: E402

FLOAT_TYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
INT_TYPES = [tf.uint8, tf.int8, tf.int32, tf.int64]
MODES = ['eager', 'function']


def _mode(fn, mode):
    return fn if mode == 'eager' else tf.function(fn)


def _data(rank, shape, dtype, seed=0):
    rng = np.random.default_rng(seed + 1000 * rank)
    if dtype.is_floating:
        return rng.integers(-8, 8, size=shape).astype(np.float64) / 4
    return rng.integers(0, 8 if dtype.is_unsigned else 5, size=shape)


def _all(shape, dtype, seed=0):
    return [_data(r, shape, dtype, seed) for r in range(hvd.size())]


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', FLOAT_TYPES + INT_TYPES, ids=lambda d: d.name)
def test_allreduce(mode, dtype):
    """Every op on every dtype (one traced function per dtype in function mode)."""
    ops = ['Sum', 'Average', 'Min', 'Max'] + ([] if dtype in (tf.uint8, tf.int8) else ['Product'])
    shape = (3, 4)
    x = tf.constant(_data(hvd.rank(), shape, dtype), dtype=dtype)
    ys = _mode(lambda t: [hvd.allreduce(t, op=getattr(hvd, op)) for op in ops], mode)(x)
    stack = np.stack(_all(shape, dtype))
    for op, y in zip(ops, ys):
        assert y.dtype == dtype and y.shape == shape
        expect = {'Sum': stack.sum(0), 'Average': stack.mean(0), 'Min': stack.min(0),
                  'Max': stack.max(0), 'Product': stack.prod(0)}[op]
        if op == 'Average' and not dtype.is_floating:
            expect = np.trunc(expect)
        tol = 2e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
        np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), np.asarray(expect, np.float64),
                                   rtol=tol, atol=tol * 4, err_msg=op)


@pytest.mark.parametrize('mode', MODES)
def test_allreduce_scale_and_average_compat(mode):
    x = tf.constant(_data(hvd.rank(), (5,), tf.float32), tf.float32)
    f = _mode(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), mode)
    np.testing.assert_allclose(f(x).numpy(), np.sum(_all((5,), tf.float32), 0) * 1.5, rtol=1e-6)
    with pytest.warns(DeprecationWarning):
        y = hvd.allreduce(x, average=False)
    np.testing.assert_allclose(y.numpy(), np.sum(_all((5,), tf.float32), 0), rtol=1e-6)
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('compression', ['none', 'fp16', 'bf16'])
def test_allreduce_compression(mode, compression):
    x = tf.constant(_data(hvd.rank(), (64,), tf.float32), tf.float32)
    comp = getattr(hvd.Compression, compression)
    y = _mode(lambda t: hvd.allreduce(t, compression=comp), mode)(x)
    assert y.dtype == tf.float32
    np.testing.assert_allclose(y.numpy(), np.mean(_all((64,), tf.float32), 0), atol=1e-2)


@pytest.mark.parametrize('mode', MODES)
def test_allreduce_gradient(mode):
    x = tf.Variable(_data(hvd.rank(), (4, 3), tf.float32), dtype=tf.float32)

    def step():
        with tf.GradientTape() as tape:
            y = hvd.allreduce(x * 2.0, op=hvd.Sum)
            loss = tf.reduce_sum(y * tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3)))
        return tape.gradient(loss, x)
    g = _mode(step, mode)()
    # d/dx of sum(allreduce_sum(2x) * w): the gradient is allreduce_sum(w) * 2 = size * 2w.
    np.testing.assert_allclose(g.numpy(), 2 * hvd.size() * np.arange(12).reshape(4, 3), rtol=1e-6)


@pytest.mark.parametrize('mode', MODES)
def test_grouped_allreduce_and_gradient(mode):
    a = tf.Variable(_data(hvd.rank(), (3,), tf.float32), dtype=tf.float32)
    b = tf.Variable(_data(hvd.rank(), (2, 2), tf.float64, seed=5), dtype=tf.float64)

    def step():
        with tf.GradientTape() as tape:
            ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Average)
            loss = tf.reduce_sum(ra) * 3.0 + tf.cast(tf.reduce_sum(rb), tf.float32)
        return (ra, rb), tape.gradient(loss, [a, b])
    (ra, rb), (ga, gb) = _mode(step, mode)()
    np.testing.assert_allclose(ra.numpy(), np.mean(_all((3,), tf.float32), 0), rtol=1e-6)
    np.testing.assert_allclose(rb.numpy(), np.mean(_all((2, 2), tf.float64, seed=5), 0), rtol=1e-12)
    np.testing.assert_allclose(ga.numpy(), np.full(3, 3.0))
    np.testing.assert_allclose(gb.numpy(), np.ones((2, 2)))


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', FLOAT_TYPES + INT_TYPES + [tf.bool, tf.int16], ids=lambda d: d.name)
def test_allgather(mode, dtype):
    rows = hvd.rank() + 1       # uneven first dimensions
    base = _data(hvd.rank(), (rows, 2), dtype)
    x = tf.constant(base > 0 if dtype == tf.bool else base, dtype=dtype)
    y = _mode(lambda t: hvd.allgather(t), mode)(x)
    parts = [_data(r, (r + 1, 2), dtype) for r in range(hvd.size())]
    expect = np.concatenate([p > 0 if dtype == tf.bool else p for p in parts])
    assert y.dtype == dtype
    np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(), expect.astype(np.float64))


@pytest.mark.parametrize('mode', MODES)
def test_allgather_gradient_and_grouped(mode):
    rows = hvd.rank() + 1
    x = tf.Variable(np.full((rows, 2), float(hvd.rank())), dtype=tf.float32)

    def step():
        with tf.GradientTape() as tape:
            g = hvd.allgather(x)
            w = tf.reshape(tf.range(tf.size(g), dtype=tf.float32), tf.shape(g))
            loss = tf.reduce_sum(g * w)
        return tape.gradient(loss, x)
    grad = _mode(step, mode)()
    total = sum(r + 1 for r in range(hvd.size()))
    w = np.arange(total * 2, dtype=np.float32).reshape(total, 2)
    start = sum(r + 1 for r in range(hvd.rank()))
    # Average of identical upstream gradients, then this rank's rows.
    np.testing.assert_allclose(grad.numpy(), w[start:start + rows])
    ga, gb = hvd.grouped_allgather([x, tf.constant([hvd.rank()])])
    assert ga.shape[0] == total and gb.numpy().tolist() == list(range(hvd.size()))


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', [tf.float32, tf.bfloat16, tf.int64, tf.uint8, tf.bool],
                         ids=lambda d: d.name)
def test_broadcast(mode, dtype):
    root = hvd.size() - 1
    base = _data(hvd.rank(), (3, 2), dtype)
    x = tf.constant(base > 0 if dtype == tf.bool else base, dtype=dtype)
    y = _mode(lambda t: hvd.broadcast(t, root), mode)(x)
    src = _data(root, (3, 2), dtype)
    expect = src > 0 if dtype == tf.bool else src
    np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(), expect.astype(np.float64))


@pytest.mark.parametrize('mode', MODES)
def test_broadcast_gradient(mode):
    x = tf.Variable(np.ones(3) * hvd.rank(), dtype=tf.float32)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(hvd.broadcast(x, 0) * (hvd.rank() + 1.0))
        return tape.gradient(loss, x)
    g = _mode(step, mode)()
    mean = np.mean([r + 1.0 for r in range(hvd.size())])
    np.testing.assert_allclose(g.numpy(), np.full(3, mean if hvd.rank() == 0 else 0.0))


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', [tf.float32, tf.int32, tf.float16], ids=lambda d: d.name)
def test_alltoall(mode, dtype):
    n, r = hvd.size(), hvd.rank()
    # Rank r sends (j + 1) rows to rank j, each row filled with 100 * r + j.
    splits = [j + 1 for j in range(n)]
    rows = np.concatenate([np.full((j + 1, 2), 100 * r + j) for j in range(n)])
    x = tf.constant(rows, dtype=dtype)
    out, received = _mode(lambda t: hvd.alltoall(t, splits=tf.constant(splits, tf.int32)), mode)(x)
    expect = np.concatenate([np.full((r + 1, 2), 100 * s + r) for s in range(n)])
    np.testing.assert_array_equal(tf.cast(out, tf.float64).numpy(), expect)
    assert received.numpy().tolist() == [r + 1] * n
    even = tf.constant(np.arange(2 * n, dtype=np.float32).reshape(n, 2) + 10 * r)
    got = _mode(lambda t: hvd.alltoall(t), mode)(even)
    np.testing.assert_array_equal(got.numpy(), np.stack([np.arange(2 * r, 2 * r + 2) + 10 * s
                                                          for s in range(n)]))


@pytest.mark.parametrize('mode', MODES)
def test_alltoall_gradient(mode):
    n = hvd.size()
    x = tf.Variable(np.ones((n, 3)) * (hvd.rank() + 1), dtype=tf.float32)

    def step():
        with tf.GradientTape() as tape:
            y = hvd.alltoall(x)
            loss = tf.reduce_sum(y * tf.reshape(tf.range(n, dtype=tf.float32) + 1.0, [n, 1]))
        return tape.gradient(loss, x)
    g = _mode(step, mode)()
    # Row j of the received tensor came from rank j; its gradient (j + 1) goes back to it:
    # rank r's row j was received by rank j at position r, with weight r + 1.
    np.testing.assert_allclose(g.numpy(), np.full((n, 3), hvd.rank() + 1.0))


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('op', ['Sum', 'Average'])
@pytest.mark.parametrize('dtype', [tf.float32, tf.float64, tf.int32], ids=lambda d: d.name)
def test_reducescatter(mode, op, dtype):
    n = hvd.size()
    shape = (2 * n, 3)
    x = tf.constant(_data(hvd.rank(), shape, dtype), dtype=dtype)
    y = _mode(lambda t: hvd.reducescatter(t, op=getattr(hvd, op)), mode)(x)
    stack = np.stack(_all(shape, dtype))
    full = stack.sum(0) if op == 'Sum' else stack.mean(0)
    if op == 'Average' and not dtype.is_floating:
        full = np.trunc(full)
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), full[2 * hvd.rank():2 * hvd.rank() + 2],
                               rtol=1e-6)
    ys = hvd.grouped_reducescatter([x, x], op=getattr(hvd, op))
    np.testing.assert_allclose(tf.cast(ys[1], tf.float64).numpy(), tf.cast(y, tf.float64).numpy())


@pytest.mark.parametrize('mode', MODES)
def test_reducescatter_gradient(mode):
    n = hvd.size()
    x = tf.Variable(np.ones((n, 2)), dtype=tf.float32)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(hvd.reducescatter(x, op=hvd.Sum) * (hvd.rank() + 1.0))
        return tape.gradient(loss, x)
    g = _mode(step, mode)()
    # allgather of the upstream gradients, times the set size for Sum.
    np.testing.assert_allclose(g.numpy(), np.array([[r + 1.0] * 2 for r in range(n)]) * n)


def test_indexed_slices_allgathered_or_dense():
    n, r = hvd.size(), hvd.rank()
    emb = tf.Variable(np.zeros((6, 2)), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [r % 6]) * (r + 1.0))
    grad = tape.gradient(loss, emb)
    assert isinstance(grad, tf.IndexedSlices)
    out = hvd.allreduce(grad)
    assert isinstance(out, tf.IndexedSlices)
    assert sorted(out.indices.numpy().tolist()) == sorted(q % 6 for q in range(n))
    dense = tf.convert_to_tensor(out).numpy()
    expect = np.zeros((6, 2))
    for q in range(n):
        expect[q % 6] += (q + 1.0) / n
    np.testing.assert_allclose(dense, expect, rtol=1e-6)
    with pytest.raises(NotImplementedError):
        hvd.allreduce(grad, op=hvd.Max)


@pytest.mark.parametrize('sparse_as_dense', [False, True])
@pytest.mark.parametrize('mode', MODES)
def test_distributed_gradient_tape_matches_one_process(mode, sparse_as_dense):
    """Each rank trains on its slice; one process trains on the concatenated batch."""
    n, r = hvd.size(), hvd.rank()
    rng = np.random.default_rng(7)
    xs = rng.normal(size=(8 * n, 5)).astype(np.float32)
    ys = rng.normal(size=(8 * n, 1)).astype(np.float32)
    ids = rng.integers(0, 10, size=(8 * n,))
    w0 = rng.normal(size=(5, 1)).astype(np.float32)
    e0 = rng.normal(size=(10, 5)).astype(np.float32) * 0.1

    def make():
        return tf.Variable(w0), tf.Variable(e0)

    def loss_fn(w, e, x, y, i):
        h = x + tf.gather(e, i)
        return tf.reduce_mean((tf.matmul(h, w) - y) ** 2)

    def train(distributed, steps=3):
        w, e = make()
        opt = tf.keras.optimizers.SGD(0.1)

        def step(x, y, i):
            with tf.GradientTape() as tape:
                loss = loss_fn(w, e, x, y, i)
            if distributed:
                tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
            grads = tape.gradient(loss, [w, e])
            opt.apply_gradients(zip(grads, [w, e]))
        step = _mode(step, mode)
        for _ in range(steps):
            if distributed:
                sl = slice(8 * r, 8 * r + 8)
                step(xs[sl], ys[sl], ids[sl])
            else:
                step(xs, ys, ids)
        return w.numpy(), e.numpy()
    w_d, e_d = train(True)
    w_1, e_1 = train(False)
    np.testing.assert_allclose(w_d, w_1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e_d, e_1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('groups', [None, 2, 'list'])
def test_tape_groups_predivide_fp16(groups):
    a = tf.Variable(np.ones(3) * (hvd.rank() + 1), dtype=tf.float32)
    b = tf.Variable(np.ones(2) * (hvd.rank() + 1), dtype=tf.float32)
    c = tf.Variable(np.ones(4), dtype=tf.float32)
    g = [[a, c]] if groups == 'list' else groups

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a * a) + tf.reduce_sum(b * b) + tf.reduce_sum(c) * (hvd.rank() + 1.0)
        tape = hvd.DistributedGradientTape(tape, groups=g, gradient_predivide_factor=2.0,
                                           compression=hvd.Compression.fp16)
        return tape.gradient(loss, [a, b, c])
    ga, gb, gc = step()
    mean = np.mean([2.0 * (q + 1) for q in range(hvd.size())])
    np.testing.assert_allclose(ga.numpy(), np.full(3, mean), rtol=1e-3)
    np.testing.assert_allclose(gb.numpy(), np.full(2, mean), rtol=1e-3)
    np.testing.assert_allclose(gc.numpy(), np.full(4, np.mean([q + 1.0 for q in range(hvd.size())])),
                               rtol=1e-3)
    assert isinstance(hvd.DistributedGradientTape(tf.GradientTape()), tf.GradientTape)
    with pytest.raises(ValueError):
        hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, gradient_predivide_factor=2.0)


@pytest.mark.parametrize('average', [False, True])
@pytest.mark.parametrize('mode', MODES)
def test_tape_backward_passes_per_step(mode, average):
    """n = 3: calls 1-2 return the local sums so far and say not to apply; call 3 returns the
    reduced sums (/3 when averaging) and clears them; call 4 starts again."""
    n, r, passes = hvd.size(), hvd.rank(), 3
    w = tf.Variable(np.zeros(3, np.float32))
    b = tf.Variable(np.zeros(2, np.float32))

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)        # d/dw = x; b gets no gradient (None)
        tape = hvd.DistributedGradientTape(tape, backward_passes_per_step=passes,
                                           average_aggregated_gradients=average)
        gw, gb = tape.gradient(loss, [w, b])
        assert gb is None
        return gw, tape.should_apply_gradients()
    step = _mode(step, mode)

    def x(k, rank):
        return np.array([10.0 * k + rank + 1, k, -rank], np.float32)
    for k in range(5):
        g, apply = step(tf.constant(x(k, r)))
        cycle = range(k - k % passes, k + 1)
        if k % passes == passes - 1:
            total = np.mean([sum(x(j, q) for j in cycle) for q in range(n)], axis=0)
            expected = total / passes if average else total
            assert bool(apply)
        else:
            expected = sum(x(j, r) for j in cycle)
            assert not bool(apply)
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize('mode', MODES)
def test_tape_backward_passes_trains_as_one_process_on_the_whole_batch(mode):
    """2 passes per step on each rank's 4-row slices, applied only when should_apply_gradients():
    the same weights as one process on the 8n rows of each step."""
    n, r = hvd.size(), hvd.rank()
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(3, 8 * n, 5)).astype(np.float32)
    ys = rng.normal(size=(3, 8 * n, 1)).astype(np.float32)
    w0 = rng.normal(size=(5, 1)).astype(np.float32)

    def train(distributed):
        w = tf.Variable(w0)
        opt = tf.keras.optimizers.SGD(0.1)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            if distributed:
                tape = hvd.DistributedGradientTape(tape, backward_passes_per_step=2,
                                                   average_aggregated_gradients=True)
            grads = tape.gradient(loss, [w])
            if not distributed or tape.should_apply_gradients():
                opt.apply_gradients(zip(grads, [w]))
        step = _mode(step, mode)
        for s in range(3):
            if distributed:
                for half in range(2):
                    rows = slice(8 * r + 4 * half, 8 * r + 4 * half + 4)
                    step(xs[s, rows], ys[s, rows])
            else:
                step(xs[s], ys[s])
        return w.numpy()
    np.testing.assert_allclose(train(True), train(False), rtol=1e-5, atol=1e-6)


def test_tape_backward_passes_per_step_errors():
    with pytest.raises(ValueError, match='backward_passes_per_step'):
        hvd.DistributedGradientTape(tf.GradientTape(), backward_passes_per_step=0)
    e = tf.Variable(np.ones((4, 2), np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(e, [1, 3]))
    tape = hvd.DistributedGradientTape(tape, backward_passes_per_step=2)
    with pytest.raises(ValueError, match='sparse_as_dense'):
        tape.gradient(loss, [e])
    with pytest.raises(ValueError, match='after gradient'):
        hvd.DistributedGradientTape(tf.GradientTape(), backward_passes_per_step=2).should_apply_gradients()
    assert bool(hvd.DistributedGradientTape(tf.GradientTape()).should_apply_gradients())


def test_local_source_not_reduced():
    a = tf.Variable(np.ones(2) * (hvd.rank() + 1), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a * a)
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(a)
    g = tape.gradient(loss, [a])[0]
    np.testing.assert_allclose(g.numpy(), np.full(2, 2.0 * (hvd.rank() + 1) / hvd.size()))


@pytest.mark.parametrize('mode', MODES)
def test_tape_with_keras_model_variables(mode):
    """Keras 3 variables (model.trainable_variables) have no tf.Variable.ref(): the tape keys
    them by identity for local sources and variable groups."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Input((3,)), tf.keras.layers.Dense(2),
                                 tf.keras.layers.Dense(1)])
    x = tf.constant(np.full((4, 3), hvd.rank() + 1.0, np.float32))
    variables = model.trainable_variables
    local = model.layers[1].trainable_variables

    def grads(distributed):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        if distributed:
            tape = hvd.PartialDistributedGradientTape(tape, groups=[variables[:2]],
                                                      local_layers=model.layers[1])
        return tape.gradient(loss, variables)
    dist = _mode(lambda: grads(True), mode)()
    plain = [g.numpy() for g in grads(False)]
    everyone = [hvd.allgather(tf.constant(g[None])).numpy() for g in plain]
    n = hvd.size()
    for v, g, p, all_g in zip(variables, dist, plain, everyone):
        is_local = any(v is w for w in local)
        expect = p / n if is_local else all_g.mean(0)
        np.testing.assert_allclose(g.numpy(), expect, rtol=1e-5, atol=1e-6, err_msg=v.path)


@pytest.mark.parametrize('mode', MODES)
def test_broadcast_variables_and_objects(mode):
    v = [tf.Variable(np.full(3, hvd.rank(), np.float32)), tf.Variable(hvd.rank() * 10, dtype=tf.int64)]
    def bcast():
        hvd.broadcast_variables(v, root_rank=1 % hvd.size())
    _mode(bcast, mode)()
    assert v[0].numpy().tolist() == [1 % hvd.size()] * 3 and int(v[1].numpy()) == 10 * (1 % hvd.size())
    obj = hvd.broadcast_object({'rank': hvd.rank(), 'x': [1, 2]} if hvd.rank() == 0 else None, 0,
                               name='cfg')
    assert obj == {'rank': 0, 'x': [1, 2]}
    assert hvd.allgather_object(('r', hvd.rank())) == [('r', q) for q in range(hvd.size())]


def test_join_barrier_topology_process_set():
    assert hvd.is_initialized() and 0 <= hvd.rank() < hvd.size()
    assert int(hvd.size_op().numpy()) == hvd.size() and int(hvd.rank_op().numpy()) == hvd.rank()
    hvd.barrier()
    last = hvd.join()
    assert 0 <= int(last.numpy()) < hvd.size()
    members = [0, 1] if hvd.size() > 2 else [1]
    ps = hvd.add_process_set(members)
    try:
        if hvd.rank() in members:
            y = hvd.allreduce(tf.constant([float(hvd.rank())]), op=hvd.Sum, process_set=ps)
            assert y.numpy().tolist() == [float(sum(members))]
            z = tf.function(lambda t: hvd.allgather(t, process_set=ps))(tf.constant([hvd.rank()]))
            assert z.numpy().tolist() == members
    finally:
        hvd.remove_process_set(ps)


def test_many_independent_collectives_in_one_function_do_not_deadlock():
    """More independent allreduces than TF has inter-op threads, whose inputs become ready in
    a different order on each rank, give the right sums. Inside tf.function TensorFlow's
    automatic control dependencies already run stateful ops in program order, so this cannot
    fail by the order alone; the case that can (a wrap_function graph, a limited inter-op pool,
    and a negative control without ringfold's chaining) is test_tensorflow_jobs.py's."""
    count = 24
    delays = np.random.default_rng(hvd.rank()).permutation(count) * 0.002

    def slow(i):
        def f(x):
            import time
            time.sleep(delays[i])
            return x
        return f

    @tf.function
    def many(x):
        outs = []
        for i in range(count):
            xi = tf.numpy_function(slow(i), [x + i], tf.float32)
            xi.set_shape(x.shape)
            outs.append(hvd.allreduce(xi, op=hvd.Sum))
        return tf.add_n(outs)
    out = many(tf.ones(4))
    n = hvd.size()
    np.testing.assert_allclose(out.numpy(), np.full(4, sum(n * (1.0 + i) for i in range(count))))


def test_xla_guard_names_the_cause():
    @tf.function(jit_compile=True)
    def compiled(x):
        return hvd.allreduce(x)
    with pytest.raises(NotImplementedError, match='XLA'):
        compiled(tf.ones(2))


def test_unsupported_dtype_and_bad_root():
    with pytest.raises(ValueError, match='string'):
        hvd.allreduce(tf.constant(['a']))
    with pytest.raises(hvd.InvalidArgumentError):
        hvd.broadcast(tf.ones(2), root_rank=hvd.size())


def test_mismatch_raises_on_every_rank():
    shape = (2 + hvd.rank(),)
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(tf.ones(shape), name='mismatched_shape')
    assert isinstance(info.value, tf.errors.FailedPreconditionError)
    assert 'mismatched_shape' in str(info.value)
    dtype = tf.float32 if hvd.rank() == 0 else tf.float64
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(tf.ones(3, dtype=dtype), name='mismatched_dtype')

    @tf.function
    def in_graph(x):
        return hvd.allreduce(x, name='mismatched_in_graph')
    with pytest.raises(tf.errors.OpError, match='HorovodInternalError'):
        in_graph(tf.ones(shape))
    # The engine is still usable.
    assert hvd.allreduce(tf.ones(2), op=hvd.Sum).numpy().tolist() == [hvd.size()] * 2
