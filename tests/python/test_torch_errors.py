"""Disagreements between ranks raise HorovodInternalError on every rank (never a hang), and
the engine keeps working afterwards."""
import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402


def test_shape_mismatch_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match=r"Mismatched allreduce tensor shapes for 'allreduce.shape_err'"):
        hvd.allreduce(torch.zeros(2 + hvd.rank()), name='shape_err')


def test_allgather_trailing_shape_mismatch():
    with pytest.raises(hvd.HorovodInternalError, match='allgather.gather_err'):
        hvd.allgather(torch.zeros(2, 1 + hvd.rank()), name='gather_err')


def test_dtype_mismatch_on_every_rank():
    dtype = torch.float32 if hvd.rank() == 0 else torch.float64
    with pytest.raises(hvd.HorovodInternalError, match='dtype_err') as info:
        hvd.allreduce(torch.zeros(4, dtype=dtype), name='dtype_err')
    assert 'rank 0: float;' in str(info.value) and str(info.value).endswith(': double')


def test_op_mismatch_on_every_rank():
    op = hvd.Sum if hvd.rank() == 0 else hvd.Max
    with pytest.raises(hvd.HorovodInternalError, match='op_err'):
        hvd.allreduce(torch.zeros(4), name='op_err', op=op)


def test_broadcast_root_mismatch_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match='root') as info:
        hvd.broadcast(torch.zeros(3), root_rank=hvd.rank(), name='root_err')
    assert 'root_err' in str(info.value)


def test_duplicate_name_in_flight():
    # Each rank's own name stays in flight until every rank made its duplicate call: the others
    # submit it only after the barrier (with one shared name, the first call could complete
    # before the second when the other ranks had submitted first).
    mine = 'dup.%d' % hvd.rank()
    first = hvd.allreduce_async(torch.ones(2), name=mine)
    with pytest.raises(hvd.InvalidArgumentError, match=mine):        # a ValueError, as in Horovod
        hvd.allreduce_async(torch.ones(2), name=mine)
    hvd.barrier()
    others = [hvd.allreduce_async(torch.ones(2), name='dup.%d' % r) for r in range(hvd.size())
              if r != hvd.rank()]
    torch.testing.assert_close(hvd.synchronize(first), torch.ones(2))
    for h in others:
        hvd.synchronize(h)
    # once completed, the names may be reused
    for r in range(hvd.size()):
        torch.testing.assert_close(hvd.allreduce(torch.ones(2), name='dup.%d' % r), torch.ones(2))


def test_unsupported_dtypes_are_value_errors():
    with pytest.raises(ValueError, match='torch.bool'):
        hvd.allreduce(torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match='torch.int16'):
        hvd.allreduce(torch.zeros(3, dtype=torch.int16))
    with pytest.raises(ValueError, match='complex'):
        hvd.allgather(torch.zeros(3, dtype=torch.complex64))


def test_adasum_not_implemented():
    with pytest.raises(NotImplementedError, match='Adasum'):
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)


def test_bad_handles():
    with pytest.raises(ValueError, match='unknown'):
        hvd.synchronize(987654321)
    with pytest.raises(ValueError, match='unknown'):
        hvd.poll(987654321)


def test_engine_still_works_after_errors():
    torch.testing.assert_close(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(hvd.size())))
