"""ringfold.torch collectives: every function of Horovod's API, every dtype and op, in-place,
async and grouped forms, and the autograd gradients Horovod defines."""
import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402

REDUCIBLE = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
             torch.float32, torch.float64]
COPYABLE = REDUCIBLE + [torch.bool, torch.int16]


def r():
    return hvd.rank()


def n():
    return hvd.size()


def values(rank, dtype, count=17):
    """Small exact integers, so every dtype and op has an exact expected result."""
    base = torch.arange(count) % 4 + rank + 1
    return base.to(dtype)


def test_queries():
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert hvd.cross_size() >= 1 and 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.is_homogeneous() in (True, False)
    assert hvd.mpi_built() is False and hvd.gloo_built() is False and hvd.nccl_built() == 0
    assert hvd.mpi_enabled() is False and hvd.gloo_enabled() is False
    assert hvd.ddl_built() is False and hvd.ccl_built() is False and hvd.rocm_built() is False
    assert hvd.cuda_built() in (True, False)
    assert hvd.mpi_threads_supported() is False
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize('dtype', REDUCIBLE, ids=str)
@pytest.mark.parametrize('op', ['sum', 'min', 'max', 'product', 'average'])
def test_allreduce_every_dtype_and_op(dtype, op):
    inputs = [values(q, dtype) for q in range(n())]
    wide = [t.double() for t in inputs]
    if op == 'sum':
        expected, hop = sum(wide), hvd.Sum
    elif op == 'min':
        expected, hop = torch.stack(wide).min(0).values, hvd.Min
    elif op == 'max':
        expected, hop = torch.stack(wide).max(0).values, hvd.Max
    elif op == 'product':
        expected, hop = torch.stack(wide).prod(0), hvd.Product
    else:
        expected, hop = sum(wide) / n(), hvd.Average
    out = hvd.allreduce(inputs[r()], op=hop)
    assert out.dtype == dtype and out.shape == inputs[0].shape
    if dtype.is_floating_point:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)
    elif op == 'average':
        # Integer average as Horovod: sum * (1 / size) in double, truncated toward zero.
        want = (sum(wide) * (1.0 / n())).trunc()
        assert torch.equal(out, want.to(dtype)), (out, want)
    else:
        assert torch.equal(out, expected.to(dtype))


def test_allreduce_scale_factors_and_deprecated_average():
    x = torch.full((4,), float(r() + 1))
    total = float(sum(range(1, n() + 1)))
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    torch.testing.assert_close(out, torch.full((4,), total * 1.5))
    with pytest.warns(DeprecationWarning):
        summed = hvd.allreduce(x, average=False)
    torch.testing.assert_close(summed, torch.full((4,), total))
    with pytest.raises(ValueError, match='supersedes'):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_allreduce_in_place_async_and_poll():
    x = torch.full((3, 2), float(r()))
    y = x.clone()
    h = hvd.allreduce_async_(x, name='inplace', op=hvd.Sum)
    result = hvd.synchronize(h)
    assert result is x
    torch.testing.assert_close(x, torch.full((3, 2), float(sum(range(n())))))
    assert hvd.allreduce_(y, op=hvd.Max) is y and y.max().item() == n() - 1
    h = hvd.allreduce_async(x, name='polled', op=hvd.Min)
    while not hvd.poll(h):
        pass
    torch.testing.assert_close(hvd.synchronize(h), x)


def test_allreduce_non_contiguous_in_place():
    base = torch.zeros(4, 6)
    view = base[:, ::2]                 # not contiguous
    view.fill_(1.0)
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.equal(base[:, ::2], torch.full((4, 3), float(n())))
    assert torch.equal(base[:, 1::2], torch.zeros(4, 3))


def test_allreduce_fp16_compression_error_bound():
    torch.manual_seed(1234 + r())
    x = torch.randn(1000) * 10
    exact = hvd.allreduce(x.double(), op=hvd.Sum)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    # fp16 keeps 11 significant bits: each input and the sum round once at 2**-11 relative.
    bound = (n() + 1) * 2.0 ** -11 * hvd.allreduce(x.abs().double(), op=hvd.Sum)
    assert torch.all((out.double() - exact).abs() <= bound)
    out_bf16 = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.bf16)
    assert torch.all((out_bf16.double() - exact).abs() <= (n() + 1) * 2.0 ** -8 * hvd.allreduce(x.abs().double(), op=hvd.Sum))


def test_grouped_allreduce_forms():
    tensors = [torch.full((2,), float(r())), torch.full((3, 1), 2.0, dtype=torch.float64),
               torch.ones(5, dtype=torch.int32)]
    out = hvd.grouped_allreduce(tensors, op=hvd.Sum, name='grp')
    assert [o.dtype for o in out] == [t.dtype for t in tensors]
    torch.testing.assert_close(out[0], torch.full((2,), float(sum(range(n())))))
    torch.testing.assert_close(out[1], torch.full((3, 1), 2.0 * n(), dtype=torch.float64))
    assert torch.equal(out[2], torch.full((5,), n(), dtype=torch.int32))
    h = hvd.grouped_allreduce_async_(tensors, op=hvd.Max)
    assert hvd.synchronize(h)[0] is tensors[0]
    torch.testing.assert_close(tensors[0], torch.full((2,), float(n() - 1)))
    res = hvd.grouped_allreduce_(tensors, op=hvd.Min)
    assert res[2] is tensors[2]
    out = hvd.synchronize(hvd.grouped_allreduce_async([torch.ones(2)], op=hvd.Sum))
    torch.testing.assert_close(out[0], torch.full((2,), float(n())))


@pytest.mark.parametrize('dtype', COPYABLE, ids=str)
def test_allgather_every_dtype(dtype):
    mine = values(r(), dtype, count=(r() + 1) * 2).view(r() + 1, 2)
    out = hvd.allgather(mine)
    expected = torch.cat([values(q, dtype, count=(q + 1) * 2).view(q + 1, 2) for q in range(n())])
    assert out.dtype == dtype and torch.equal(out, expected)
    assert torch.equal(hvd.synchronize(hvd.allgather_async(mine)), expected)


def test_grouped_allgather():
    out = hvd.grouped_allgather([torch.full((1,), r()), torch.full((2, 2), 1.0)])
    assert out[0].tolist() == list(range(n()))
    assert out[1].shape == (2 * n(), 2)
    out = hvd.synchronize(hvd.grouped_allgather_async([torch.full((1,), r())]))
    assert out[0].tolist() == list(range(n()))


@pytest.mark.parametrize('dtype', COPYABLE, ids=str)
def test_broadcast_every_dtype_and_root(dtype):
    for root in range(n()):
        mine = values(r(), dtype)
        out = hvd.broadcast(mine, root_rank=root)
        assert torch.equal(out, values(root, dtype))
        assert torch.equal(mine, values(r(), dtype))          # input untouched
        assert hvd.broadcast_(mine, root) is mine and torch.equal(mine, values(root, dtype))
    t = values(r(), dtype)
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(t, 0)), values(0, dtype))
    hvd.synchronize(hvd.broadcast_async_(t, n() - 1))
    assert torch.equal(t, values(n() - 1, dtype))


@pytest.mark.parametrize('dtype', COPYABLE, ids=str)
def test_alltoall_every_dtype(dtype):
    # rank q sends (j + 1) rows to rank j; rows carry (sender, receiver).
    rows = []
    for j in range(n()):
        rows += [torch.tensor([r(), j]).to(dtype) if dtype != torch.bool else torch.tensor([r() % 2 == 1, j % 2 == 1])] * (j + 1)
    tensor = torch.stack(rows)
    splits = [j + 1 for j in range(n())]
    out, received = hvd.alltoall(tensor, splits=splits)
    assert received.tolist() == [r() + 1] * n()
    expected = []
    for q in range(n()):
        expected += [torch.tensor([q, r()]).to(dtype) if dtype != torch.bool else torch.tensor([q % 2 == 1, r() % 2 == 1])] * (r() + 1)
    assert torch.equal(out, torch.stack(expected))


def test_alltoall_equal_split_and_async():
    t = torch.arange(n() * 2, dtype=torch.float32) + 100 * r()
    out = hvd.alltoall(t)
    expected = torch.cat([torch.arange(2 * r(), 2 * r() + 2, dtype=torch.float32) + 100 * q for q in range(n())])
    assert torch.equal(out, expected)
    out, received = hvd.synchronize(hvd.alltoall_async(t, splits=torch.full((n(),), 2, dtype=torch.int32)))
    assert torch.equal(out, expected) and received.tolist() == [2] * n()


@pytest.mark.parametrize('dtype', REDUCIBLE, ids=str)
def test_reducescatter_every_dtype(dtype):
    rows = n() * 2 + 1                   # uneven: the first rank takes one more row
    t = (torch.arange(rows * 2).view(rows, 2) % 5 + r()).to(dtype)
    out = hvd.reducescatter(t, op=hvd.Sum)
    full = sum((torch.arange(rows * 2).view(rows, 2) % 5 + q).double() for q in range(n()))
    start = r() * 2 + min(r(), 1)
    mine = full[start:start + 2 + (1 if r() < 1 else 0)]
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 0
    torch.testing.assert_close(out.double(), mine, rtol=tol, atol=tol)


def test_reducescatter_average_grouped_async():
    t = torch.full((n() * 2, 3), float(r()))
    avg = sum(range(n())) / n()
    torch.testing.assert_close(hvd.reducescatter(t), torch.full((2, 3), avg))
    out = hvd.grouped_reducescatter([t, t.double()], op=hvd.Sum)
    torch.testing.assert_close(out[1], torch.full((2, 3), avg * n(), dtype=torch.float64))
    out = hvd.synchronize(hvd.reducescatter_async(t, op=hvd.Max))
    torch.testing.assert_close(out, torch.full((2, 3), float(n() - 1)))
    out = hvd.synchronize(hvd.grouped_reducescatter_async([t], op=hvd.Min))
    torch.testing.assert_close(out[0], torch.zeros(2, 3))


# ---- autograd -------------------------------------------------------------------------------

def test_allreduce_gradient():
    for op, factor in ((hvd.Sum, n()), (hvd.Average, 1.0)):
        x = torch.ones(4, requires_grad=True)
        y = hvd.allreduce(x * (r() + 1), op=op)
        (y * 2).sum().backward()
        # backward is the same allreduce of the incoming gradient (2 everywhere), times r+1
        torch.testing.assert_close(x.grad, torch.full((4,), 2.0 * factor * (r() + 1)))


def test_grouped_allreduce_gradient():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b * 3], op=hvd.Sum)
    (ya.sum() + yb.sum()).backward()
    torch.testing.assert_close(a.grad, torch.full((2,), float(n())))
    torch.testing.assert_close(b.grad, torch.full((3,), 3.0 * n()))


def test_allgather_gradient():
    x = torch.ones(r() + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    weights = torch.arange(y.shape[0], dtype=torch.float32).unsqueeze(1).expand(-1, 2)
    (y * weights).sum().backward()
    offset = sum(q + 1 for q in range(r()))
    # Horovod: average-allreduce of the gradient (identical on every rank), then our rows.
    expected = torch.arange(offset, offset + r() + 1, dtype=torch.float32).unsqueeze(1).expand(-1, 2)
    torch.testing.assert_close(x.grad, expected)


def test_broadcast_gradient():
    root = n() - 1
    x = torch.ones(3, requires_grad=True)
    y = hvd.broadcast(x * (r() + 1), root_rank=root)
    y.sum().backward()
    expected = torch.full((3,), float(r() + 1)) if r() == root else torch.zeros(3)
    torch.testing.assert_close(x.grad, expected)


def test_alltoall_gradient():
    x = torch.arange(n() * 2, dtype=torch.float32).requires_grad_()
    out, _ = hvd.alltoall(x, splits=[2] * n())
    (out * (r() + 1)).sum().backward()
    # rank j scales the rows it received by j+1; the gradient of our rows sent to j is j+1.
    expected = torch.cat([torch.full((2,), float(j + 1)) for j in range(n())])
    torch.testing.assert_close(x.grad, expected)


def test_reducescatter_gradient():
    x = torch.ones(n() * 2, 2, requires_grad=True)
    out = hvd.reducescatter(x, op=hvd.Sum)
    (out * (r() + 1)).sum().backward()
    # Horovod's gradient: the allgathered gradient, times the set size for Sum
    expected = torch.cat([torch.full((2, 2), float((j + 1) * n())) for j in range(n())])
    torch.testing.assert_close(x.grad, expected)
    x.grad = None
    hvd.reducescatter(x, op=hvd.Average).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((n() * 2, 2), 1.0))


# ---- join, barrier, timeline ----------------------------------------------------------------

def test_barrier():
    hvd.barrier()


def test_join_returns_last_rank():
    last = hvd.join()
    assert 0 <= last < n()
    assert hvd.allgather(torch.tensor([last])).tolist() == [last] * n()


def test_join_with_uneven_batches():
    # rank q has q+1 batches; joined ranks contribute zeros to the others' allreduces.
    total = torch.zeros(2)
    for step in range(r() + 1):
        total += hvd.allreduce(torch.ones(2), op=hvd.Sum, name='uneven')
    last = hvd.join()
    assert last == n() - 1
    # at step s, the ranks with more than s batches (n - s of them) contributed ones.
    expected = sum(n() - s for s in range(r() + 1))
    torch.testing.assert_close(total, torch.full((2,), float(expected)))


def test_timeline(tmp_path_factory):
    path = '/tmp/ringfold_pytest_timeline_%d.json' % __import__('os').getppid()
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(8), name='timeline_tensor')
    hvd.stop_timeline()
    if r() == 0:
        import json
        with open(path) as f:
            events = json.load(f)
        assert any('timeline_tensor' in str(e) for e in events)
    with pytest.raises(ValueError):
        hvd.start_timeline('')
