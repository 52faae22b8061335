"""CUDA tensors through ringfold.torch (issue 6): skipped, saying why, without a GPU."""
import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason='no CUDA device visible to torch (torch.cuda.is_available() is False)')


@pytest.fixture(autouse=True)
def device():
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    return torch.device('cuda', torch.cuda.current_device())


def test_cuda_build():
    assert hvd.cuda_built(), 'this ringfold was built without CUDA support'


@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.float64])
def test_allreduce_on_device(device, dtype):
    x = (torch.arange(1000, device=device) % 7 + hvd.rank()).to(dtype)
    out = hvd.allreduce(x, op=hvd.Sum)
    assert out.device == device
    expected = sum((torch.arange(1000) % 7 + q).double() for q in range(hvd.size()))
    torch.testing.assert_close(out.cpu().double(), expected, rtol=1e-2, atol=1e-2)
    hvd.allreduce_(x, op=hvd.Max)
    assert x.max().item() == 6 + hvd.size() - 1


def test_stream_ordering(device):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.full((1 << 20,), float(hvd.rank() + 1), device=device)
        x.mul_(2)                                       # queued on `stream`, not yet done
        out = hvd.allreduce(x, op=hvd.Sum)
        total = out.sum()                               # queued after the stream waits
    stream.synchronize()
    assert total.item() == pytest.approx(2.0 * sum(range(1, hvd.size() + 1)) * (1 << 20))


def test_other_collectives_on_device(device):
    x = torch.full((2, 3), float(hvd.rank()), device=device)
    assert hvd.broadcast(x, 0).device == device
    g = hvd.allgather(x)
    assert g.device == device and g.shape == (2 * hvd.size(), 3)
    rs = hvd.reducescatter(torch.ones(hvd.size() * 2, 3, device=device), op=hvd.Sum)
    assert rs.device == device and torch.all(rs == hvd.size())
    a = hvd.alltoall(torch.arange(hvd.size() * 2, device=device).float())
    assert a.device == device


def test_distributed_optimizer_fp16_on_device(device):
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    hvd.broadcast_parameters(model.state_dict(), 0)
    model(torch.randn(8, 16, device=device) * (hvd.rank() + 1)).sum().backward()
    opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat)
    assert all(torch.equal(gathered[0], row) for row in gathered)
