"""Horovod scripts that used to hang under ringfold (issue 15, items 1 and 2), run as Horovod's
own tests run them, plus the neighbouring cases: every collective in one-rank process sets
(dynamic and static), and join next to named, averaged allreduces, allgathers and the other
collectives, with unnamed calls after a join.

Nothing here may hang: run.sh sets RINGFOLD_STALL_SHUTDOWN_TIME=20, so a stalled collective
fails within seconds, and each test also runs under a watchdog that ends the process with every
thread's traceback if it lasts more than WATCHDOG_SECONDS (ringfoldrun then stops the job).
"""
import faulthandler
import itertools
import os
import sys

import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402

WATCHDOG_SECONDS = 120


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


def _world_size():
    return int(os.environ.get('RINGFOLD_SIZE') or os.environ.get('WORLD_SIZE') or hvd.size())


# ---- item 1: collectives in process sets of one rank ------------------------------------------

def _run_every_collective_alone(ps):
    """Every collective of ringfold.torch in `ps`, a set whose only member is this rank: each is
    a copy (Horovod completes them at once). root_rank is a global rank, as in Horovod."""
    me = hvd.rank()
    assert ps.size() == 1 and ps.rank() == 0 and ps.included()
    t = torch.arange(6, dtype=torch.float32).reshape(3, 2) + 10 * me

    assert torch.equal(hvd.broadcast(t, root_rank=me, process_set=ps), t)
    assert torch.equal(hvd.broadcast(t, root_rank=me, name='one.bcast', process_set=ps), t)
    inplace = t.clone()
    hvd.broadcast_(inplace, root_rank=me, process_set=ps)
    assert torch.equal(inplace, t)
    obj = {'rank': me, 'payload': list(range(me + 2))}
    assert hvd.broadcast_object(obj, root_rank=me, process_set=ps) == obj
    assert hvd.broadcast_object(obj, root_rank=me, name='one.obj', process_set=ps) == obj

    # Broadcast with autograd: the gradient is the set's average of the output's gradient,
    # which in a one-rank set is that gradient itself (this rank is the root).
    leaf = t.clone().requires_grad_()
    out = hvd.broadcast(leaf, root_rank=me, process_set=ps)
    (out * 3).sum().backward()
    assert torch.equal(out.detach(), t)
    assert torch.equal(leaf.grad, torch.full_like(t, 3))

    for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max):
        assert torch.equal(hvd.allreduce(t, op=op, process_set=ps), t)
    assert torch.equal(hvd.allreduce(t, average=True, name='one.avg', process_set=ps), t)
    inplace = t.clone()
    hvd.allreduce_(inplace, op=hvd.Sum, process_set=ps)
    assert torch.equal(inplace, t)
    leaf = t.clone().requires_grad_()
    hvd.allreduce(leaf, op=hvd.Sum, process_set=ps).sum().backward()
    assert torch.equal(leaf.grad, torch.ones_like(t))
    grouped = hvd.grouped_allreduce([t, t * 2], op=hvd.Sum, process_set=ps)
    assert torch.equal(grouped[0], t) and torch.equal(grouped[1], t * 2)

    assert torch.equal(hvd.allgather(t, process_set=ps), t)
    gathered = hvd.grouped_allgather([t, t[:1]], process_set=ps)
    assert torch.equal(gathered[0], t) and torch.equal(gathered[1], t[:1])
    assert hvd.allgather_object(obj, process_set=ps) == [obj]

    assert torch.equal(hvd.alltoall(t, process_set=ps), t)
    received, splits = hvd.alltoall(t, splits=torch.tensor([3], dtype=torch.int32), process_set=ps)
    assert torch.equal(received, t) and splits.tolist() == [3]

    assert torch.equal(hvd.reducescatter(t, op=hvd.Sum, process_set=ps), t)
    assert torch.equal(hvd.reducescatter(t, op=hvd.Average, process_set=ps), t)
    scattered = hvd.grouped_reducescatter([t, t * 2], op=hvd.Sum, process_set=ps)
    assert torch.equal(scattered[0], t) and torch.equal(scattered[1], t * 2)

    handle = hvd.allreduce_async(t, op=hvd.Sum, name='one.async', process_set=ps)
    assert torch.equal(hvd.synchronize(handle), t)
    hvd.barrier(process_set=ps)


def test_every_collective_in_one_rank_dynamic_sets():
    """Issue 15 item 1 as reported: each rank adds [0] and [1] (the even and the odd ranks at 2
    ranks) and broadcasts in its own set from its first rank; with more ranks, every rank gets
    a set of its own. Used to hang both ranks (the root was read as a rank within the set, so
    the odd rank failed, and the ranks went on out of step)."""
    size = hvd.size()
    singles = [hvd.add_process_set([q]) for q in range(size)]
    try:
        _run_every_collective_alone(singles[hvd.rank()])
        hvd.barrier()
    finally:
        for ps in reversed(singles):
            hvd.remove_process_set(ps)


def test_horovod_even_odd_broadcast_process_sets():
    """Horovod's test_horovod_broadcast_process_sets: even and odd ranks (one rank each at 2
    ranks), every root of the own set, broadcast, broadcast_object and autograd."""
    rank, size = hvd.rank(), hvd.size()
    even = hvd.add_process_set([q for q in range(size) if q % 2 == 0])
    odd = hvd.add_process_set([q for q in range(size) if q % 2 == 1])
    try:
        mine = even if rank % 2 == 0 else odd
        for dtype, dim, root in itertools.product([torch.uint8, torch.int32, torch.float16, torch.float64],
                                                  [1, 2, 3], mine.ranks):
            tensor = (torch.ones([17] * dim) * rank).to(dtype)
            expect = (torch.ones([17] * dim) * root).to(dtype)
            assert torch.equal(hvd.broadcast(tensor, root, process_set=mine), expect)
            assert hvd.broadcast_object({'from': rank}, root_rank=root, process_set=mine) == {'from': root}
            leaf = torch.ones(5, requires_grad=True)
            hvd.broadcast(leaf, root, process_set=mine).sum().backward()
            assert torch.equal(leaf.grad, torch.ones(5) if rank == root else torch.zeros(5))
        hvd.barrier()
    finally:
        hvd.remove_process_set(odd)
        hvd.remove_process_set(even)


def test_every_collective_in_one_rank_static_sets():
    """The same with sets of one rank passed to init (static process sets)."""
    hvd.shutdown()
    size = _world_size()
    singles = [hvd.ProcessSet([q]) for q in range(size)]
    hvd.init(process_sets=singles)
    try:
        _run_every_collective_alone(singles[hvd.rank()])
        hvd.barrier()
    finally:
        hvd.shutdown()
        hvd.init()


# ---- item 2: join with named, averaged allreduces and with allgather --------------------------

INTEGRAL = (torch.int32, torch.int64)


@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.float32, torch.float64])
def test_horovod_join_allreduce(dtype):
    """Horovod's test_horovod_join_allreduce: the joined rank contributes zeros and the average
    divides by the whole set's size; join() returns the last rank to join, on every rank. Ran
    with and without the response cache warm, each rank joining first in turn."""
    rank, size = hvd.rank(), hvd.size()
    for dim, first_join_rank, caching in itertools.product([1, 2, 3], range(size), [False, True]):
        torch.manual_seed(1234)
        tensor_a = torch.FloatTensor(*([5] * dim)).random_(-100, 100).to(dtype)
        tensor_b = torch.FloatTensor(*([17] * dim)).random_(-100, 100).to(dtype)
        if caching:
            handle_a = hvd.allreduce_async(tensor_a, name='tensor_a', average=True)
            handle_b = hvd.allreduce_async(tensor_b, name='tensor_b', average=True)
            hvd.synchronize(handle_a)
            hvd.synchronize(handle_b)
        if rank == first_join_rank:
            ret = hvd.join()
        else:
            handle_a = hvd.allreduce_async(tensor_a, name='tensor_a', average=True)
            handle_b = hvd.allreduce_async(tensor_b, name='tensor_b', average=True)
            averaged_a = hvd.synchronize(handle_a)
            averaged_b = hvd.synchronize(handle_b)
            ret = hvd.join()

            def check(averaged, t):
                if dtype in INTEGRAL:
                    expected = (t * (size - 1)).div(size, rounding_mode='trunc')
                else:
                    expected = t * (size - 1) / size
                # Exact for integers and at 2 ranks (scaling by 1/2 is exact); with more ranks
                # the float sum is scaled by 1/size in the tensor's type, as Horovod does,
                # which may differ from the division in the last bit.
                exact = dtype in INTEGRAL or size == 2
                rtol = 0 if exact else (1e-6 if dtype == torch.float32 else 1e-14)
                assert torch.allclose(averaged, expected, rtol=rtol, atol=0), (dim, first_join_rank, caching)

            check(averaged_a, tensor_a)
            check(averaged_b, tensor_b)
        assert ret != first_join_rank
        assert hvd.allgather_object(ret) == [ret] * size


def test_horovod_join_allgather():
    """Horovod's test_horovod_join_allgather: an allgather while a rank is joined raises on the
    ranks that submitted it (as in Horovod: "not supported with Join"); the joined rank is not
    touched, join() returns the last rank, and the ranks are in step afterwards, for named and
    unnamed calls alike (the joined rank used to keep the error for the unnamed allgather's name
    and fail its own next unnamed allgather, or wait for a name the others had moved past)."""
    rank, size = hvd.rank(), hvd.size()
    tensor = torch.ones([17] * 3) * rank
    for first_join_rank in range(size):
        if rank == first_join_rank:
            ret = hvd.join()
        else:
            with pytest.raises(RuntimeError, match='joined'):
                hvd.allgather(tensor)
            ret = hvd.join()
        assert ret != first_join_rank
        assert hvd.allgather_object(ret) == [ret] * size
        gathered = hvd.allgather(tensor)                       # unnamed, after the join
        assert gathered.shape == (17 * size, 17, 17)
        assert gathered[::17, 0, 0].tolist() == [float(q) for q in range(size)]


def test_unnamed_calls_after_an_uneven_join():
    """Uneven data with unnamed allreduces, as a training loop with hvd.join() writes it: rank r
    makes r + 1 calls (the joined ranks contribute zeros), then joins. Afterwards unnamed calls
    of every kind must match across ranks again, although the ranks made different numbers of
    them before the join (they used to wait for each other's names forever)."""
    rank, size = hvd.rank(), hvd.size()
    for step in range(rank + 1):
        out = hvd.allreduce(torch.ones(4), op=hvd.Sum)
        assert out.tolist() == [float(size - step)] * 4          # ranks < step have joined
    last = hvd.join()
    assert last == size - 1
    assert hvd.allreduce(torch.ones(4), op=hvd.Sum).tolist() == [float(size)] * 4
    assert hvd.allgather(torch.tensor([rank])).tolist() == list(range(size))
    assert hvd.broadcast(torch.tensor([rank]), root_rank=0).tolist() == [0]


@pytest.mark.parametrize('what', ['broadcast', 'alltoall', 'reducescatter'])
def test_join_with_collectives_that_cannot_run_joined(what):
    """Horovod refuses broadcast, alltoall and reducescatter while a rank is joined: they raise
    on the ranks that submitted them, the joined rank waits on, and all ranks are in step once
    everyone joined."""
    rank, size = hvd.rank(), hvd.size()
    t = torch.ones(size * 2, 3)
    if rank == 0:
        ret = hvd.join()
    else:
        with pytest.raises(RuntimeError, match='joined'):
            if what == 'broadcast':
                hvd.broadcast(t, root_rank=1)
            elif what == 'alltoall':
                hvd.alltoall(t)
            else:
                hvd.reducescatter(t, op=hvd.Sum)
        ret = hvd.join()
    assert ret != 0 or size == 1
    assert hvd.allgather_object(ret) == [ret] * size
    if what == 'broadcast':
        assert torch.equal(hvd.broadcast(t * rank, root_rank=size - 1), t * (size - 1))
    elif what == 'alltoall':
        assert torch.equal(hvd.alltoall(t), torch.ones(size * 2, 3))
    else:
        assert torch.equal(hvd.reducescatter(t, op=hvd.Sum), torch.full((2, 3), float(size)))


def test_join_next_to_one_rank_sets():
    """Rank 0 joins while the others run every kind of collective in process sets of their own
    (negotiated apart from the global set's join) and a global allreduce (rank 0 contributes
    zeros); then they join, and the sets are removed by everyone."""
    rank, size = hvd.rank(), hvd.size()
    singles = [hvd.add_process_set([q]) for q in range(size)]
    try:
        t = torch.arange(4.0) + rank
        if rank == 0:
            last = hvd.join()
        else:
            mine = singles[rank]
            assert torch.equal(hvd.allreduce(t, op=hvd.Sum, process_set=mine), t)
            assert torch.equal(hvd.allgather(t, process_set=mine), t)
            assert torch.equal(hvd.broadcast(t, root_rank=rank, process_set=mine), t)
            assert torch.equal(hvd.alltoall(t, process_set=mine), t)
            hvd.barrier(process_set=mine)
            expected = sum(torch.arange(4.0) + q for q in range(1, size))
            assert torch.equal(hvd.allreduce(t, op=hvd.Sum, name='joined.sum'), expected)
            last = hvd.join()
        assert last != 0 or size == 1
        assert hvd.allgather_object(last) == [last] * size
    finally:
        for ps in reversed(singles):
            hvd.remove_process_set(ps)
