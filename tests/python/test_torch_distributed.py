"""The torch.distributed backend "ringfold" (ringfold.torch.distributed) against gloo, call by
call, in one job: the world group is ringfold's, and a gloo group over the same ranks computes
every reference. Run by tests/python/run.sh c10d|c10d-torchrun|c10d-env NP (ringfoldrun, torchrun,
or plain env:// variables), at 2 and 3 ranks; skipped elsewhere.

Every rank runs the same tests in the same order and makes every collective before it asserts,
so a failing test leaves the ranks in step. Results are compared bit for bit where the
arithmetic is the same (integers, bool, MIN/MAX, copies, and any float sum of 2 ranks, where
a + b is b + a); float sums and products of 3 ranks are added in another order by gloo, and are
compared within a few units in the last place.
"""
import os
from datetime import timedelta

import pytest

pytestmark = pytest.mark.filterwarnings('ignore:.*all_reduce_coalesced.*:FutureWarning')

if os.environ.get('RINGFOLD_TEST_C10D') != '1':
    pytest.skip('torch.distributed backend tests: run by tests/python/run.sh c10d NP', allow_module_level=True)

torch = pytest.importorskip('torch')
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.distributed_c10d import _coalescing_manager  # noqa: E402

import ringfold.torch.distributed as rfd  # noqa: E402

RedOp = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.bool]
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
OPS = ['SUM', 'AVG', 'PRODUCT', 'MIN', 'MAX', 'PREMUL_SUM', 'BAND', 'BOR', 'BXOR']
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope='session', autouse=True)
def engine():
    """Replaces conftest's: here the backend starts ringfold's engine itself."""
    yield


class G:
    rank = size = None
    gloo = None


@pytest.fixture(scope='module', autouse=True)
def world():
    dist.init_process_group('ringfold', timeout=timedelta(seconds=60))
    G.rank, G.size = dist.get_rank(), dist.get_world_size()
    G.gloo = dist.new_group(backend='gloo')
    yield
    dist.destroy_process_group()


def make(dtype, shape, seed, rank=None):
    """Deterministic per-rank data whose products and sums stay representable."""
    rank = G.rank if rank is None else rank
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def gathered(t, group=None):
    """Every rank's t (through gloo), as a list."""
    group = group or G.gloo
    n = dist.get_world_size(group)
    out = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(out, t.contiguous(), group=group)
    return out


def same_everywhere(t):
    return all(torch.equal(x, t) for x in gathered(t))


def redop(name):
    return dist._make_nccl_premul_sum(0.5) if name == 'PREMUL_SUM' else getattr(RedOp, name)


def reference_allreduce(x, name):
    """What the reduction should give, from every rank's input (gloo's all_gather)."""
    parts = gathered(x)
    if name == 'PREMUL_SUM':      # integers: each rank's x * factor truncated, as ringfold prescales
        parts = [(p.double() * 0.5) if x.dtype.is_floating_point else (p.double() * 0.5).trunc() for p in parts]
        return sum(parts[1:], parts[0]).to(x.dtype)
    if name == 'AVG':
        total = sum(p.double() for p in parts)
        return (total / len(parts)).to(x.dtype) if x.dtype.is_floating_point else \
            torch.div(sum(p.long() for p in parts), len(parts), rounding_mode='trunc').to(x.dtype)
    return None


def assert_matches(got, want, dtype, exact):
    if exact or dtype not in TOL:
        assert torch.equal(got, want), '%s\n!=\n%s' % (got, want)
    else:
        torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype])


# ---- the backend itself -----------------------------------------------------------------------

def test_backend_is_ringfold():
    assert dist.get_backend() == 'ringfold'
    assert isinstance(dist.group.WORLD, rfd.ProcessGroupRingfold)
    assert rfd.FEATURES['allreduce'] and 'new_group_delegation' in rfd.FEATURES
    assert dist.group.WORLD.name() == 'ringfold'


# ---- allreduce: every op x dtype against gloo -------------------------------------------------

@pytest.mark.parametrize('name', OPS)
@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_all_reduce(dtype, name):
    x = make(dtype, (4, 3), seed=20 * OPS.index(name) + DTYPES.index(dtype))
    ours, theirs = x.clone(), x.clone()
    ours_error = gloo_error = None
    try:
        dist.all_reduce(ours, op=redop(name))
    except (ValueError, RuntimeError) as e:
        ours_error = e
    try:
        dist.all_reduce(theirs, op=redop(name), group=G.gloo)
    except RuntimeError as e:
        gloo_error = e
    want = reference_allreduce(x, name)
    consistent = same_everywhere(ours) if ours_error is None else True
    if ours_error is not None:
        # ringfold refuses only what gloo refuses too, and says why
        assert gloo_error is not None, 'ringfold refused %s on %s, gloo did not: %s' % (name, dtype, ours_error)
        assert name in ('BAND', 'BOR', 'BXOR', 'AVG', 'PREMUL_SUM') and name in str(ours_error)
        return
    assert consistent, 'ranks disagree on the result'
    if gloo_error is None:
        exact = (not dtype.is_floating_point) or name in ('MIN', 'MAX') or G.size == 2
        assert_matches(ours, theirs, dtype, exact)
    else:
        assert want is not None, 'gloo refused %s on %s and there is no reference' % (name, dtype)
        exact = not dtype.is_floating_point
        assert_matches(ours, want, dtype, exact)


def test_all_reduce_int16_and_complex_fold():
    a = make(torch.int64, (5,), 7).to(torch.int16)
    dist.all_reduce(a)
    c = torch.complex(make(torch.float32, (3,), 8), make(torch.float32, (3,), 9))
    theirs = c.clone()
    dist.all_reduce(c)
    dist.all_reduce(theirs, group=G.gloo)
    assert torch.equal(a, sum(gathered(make(torch.int64, (5,), 7))).to(torch.int16))
    assert_matches(c, theirs, torch.float32, G.size == 2)


def test_all_reduce_noncontiguous_and_scalar():
    x = make(torch.float32, (6, 4), 11).t()
    s = make(torch.float64, (), 12)
    xt, st = x.clone(), s.clone()
    dist.all_reduce(x, op=RedOp.MAX)
    dist.all_reduce(s)
    dist.all_reduce(xt, op=RedOp.MAX, group=G.gloo)
    dist.all_reduce(st, group=G.gloo)
    assert torch.equal(x, xt) and x.stride() == (1, 4)
    assert_matches(s, st, torch.float64, G.size == 2)


# ---- copying collectives -------------------------------------------------------------------------

COPY_DTYPES = DTYPES + [torch.int16, torch.complex64]


def make_any(dtype, shape, seed, rank=None):
    if dtype == torch.complex64:
        return torch.complex(make(torch.float32, shape, seed, rank), make(torch.float32, shape, seed + 1, rank))
    if dtype == torch.int16:
        return make(torch.int32, shape, seed, rank).to(torch.int16)
    return make(dtype, shape, seed, rank)


GLOO_COPIES = set(DTYPES) | {torch.complex64}      # gloo has no int16


@pytest.mark.parametrize('dtype', COPY_DTYPES, ids=str)
def test_broadcast(dtype):
    for root in range(G.size):
        x = make_any(dtype, (3, 2), 20 + root)
        ours, theirs = x.clone(), x.clone()
        dist.broadcast(ours, src=root)
        if dtype in GLOO_COPIES:
            dist.broadcast(theirs, src=root, group=G.gloo)
        else:
            theirs = make_any(dtype, (3, 2), 20 + root, rank=root)
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize('dtype', COPY_DTYPES, ids=str)
def test_all_gather(dtype):
    x = make_any(dtype, (2, 3), 30)
    ours = [torch.empty_like(x) for _ in range(G.size)]
    theirs = [torch.empty_like(x) for _ in range(G.size)]
    dist.all_gather(ours, x)
    if dtype in GLOO_COPIES:
        dist.all_gather(theirs, x, group=G.gloo)
    else:
        theirs = [make_any(dtype, (2, 3), 30, rank=r) for r in range(G.size)]
    flat = torch.empty((G.size * 2, 3), dtype=x.dtype)
    stacked = torch.empty((G.size, 2, 3), dtype=x.dtype)
    dist.all_gather_into_tensor(flat, x)
    dist.all_gather_into_tensor(stacked, x)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert torch.equal(flat, torch.cat(theirs)) and torch.equal(stacked, torch.stack(theirs))


def test_all_gather_uneven_outputs():
    # gloo refuses outputs of different sizes; ringfold gathers them (as NCCL does)
    x = make(torch.float32, (G.rank + 1,), 31)
    outs = [torch.empty(r + 1) for r in range(G.size)]
    dist.all_gather(outs, x)
    want = [make(torch.float32, (r + 1,), 31, rank=r) for r in range(G.size)]
    assert all(torch.equal(a, b) for a, b in zip(outs, want))


@pytest.mark.parametrize('name', ['SUM', 'AVG', 'MAX', 'BOR', 'PREMUL_SUM'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool], ids=str)
def test_reduce_scatter(dtype, name):
    x = make(dtype, (G.size * 4,), 40)
    ours_t, theirs_t = torch.empty(4, dtype=dtype), torch.empty(4, dtype=dtype)
    ours_l, theirs_l = torch.empty(4, dtype=dtype), torch.empty(4, dtype=dtype)
    errors = []
    for fn, args, group in ((dist.reduce_scatter_tensor, (ours_t, x), None),
                            (dist.reduce_scatter_tensor, (theirs_t, x), G.gloo),
                            (dist.reduce_scatter, (ours_l, list(x.chunk(G.size))), None),
                            (dist.reduce_scatter, (theirs_l, list(x.chunk(G.size))), G.gloo)):
        try:
            fn(*args, op=redop(name), group=group)
            errors.append(None)
        except (ValueError, RuntimeError) as e:
            errors.append(e)
    full = x.clone()
    try:
        dist.all_reduce(full, op=redop(name))         # ringfold's allreduce, checked above
    except (ValueError, RuntimeError):
        full = None
    if full is None:
        assert errors[0] is not None and errors[2] is not None
        return
    mine = full.chunk(G.size)[G.rank]
    exact = not dtype.is_floating_point or name in ('MAX',) or G.size == 2
    assert_matches(ours_t, mine, dtype, exact)
    assert_matches(ours_l, mine, dtype, exact)
    if errors[1] is None:
        assert_matches(ours_t, theirs_t, dtype, exact)


def test_reduce_scatter_uneven_inputs():
    sizes = [r + 2 for r in range(G.size)]
    inputs = [make(torch.int32, (s,), 41 + i) for i, s in enumerate(sizes)]
    out = torch.empty(sizes[G.rank], dtype=torch.int32)
    dist.reduce_scatter(out, inputs)
    want = sum(make(torch.int32, (sizes[G.rank],), 41 + G.rank, rank=k) for k in range(G.size))
    assert torch.equal(out, want)


@pytest.mark.parametrize('dtype', [torch.float32, torch.int64, torch.bool, torch.float16], ids=str)
def test_all_to_all_single(dtype):
    n = G.size
    # equal splits, 2-D rows
    x = make(dtype, (n * 2, 3), 50)
    ours, theirs = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(ours, x)
    dist.all_to_all_single(theirs, x, group=G.gloo)
    # uneven splits: rank r sends (r + j) % 3 rows to rank j
    send = [(G.rank + j) % 3 for j in range(n)]
    recv = [(j + G.rank) % 3 for j in range(n)]
    y = make(dtype, (sum(send), 2), 51)
    ours_u, theirs_u = torch.empty((sum(recv), 2), dtype=dtype), torch.empty((sum(recv), 2), dtype=dtype)
    dist.all_to_all_single(ours_u, y, recv, send)
    dist.all_to_all_single(theirs_u, y, recv, send, group=G.gloo)
    assert torch.equal(ours, theirs) and torch.equal(ours_u, theirs_u)


def test_all_to_all_lists():
    n, r = G.size, G.rank
    same = [make(torch.float64, (3,), 60 + j) for j in range(n)]
    ours = [torch.empty(3, dtype=torch.float64) for _ in range(n)]
    theirs = [torch.empty(3, dtype=torch.float64) for _ in range(n)]
    dist.all_to_all(ours, same)
    dist.all_to_all(theirs, same, group=G.gloo)
    # tensors of different sizes (gloo refuses them): rank r sends j + r + 1 elements to rank j
    ins = [make(torch.int64, (r + j + 1,), 65 + j) for j in range(n)]
    outs = [torch.empty(j + r + 1, dtype=torch.int64) for j in range(n)]
    dist.all_to_all(outs, ins)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert all(torch.equal(outs[j], make(torch.int64, (j + r + 1,), 65 + r, rank=j)) for j in range(n))


# ---- rooted collectives ----------------------------------------------------------------------------

@pytest.mark.parametrize('name', ['SUM', 'MAX', 'PRODUCT', 'BAND'])
def test_reduce(name):
    for root in range(G.size):
        x = make(torch.int64, (5,), 70 + root)
        ours, theirs = x.clone(), x.clone()
        dist.reduce(ours, dst=root, op=getattr(RedOp, name))
        dist.reduce(theirs, dst=root, op=getattr(RedOp, name), group=G.gloo)
        if G.rank == root:
            assert torch.equal(ours, theirs)
        else:
            assert torch.equal(ours, x)          # ringfold leaves the others' tensors alone


def test_reduce_average_into_a_strided_tensor():
    # AVG (which gloo lacks: its reference is gloo's SUM / n) into a transposed view, which the
    # engine's reduce gets as a contiguous copy that only the root copies back.
    for root in range(G.size):
        base = make(torch.float32, (4, 6), 75 + root)
        ours, theirs = base.clone().t(), base.clone().t()
        assert not ours.is_contiguous()
        dist.reduce(ours, dst=root, op=RedOp.AVG)
        dist.reduce(theirs, dst=root, op=RedOp.SUM, group=G.gloo)
        if G.rank == root:
            assert torch.allclose(ours, theirs / G.size, rtol=1e-6, atol=0)
        else:
            assert torch.equal(ours, base.t())


def test_gather_and_scatter():
    for root in range(G.size):
        x = make(torch.float32, (2, 2), 80 + root)
        ours = [torch.empty_like(x) for _ in range(G.size)] if G.rank == root else None
        theirs = [torch.empty_like(x) for _ in range(G.size)] if G.rank == root else None
        dist.gather(x, ours, dst=root)
        dist.gather(x, theirs, dst=root, group=G.gloo)
        pieces = [make(torch.int32, (3,), 90 + j) for j in range(G.size)] if G.rank == root else None
        got, want = torch.empty(3, dtype=torch.int32), torch.empty(3, dtype=torch.int32)
        dist.scatter(got, pieces, src=root)
        dist.scatter(want, pieces, src=root, group=G.gloo)
        into = torch.empty((G.size, 2, 2)) if G.rank == root else None
        dist.gather_into_tensor(x, into, dst=root)
        if G.rank == root:
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
            assert torch.equal(into, torch.stack(theirs))
        assert torch.equal(got, want)


def test_object_collectives():
    objs = [None] * G.size
    dist.all_gather_object(objs, {'rank': G.rank, 'payload': list(range(G.rank * 50))})
    lst = [{'from': 'root'}, 42] if G.rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    gathered_objs = [None] * G.size if G.rank == 0 else None
    dist.gather_object(('r', G.rank), gathered_objs, dst=0)
    out = [None]
    dist.scatter_object_list(out, [('to', r) for r in range(G.size)] if G.rank == 0 else None, src=0)
    assert objs == [{'rank': r, 'payload': list(range(r * 50))} for r in range(G.size)]
    assert lst == [{'from': 'root'}, 42]
    if G.rank == 0:
        assert gathered_objs == [('r', r) for r in range(G.size)]
    assert out == [('to', G.rank)]


# ---- point-to-point, barrier ---------------------------------------------------------------------

def test_send_recv():
    n, r = G.size, G.rank
    right, left = (r + 1) % n, (r - 1) % n
    x = make(torch.float64, (4, 4), 100)
    got = torch.empty_like(x)
    reqs = [dist.isend(x, right), dist.irecv(got, left)]
    for q in reqs:
        q.wait()
    if r == 0:
        dist.send(torch.arange(5, dtype=torch.int32), dst=n - 1, tag=7)
        any_src = None
    elif r == n - 1:
        buf = torch.empty(5, dtype=torch.int32)
        any_src = dist.recv(buf, tag=7)
        assert torch.equal(buf, torch.arange(5, dtype=torch.int32))
    ops = [dist.P2POp(dist.isend, x + 1, right), dist.P2POp(dist.irecv, torch.empty_like(x), left)]
    batch = dist.batch_isend_irecv(ops)
    for q in batch:
        q.wait()
    dist.barrier()
    assert torch.equal(got, make(torch.float64, (4, 4), 100, rank=left))
    if r == n - 1:
        assert any_src == 0
    assert torch.equal(ops[1].tensor, make(torch.float64, (4, 4), 100, rank=left) + 1)


def test_barrier():
    for _ in range(3):
        dist.barrier()
    w = dist.barrier(async_op=True)
    assert w.wait()


# ---- async, futures, coalescing ------------------------------------------------------------------

def test_async_work_and_futures():
    xs = [make(torch.float32, (1000,), 110 + i) for i in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    fut = works[0].get_future()
    chained = works[1].get_future().then(lambda f: f.value()[0] * 2)
    works[2].wait()
    while not works[3].is_completed():
        pass
    value = fut.wait()
    doubled = chained.wait()
    bg = make(torch.float32, (3,), 115)
    b = dist.broadcast(bg, src=0, async_op=True)
    b.wait()
    refs = [x.clone() for x in xs]
    assert isinstance(value, list) and value[0] is xs[0]          # DDP reads fut.value()[0]
    assert works[3].is_success() and works[3].exception() is None
    assert torch.equal(doubled, xs[1] * 2)
    assert all(same_everywhere(r) for r in refs)


def test_coalescing_manager():
    xs = [make(torch.float32, (7,), 120 + i) for i in range(3)]
    ref = [x.clone() for x in xs]
    with _coalescing_manager():
        for x in xs:
            dist.all_reduce(x)
    with _coalescing_manager(async_ops=True) as cm:
        for x in ref:
            dist.all_reduce(x)
    cm.wait()
    ins = [make(torch.float32, (3,), 130 + i) for i in range(2)]
    outs = [torch.empty(3 * G.size) for _ in ins]
    with _coalescing_manager(device=torch.device('cpu'), async_ops=True) as cm2:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm2.wait()
    big = [make(torch.float64, (2 * G.size,), 140 + i) for i in range(2)]
    small = [torch.empty(2, dtype=torch.float64) for _ in big]
    with _coalescing_manager():
        for o, i in zip(small, big):
            dist.reduce_scatter_tensor(o, i)
    c = [make(torch.int32, (4,), 150 + i) for i in range(3)]
    cref = [t.clone() for t in c]
    dist.all_reduce_coalesced(c)
    for t in cref:
        dist.all_reduce(t, group=G.gloo)
    checks = [torch.equal(a, b) for a, b in zip(xs, ref)]
    checks += [torch.equal(o, torch.cat(gathered(i))) for o, i in zip(outs, ins)]
    sums = []
    for i in big:
        s = i.clone()
        dist.all_reduce(s, group=G.gloo)
        sums.append(s.chunk(G.size)[G.rank])
    assert all(checks)
    for o, s in zip(small, sums):
        assert_matches(o, s, torch.float64, G.size == 2)
    assert all(torch.equal(a, b) for a, b in zip(c, cref))


# ---- subgroups -------------------------------------------------------------------------------------

def test_subgroups_interleave_with_world():
    n, r = G.size, G.rank
    pairs = [[0, 1]] + ([[1, 2]] if n > 2 else [])
    ours = [dist.new_group(p) for p in pairs]
    theirs = [dist.new_group(p, backend='gloo') for p in pairs]
    whole = dist.new_group()                       # all ranks: the engine's global set
    results, references = [], []
    for step in range(3):
        pending = []
        x = make(torch.float64, (6,), 160 + step)
        pending.append(dist.all_reduce(x, async_op=True))
        for p, g in zip(pairs, ours):
            if r in p:
                y = make(torch.float64, (5,), 170 + step)
                pending.append(dist.all_reduce(y, group=g, async_op=True))
                z = make(torch.int64, (3,), 180 + step)
                pending.append(dist.broadcast(z, src=p[-1], group=g, async_op=True))
                results += [y, z]
        w = make(torch.float32, (2,), 190 + step)
        pending.append(dist.all_reduce(w, group=whole, async_op=True, op=RedOp.MAX))
        for q in reversed(pending):
            q.wait()
        results += [x, w]
    for step in range(3):
        x = make(torch.float64, (6,), 160 + step)
        dist.all_reduce(x, group=G.gloo)
        for p, g in zip(pairs, theirs):
            if r in p:
                y = make(torch.float64, (5,), 170 + step)
                dist.all_reduce(y, group=g)
                z = make(torch.int64, (3,), 180 + step)
                dist.broadcast(z, src=p[-1], group=g)
                references += [y, z]
        w = make(torch.float32, (2,), 190 + step)
        dist.all_reduce(w, group=G.gloo, op=RedOp.MAX)
        references += [x, w]
    members = [g for p, g in zip(pairs, ours) if r in p]
    assert all(isinstance(g, rfd.ProcessGroupRingfold) for g in members)
    assert all((g.process_set_id > 0) == (n > 2) for g in members) and whole.process_set_id == 0
    if n > 2 and r == 0:
        assert ours[1] == dist.GroupMember.NON_GROUP_MEMBER
    assert len(results) == len(references)
    for a, b in zip(results, references):
        assert_matches(a, b, a.dtype, True)


def test_subgroup_collectives_use_group_ranks():
    members = list(range(1, G.size)) if G.size > 2 else [0, 1]
    g = dist.new_group(members)
    gg = dist.new_group(members, backend='gloo')
    if G.rank in members:
        outs = [torch.empty(2) for _ in members]
        dist.all_gather(outs, torch.full((2,), float(G.rank)), group=g)
        x = torch.full((3,), float(G.rank))
        dist.broadcast(x, group_src=1, group=g)
        y = torch.full((3,), float(G.rank))
        dist.broadcast(y, group_src=1, group=gg)
        assert [o[0].item() for o in outs] == [float(m) for m in members]
        assert torch.equal(x, y) and dist.get_group_rank(g, G.rank) == members.index(G.rank)


# ---- errors ------------------------------------------------------------------------------------------

def same_message_everywhere(error):
    messages = [None] * G.size
    dist.all_gather_object(messages, str(error), group=G.gloo)
    return len(set(messages)) == 1


@pytest.mark.parametrize('case', ['shape', 'dtype', 'op', 'root', 'kind'])
def test_mismatch_is_the_same_error_everywhere(case):
    odd = G.rank == G.size - 1
    with pytest.raises(RuntimeError, match='Mismatched') as info:
        if case == 'shape':
            dist.all_reduce(torch.ones(3 + odd))
        elif case == 'dtype':
            dist.all_reduce(torch.ones(3, dtype=torch.float64 if odd else torch.float32))
        elif case == 'op':
            dist.all_reduce(torch.ones(3), op=RedOp.MAX if odd else RedOp.SUM)
        elif case == 'root':
            dist.broadcast(torch.ones(3), src=G.size - 1 if odd else 0)
        else:
            if odd:
                dist.broadcast(torch.ones(3), src=0)
            else:
                dist.all_reduce(torch.ones(3))
    assert same_message_everywhere(info.value)
    assert isinstance(info.value, dist.DistBackendError)
    x = torch.ones(2)
    dist.all_reduce(x)                       # the group still works
    assert torch.equal(x, torch.full((2,), float(G.size)))


def test_local_argument_errors():
    with pytest.raises(ValueError, match='non-integral|integer'):
        dist.all_reduce(torch.ones(2), op=RedOp.BAND)
    with pytest.raises(ValueError, match='split'):
        dist.all_to_all_single(torch.empty(G.size + 1), torch.ones(G.size + 1))
    with pytest.raises(ValueError, match='group size'):
        dist.all_gather_into_tensor(torch.empty(G.size * 2 + 1), torch.ones(2))
    x = torch.ones(2)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((2,), float(G.size)))


# ---- DistributedDataParallel against gloo ------------------------------------------------------

class Net(nn.Module):
    def __init__(self, unused):
        super().__init__()
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 4)
        if unused:                       # a layer forward never uses
            self.unused = nn.Linear(64, 4)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def train(group, variant, steps=6):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1234 + G.rank)                 # different initial weights: DDP syncs them
    model = Net(unused=variant == 'unused')
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.005 if variant == 'buckets' else 25,
              find_unused_parameters=variant == 'unused')
    if variant == 'fp16_hook':
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif variant == 'bf16_hook':
        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(77 + G.rank)
    losses = []
    for step in range(steps):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        if variant == 'no_sync' and step % 2 == 0:
            with ddp.no_sync():
                nn.functional.mse_loss(ddp(x), y).backward()
            continue
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


@pytest.mark.parametrize('variant', ['plain', 'buckets', 'unused', 'no_sync', 'fp16_hook', 'bf16_hook'])
def test_ddp_matches_gloo(variant):
    ours, our_losses = train(dist.group.WORLD, variant)
    theirs, their_losses = train(G.gloo, variant)
    worst = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
    everywhere = all(same_everywhere(p) for p in ours)
    assert everywhere, 'replicas diverged'
    if G.size == 2:
        # a + b == b + a: the same bits as gloo
        assert worst == 0.0 and our_losses == their_losses, 'max difference %g' % worst
    else:
        # 3 ranks: gloo adds the gradients in another order, a rounding apart in the gradients'
        # precision (fp32, or the hook's fp16 / bf16), over 6 steps of SGD with momentum
        bound = {'fp16_hook': 1e-3, 'bf16_hook': 1e-2}.get(variant, 1e-5)
        assert worst < bound, 'max difference %g' % worst
    print('DDP %s, %d ranks: largest parameter difference from gloo %g' % (variant, G.size, worst))


# ---- CUDA (the GPU path; needs a GPU) ---------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device on this machine')
def test_cuda_collectives():
    dev = torch.device('cuda', int(os.environ.get('LOCAL_RANK', G.rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    x = make(torch.float32, (1000,), 200).to(dev)
    ref = x.cpu()
    dist.all_reduce(x)
    dist.all_reduce(ref, group=G.gloo)
    b = make(torch.float16, (33,), 201).to(dev)
    dist.broadcast(b, src=0)
    outs = [torch.empty(4, device=dev) for _ in range(G.size)]
    dist.all_gather(outs, torch.full((4,), float(G.rank), device=dev))
    fut = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
    assert_matches(x.cpu(), ref, torch.float32, G.size == 2)
    assert torch.equal(b.cpu(), make(torch.float16, (33,), 201, rank=0))
    assert [o[0].item() for o in outs] == [float(r) for r in range(G.size)]
    assert torch.equal(fut.wait()[0].cpu(), torch.full((3,), float(G.size)))
