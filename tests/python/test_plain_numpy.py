"""ringfold without a deep-learning framework: the collectives on numpy arrays.
(tests/python/run.sh also runs this file in a virtual environment that has no torch.)"""
import numpy as np
import pytest

import ringfold as rf

DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64]


def test_import_ringfold_loads_no_framework():
    import subprocess
    import sys
    code = ('import sys, ringfold; '
            'loaded = [m for m in ("torch", "tensorflow", "jax", "mxnet") if m in sys.modules]; '
            'assert not loaded, loaded')
    subprocess.run([sys.executable, '-c', code], check=True)


@pytest.mark.parametrize('module, says', [
    ('ringfold.tensorflow', 'needs TensorFlow >= 2.16'),
    ('ringfold.keras', 'needs Keras >= 3'),
    ('ringfold.mxnet', 'MXNet is retired'),
])
def test_framework_modules_say_what_they_need(module, says):
    """Where the framework is absent (the plain venv has none), importing its module raises an
    ImportError naming what to install; MXNet's always says it is retired."""
    import importlib.util
    import subprocess
    import sys
    framework = module.split('.')[1]
    if framework != 'mxnet' and importlib.util.find_spec(framework) is not None:
        pytest.skip(f'{framework} is installed here')
    code = f'import {module}'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert out.returncode != 0
    assert 'ImportError' in out.stderr and says in out.stderr, out.stderr[-1000:]


def test_topology():
    assert rf.is_initialized()
    assert 0 <= rf.rank() < rf.size()
    assert 0 <= rf.local_rank() < rf.local_size()
    env = __import__('os').environ
    assert rf.size() == int(env.get('RINGFOLD_SIZE') or env['WORLD_SIZE'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_allreduce_sum(dtype):
    n = rf.size()
    x = (np.arange(7) % 3 + rf.rank()).astype(dtype)
    expected = sum((np.arange(7) % 3 + r).astype(np.float64) for r in range(n)).astype(dtype)
    np.testing.assert_array_equal(rf.allreduce(x, op=rf.Sum), expected)


@pytest.mark.parametrize('op,fn', [(rf.Min, np.minimum.reduce), (rf.Max, np.maximum.reduce),
                                   (rf.Product, np.multiply.reduce)])
def test_allreduce_ops(op, fn):
    values = [np.array([1.5, -2.0, 3.0, 0.5], np.float32) * (r + 1) for r in range(rf.size())]
    np.testing.assert_allclose(rf.allreduce(values[rf.rank()], op=op), fn(values), rtol=1e-6)


def test_allreduce_average_and_scale():
    x = np.full(5, rf.rank() + 1.0)
    avg = sum(range(1, rf.size() + 1)) / rf.size()
    np.testing.assert_allclose(rf.allreduce(x), np.full(5, avg))
    np.testing.assert_allclose(rf.allreduce(x, op=rf.Sum, prescale_factor=2.0, postscale_factor=0.5),
                               np.full(5, avg * rf.size()))


def test_in_place_and_async():
    x = np.ones((2, 3), np.float32)
    h = rf.allreduce_async_(x, name='np_inplace', op=rf.Sum)
    assert rf.synchronize(h) is x
    np.testing.assert_array_equal(x, np.full((2, 3), rf.size(), np.float32))
    h = rf.allreduce_async(x, name='np_polled', op=rf.Max)
    while not rf.poll(h):
        pass
    np.testing.assert_array_equal(rf.synchronize(h), x)
    with pytest.raises(ValueError, match='unknown'):
        rf.synchronize(h)


def test_grouped():
    arrays = [np.full(3, rf.rank(), np.float64), np.full((2, 2), 1, np.int32)]
    out = rf.grouped_allreduce(arrays, op=rf.Sum)
    np.testing.assert_array_equal(out[0], np.full(3, sum(range(rf.size()))))
    np.testing.assert_array_equal(out[1], np.full((2, 2), rf.size()))


def test_scalars_keep_their_shape():
    """A 0-d array (or numpy scalar) in gives a 0-d array out of allreduce, grouped_allreduce and
    broadcast, as the tensor APIs do."""
    r, n = rf.rank(), rf.size()
    s = rf.allreduce(np.float32(r), op=rf.Sum)
    assert s.shape == () and s == sum(range(n))
    g = rf.grouped_allreduce([np.array(1.0), np.full(2, 1.0)], op=rf.Sum)
    assert g[0].shape == () and g[0] == n and g[1].shape == (2,)
    b = rf.broadcast(np.array(r, np.int64), root_rank=n - 1)
    assert b.shape == () and b == n - 1


def test_allgather_broadcast_alltoall_reducescatter():
    r, n = rf.rank(), rf.size()
    g = rf.allgather(np.full((r + 1, 2), r, np.int64))
    assert g.shape == (n * (n + 1) // 2, 2)
    assert [int(v) for v in g[:, 0]] == [q for q in range(n) for _ in range(q + 1)]
    b = np.full(4, r, np.bool_) if r == 0 else np.zeros(4, np.bool_)
    np.testing.assert_array_equal(rf.broadcast(np.arange(4.0) + r, root_rank=n - 1), np.arange(4.0) + n - 1)
    np.testing.assert_array_equal(rf.broadcast(b, 0), np.zeros(4, np.bool_))
    out, splits = rf.alltoall(np.arange(n) + 100 * r, splits=[1] * n)
    np.testing.assert_array_equal(out, np.array([100 * q + r for q in range(n)]))
    np.testing.assert_array_equal(splits, np.ones(n))
    rs = rf.reducescatter(np.ones((n * 2, 3), np.float32), op=rf.Sum)
    np.testing.assert_array_equal(rs, np.full((2, 3), n, np.float32))


def test_mismatch_raises_on_every_rank():
    with pytest.raises(rf.HorovodInternalError, match='Mismatched'):
        rf.allreduce(np.zeros(3 + rf.rank(), np.float32), name='np_bad_shape')


def test_unsupported_dtype_is_a_value_error():
    with pytest.raises(ValueError, match='complex'):
        rf.allreduce(np.zeros(3, np.complex64))


def test_barrier_and_join():
    rf.barrier()
    assert rf.join() in range(rf.size())


def test_broadcast_root_rank_is_global_in_a_process_set():
    """As Horovod: root_rank names a global rank also within a process set."""
    if rf.size() < 2:
        pytest.skip('needs 2 ranks')
    ps = rf.add_process_set(list(range(1, rf.size())))
    try:
        if ps.included():
            root = rf.size() - 1
            out = rf.broadcast(np.full(3, rf.rank(), dtype=np.int32), root_rank=root, process_set=ps)
            assert out.tolist() == [root] * 3
            with pytest.raises(ValueError, match='root rank 0 is not in process set'):
                rf.broadcast(np.zeros(1), root_rank=0, process_set=ps)
        rf.barrier()
    finally:
        rf.remove_process_set(ps)


def test_argument_errors_are_value_errors():
    # Each rank's own name stays in flight until every rank made its duplicate call: the others
    # submit it only after the barrier (a shared name could complete before the second call).
    names = ['np_dup.%d' % q for q in range(rf.size())]
    first = rf.allreduce_async(np.ones(2), name=names[rf.rank()])
    with pytest.raises(rf.InvalidArgumentError, match='already in flight'):
        rf.allreduce_async(np.ones(2), name=names[rf.rank()])
    rf.barrier()
    others = [rf.allreduce_async(np.ones(2), name=name) for q, name in enumerate(names)
              if q != rf.rank()]
    for h in [first] + others:
        rf.synchronize(h)
    assert issubclass(rf.InvalidArgumentError, ValueError)
