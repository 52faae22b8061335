#!/usr/bin/env python3
"""Keras fit step time with ringfold.keras.DistributedOptimizer against TensorFlow's own
tf.distribute.MultiWorkerMirroredStrategy (its gRPC ring, started with TF_CONFIG on 127.0.0.1),
and the per-call overhead of ringfold.tensorflow's hvd.allreduce (eager and in tf.function)
against the C++ engine loop. One command, one run, a markdown report on stdout:

    python bench/python/keras_compare.py --np 2 4 --steps 12 --rounds 2

For each rank count and model, each round launches, one after the other:
  ringfold  `ringfoldrun -np N python keras_compare.py --worker fit ringfold MODEL`
  mwms      N processes with TF_CONFIG (workers 0..N-1), `--worker fit mwms MODEL`
Every rank trains MODEL on synthetic data, per-rank batch --batch (MWMS: a global batch of
N x --batch, auto-sharding off, so each replica gets --batch), SGD, jit_compile off, one step
per execution. Step time: the time between consecutive on_train_batch_end calls on rank 0 after
--warmup steps; reported as the median over all rounds' steps.
Models: cnn (28x28x1 -> Conv 16, pool, Conv 32, pool, Dense 10: 12,810 parameters) and mlp
(1024 -> 2048 -> 2048 -> 2048 -> 10: ~10.5 M parameters, 42 MB of float32 gradients).

Overhead: `ringfoldrun -np N python keras_compare.py --worker overhead` times --calls calls each
of hvd.allreduce(tf.ones(1), name='lat') eagerly, of a tf.function wrapping it, and of
ringfold.allreduce on a 1-element numpy array (the same engine call without TensorFlow), in
interleaved blocks of 25 (the previous call done before the next), medians; then
`ringfoldrun -np N engine_perf --latency CALLS` (the C++ enqueue -> wait -> release loop, no
Python) when --engine-perf exists. Latency includes waiting for the engine's cycle
(RINGFOLD_CYCLE_TIME, default 1 ms), so "- numpy" is the cleaner measure of TensorFlow's part.

Each rank uses --threads TensorFlow intra- and inter-op threads (default 1: ranks share the
cores). The ringfold package and library come from the environment (PYTHONPATH) as for any
ringfold program; run it with the TensorFlow venv's python (bindings/python/requirements-tensorflow.txt).
"""
import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_model(kind, tf):
    if kind == 'cnn':
        return tf.keras.Sequential([
            tf.keras.layers.Input((28, 28, 1)),
            tf.keras.layers.Conv2D(16, 3, activation='relu'), tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(32, 3, activation='relu'), tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    return tf.keras.Sequential([
        tf.keras.layers.Input((1024,)),
        tf.keras.layers.Dense(2048, activation='relu'), tf.keras.layers.Dense(2048, activation='relu'),
        tf.keras.layers.Dense(2048, activation='relu'), tf.keras.layers.Dense(10)])


def data(kind, n, np):
    rng = np.random.default_rng(0)
    shape = (n, 28, 28, 1) if kind == 'cnn' else (n, 1024)
    return rng.normal(size=shape).astype(np.float32), rng.integers(0, 10, size=n).astype(np.float32)


def worker_fit(args):
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    times = []

    class Timer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    steps = args.warmup + args.steps
    if args.impl == 'ringfold':
        import ringfold.tensorflow as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        tf.keras.utils.set_random_seed(1)
        model = build_model(args.model, tf)
        model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)), loss=loss,
                      jit_compile=False)
        x, y = data(args.model, args.batch * steps, np)
        model.fit(x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Timer()])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        rank = json.loads(os.environ['TF_CONFIG'])['task']['index']
        size = strategy.num_replicas_in_sync
        with strategy.scope():
            tf.keras.utils.set_random_seed(1)
            model = build_model(args.model, tf)
            model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
        x, y = data(args.model, args.batch * size * steps, np)
        # Keras 3.15's fit() under MultiWorkerMirroredStrategy fails in _maybe_symbolic_build
        # (strategy.reduce of the first PerReplica batch: "Attempt to convert a value
        # (PerReplica...) to a Tensor"). Build once here on a plain batch, in the strategy's
        # scope, and skip that step; the train step itself is Keras's own.
        with strategy.scope():
            model._symbolic_build(data_batch=(tf.constant(x[:args.batch]), tf.constant(y[:args.batch])))
        model._maybe_symbolic_build = lambda *a, **k: None
        # And each step reduces its logs with reduce_per_replica(reduction="auto"), which is
        # strategy.reduce("MEAN", loss, axis=0) on a scalar under MWMS ("Invalid reduction
        # dimension 0"; its "sum" branch omits reduce's axis argument). Sum them instead (the
        # logs are not used here).
        from keras.src.backend.tensorflow import trainer as tf_trainer
        tf_trainer.reduce_per_replica = lambda values, strategy, reduction: tf.nest.map_structure(
            lambda v: strategy.reduce('SUM', v, axis=None), values)
        # Global batch = N x per-rank batch; Keras distributes the numpy input over the workers.
        model.fit(x, y, batch_size=args.batch * size, epochs=1, shuffle=False, verbose=0,
                  callbacks=[Timer()])
    deltas = [b - a for a, b in zip(times[args.warmup - 1:], times[args.warmup:])]
    if rank == 0:
        print('RESULT ' + json.dumps({'size': size, 'steps_ms': [d * 1e3 for d in deltas],
                                      'params': int(model.count_params())}), flush=True)


def worker_overhead(args):
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import ringfold
    import ringfold.tensorflow as hvd
    hvd.init()
    x, a = tf.ones(1), np.ones(1, np.float32)
    graph = tf.function(lambda t: hvd.allreduce(t, name='lat'))
    kinds = {'eager': lambda: hvd.allreduce(x, name='lat').numpy(),
             'tf.function': lambda: graph(x).numpy(),
             'numpy': lambda: ringfold.allreduce(a, name='lat')}
    for call in kinds.values():
        for _ in range(30):
            call()
    times = {k: [] for k in kinds}
    block = 25
    for _ in range(max(1, args.calls // block)):     # interleaved blocks: same engine phase noise
        for label, call in kinds.items():
            for _ in range(block):
                t0 = time.perf_counter()
                call()
                times[label].append(time.perf_counter() - t0)
    if hvd.rank() == 0:
        print('RESULT ' + json.dumps({k: statistics.median(v) * 1e6 for k, v in times.items()}),
              flush=True)


def results(text):
    found = [json.loads(m) for m in re.findall(r'RESULT (\{.*\})', text)]
    if not found:
        raise RuntimeError('no RESULT line in:\n' + text[-3000:])
    return found[0]


def free_port_block(n):
    for _ in range(200):
        p = random.randrange(20000, 30000, 2 * n)
        try:
            for q in range(p, p + 2 * n):
                with socket.socket() as s:
                    s.bind(('127.0.0.1', q))
            return p
        except OSError:
            pass
    raise RuntimeError('no free ports')


def run_ringfold(args, n, worker_args, timeout=600):
    cmd = [args.ringfoldrun, '-np', str(n), sys.executable, os.path.abspath(__file__),
           '--threads', str(args.threads), '--batch', str(args.batch), '--steps', str(args.steps),
           '--warmup', str(args.warmup), '--calls', str(args.calls), '--worker'] + worker_args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise RuntimeError('%s failed:\n%s' % (' '.join(cmd), (out.stdout + out.stderr)[-3000:]))
    return results(out.stdout)


def run_mwms(args, n, model, timeout=600):
    port = free_port_block(n)
    cluster = {'worker': ['127.0.0.1:%d' % (port + 2 * i) for i in range(n)]}
    procs = []
    for i in range(n):
        env = dict(os.environ, TF_CONFIG=json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': i}}))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), '--threads', str(args.threads), '--batch',
             str(args.batch), '--steps', str(args.steps), '--warmup', str(args.warmup), '--worker',
             'fit', 'mwms', model], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    if any(p.returncode for p in procs):
        raise RuntimeError('MWMS job failed:\n' + '\n'.join(o[-2000:] for o in outs))
    return results(outs[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--np', type=int, nargs='+', default=[2, 4])
    ap.add_argument('--models', nargs='+', default=['cnn', 'mlp'])
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--steps', type=int, default=12, help='timed steps per launch')
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--batch', type=int, default=32, help='per-rank batch')
    ap.add_argument('--calls', type=int, default=300, help='timed allreduce calls per kind')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--skip-overhead', action='store_true')
    ap.add_argument('--skip-fit', action='store_true')
    ap.add_argument('--ringfoldrun', default='ringfoldrun')
    ap.add_argument('--engine-perf', default=os.path.join(ROOT, 'build', 'bench', 'engine_perf'))
    ap.add_argument('--worker', nargs='+', help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    os.environ.setdefault('KERAS_BACKEND', 'tensorflow')
    if args.worker:
        if args.worker[0] == 'fit':
            args.impl, args.model = args.worker[1], args.worker[2]
            return worker_fit(args)
        return worker_overhead(args)
    load = open('/proc/loadavg').read().split()[:3]
    print('# Keras fit: ringfold.keras.DistributedOptimizer vs tf.distribute.MultiWorkerMirroredStrategy\n')
    print('per-rank batch %d, %d warm-up + %d timed steps per launch, %d round(s), %d TF thread(s) '
          'per rank, %d CPUs, load average at start %s\n'
          % (args.batch, args.warmup, args.steps, args.rounds, args.threads, os.cpu_count(), ' '.join(load)))
    if not args.skip_fit:
        print('| ranks | model | params | ringfold median step ms | MWMS median step ms | ringfold / MWMS |')
        print('|---|---|---|---|---|---|')
        for n in args.np:
            for model in args.models:
                rf, mw, params = [], [], 0
                for _ in range(args.rounds):
                    r = run_ringfold(args, n, ['fit', 'ringfold', model])
                    rf += r['steps_ms']
                    params = r['params']
                    mw += run_mwms(args, n, model)['steps_ms']
                a, b = statistics.median(rf), statistics.median(mw)
                print('| %d | %s | %s | %.1f | %.1f | %.2f |' % (n, model, format(params, ','), a, b, a / b), flush=True)
        print()
    if not args.skip_overhead:
        print('| ranks | hvd.allreduce eager us | in tf.function us | ringfold.allreduce (numpy) us '
              '| C++ engine_perf --latency us | eager - C++ | tf.function - C++ | eager - numpy | tf.function - numpy |')
        print('|---|---|---|---|---|---|---|---|---|')
        for n in args.np:
            r = run_ringfold(args, n, ['overhead'])
            c = float('nan')
            if os.path.isfile(args.engine_perf):
                out = subprocess.run([args.ringfoldrun, '-np', str(n), args.engine_perf, '--tensors', '1',
                                      '--total', '64', '--steps', '1', '--warmup', '0', '--latency',
                                      str(args.calls)], capture_output=True, text=True, timeout=300)
                m = re.search(r'latency_4B median_us ([0-9.]+)', out.stdout)
                c = float(m.group(1)) if m else float('nan')
            e, f, p = r['eager'], r['tf.function'], r['numpy']
            print('| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |'
                  % (n, e, f, p, c, e - c, f - c, e - p, f - p), flush=True)


if __name__ == '__main__':
    main()
