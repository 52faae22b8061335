"""DistributedOptimizer, the broadcast helpers, process sets and SyncBatchNorm."""
import copy

import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402

BATCH = 6                                # per rank


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def data(step, size):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH * size, 5, generator=g), torch.randint(0, 3, (BATCH * size,), generator=g)


def my_slice(t, micro=0, micros=1):
    """This rank's rows of a global batch laid out as [micro][rank][BATCH]."""
    per = t.shape[0] // micros
    part = t[micro * per:(micro + 1) * per]
    return part[hvd.rank() * BATCH:(hvd.rank() + 1) * BATCH]


def train(distributed, steps=4, passes=1, compression=hvd.Compression.none, groups=None,
          optimizer=torch.optim.SGD, **opt_args):
    model = make_model()
    opt = optimizer(model.parameters(), **opt_args)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=compression, backward_passes_per_step=passes,
                                       groups=groups)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        x, y = data(step, hvd.size() * passes)
        opt.zero_grad()
        for micro in range(passes):
            if not distributed:       # the whole global batch in one pass
                loss_fn(model(x), y).backward()
                break
            loss = loss_fn(model(my_slice(x, micro, passes)), my_slice(y, micro, passes)) / passes
            loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize('passes', [1, 3])
def test_distributed_optimizer_matches_single_process(passes):
    # single process: the whole global batch (every rank's rows of every micro-batch) at once
    reference = train(False, passes=passes, lr=0.1)
    distributed = train(True, passes=passes, lr=0.1)
    for a, b in zip(reference, distributed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_distributed_optimizer_adam_groups_and_fp16():
    reference = train(False, optimizer=torch.optim.Adam, lr=0.01)
    grouped = train(True, groups=2, optimizer=torch.optim.Adam, lr=0.01)
    for a, b in zip(reference, grouped):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    fp16 = train(True, compression=hvd.Compression.fp16, lr=0.1)
    for a, b in zip(train(False, lr=0.1), fp16):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-3)


def test_parameters_identical_on_every_rank_after_training():
    params = train(True, optimizer=torch.optim.Adam, lr=0.01)
    flat = torch.cat([p.flatten() for p in params])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(gathered[0], row) for row in gathered)


def test_skip_synchronize_and_gradient_clipping():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = data(0, hvd.size())
    torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat)
    assert all(torch.equal(gathered[0], row) for row in gathered)


def test_zero_grad_with_pending_allreduces_and_too_many_passes():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = data(0, hvd.size())
    torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
    with pytest.raises(AssertionError, match='zero_grad'):
        opt.zero_grad()
    with pytest.raises(AssertionError, match='backward_passes_per_step'):
        torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
    opt.step()


def test_unused_parameter_is_sent_as_zeros():
    model = make_model()
    extra = torch.nn.Linear(2, 2)
    params = list(model.named_parameters()) + [('extra.' + k, v) for k, v in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.1), named_parameters=params)
    x, y = data(0, hvd.size())
    torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
    opt.step()                                   # would stall if 'extra' were not sent
    assert torch.equal(extra.weight.grad, torch.zeros(2, 2))


def test_named_parameters_errors():
    model = make_model()
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match='unique'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[('same', p) for _, p in named])
    with pytest.raises(ValueError, match='not in it'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=named[:1])
    with pytest.raises(ValueError, match='gradient_predivide_factor'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


def test_gradient_predivide_factor_gives_the_average():
    reference = train(False, lr=0.1)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=float(hvd.size()))
    for step in range(4):
        x, y = data(step, hvd.size())
        opt.zero_grad()
        torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
        opt.step()
    for a, b in zip(reference, model.parameters()):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)


def test_join_with_uneven_batches_in_training():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(hvd.rank() + 1):           # rank q has q+1 batches
        x, y = data(step, hvd.size())
        opt.zero_grad()
        torch.nn.CrossEntropyLoss()(model(my_slice(x)), my_slice(y)).backward()
        opt.step()
    assert hvd.join() == hvd.size() - 1


# ---- broadcast helpers ----------------------------------------------------------------------

def test_broadcast_parameters_forms():
    model = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = make_model(seed=0)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    model = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(model.named_parameters(), root_rank=hvd.size() - 1)
    for a, b in zip(model.parameters(), make_model(seed=hvd.size() - 1).parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match='not a tensor'):
        hvd.broadcast_parameters({'a': 3}, root_rank=0)


@pytest.mark.parametrize('optimizer,args', [(torch.optim.SGD, {'momentum': 0.9}), (torch.optim.Adam, {})])
def test_broadcast_optimizer_state(optimizer, args):
    model = make_model()
    opt = optimizer(model.parameters(), lr=0.01 * (hvd.rank() + 1), **args)
    x, y = data(hvd.rank(), 1)
    torch.nn.CrossEntropyLoss()(model(x), y).backward()
    opt.step()                                    # rank-dependent state
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]['lr'] == pytest.approx(0.01)
    state = torch.cat([v.flatten().double() for s in opt.state_dict()['state'].values()
                       for v in s.values() if torch.is_tensor(v)])
    gathered = hvd.allgather(state.unsqueeze(0))
    assert all(torch.equal(gathered[0], row) for row in gathered)


def test_broadcast_optimizer_state_before_first_step():
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * (hvd.rank() + 1))
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]['lr'] == pytest.approx(0.001)


def test_objects():
    obj = {'rank': hvd.rank(), 'payload': list(range(hvd.rank() + 3))}
    assert hvd.broadcast_object(obj if hvd.rank() == 0 else None, root_rank=0) == {'rank': 0, 'payload': [0, 1, 2]}
    gathered = hvd.allgather_object(obj)
    assert [g['rank'] for g in gathered] == list(range(hvd.size()))
    assert hvd.broadcast_object(copy.deepcopy(obj), root_rank=hvd.size() - 1, name='named')['rank'] == hvd.size() - 1


# ---- process sets ---------------------------------------------------------------------------

def test_dynamic_process_sets():
    members = [q for q in range(hvd.size()) if q != 1]          # every rank but 1
    subset = hvd.add_process_set(members)
    assert subset.process_set_id > 0 and subset.size() == len(members)
    assert subset.included() == (hvd.rank() != 1)
    if subset.included():
        assert subset.rank() == members.index(hvd.rank())
        out = hvd.allreduce(torch.full((2,), float(hvd.rank() + 1)), op=hvd.Sum, process_set=subset)
        torch.testing.assert_close(out, torch.full((2,), float(sum(q + 1 for q in members))))
        assert hvd.allgather(torch.tensor([hvd.rank()]), process_set=subset).tolist() == members
    else:
        with pytest.raises(ValueError, match='not a member'):
            subset.rank()
    with pytest.raises(ValueError, match='already exists'):
        hvd.add_process_set(hvd.ProcessSet(list(reversed(members))))
    with pytest.raises(ValueError, match='already exists'):
        hvd.add_process_set(list(range(hvd.size())))
    assert hvd.remove_process_set(subset)
    assert subset.size() is None                       # as Horovod's, once removed
    with pytest.raises(ValueError, match='registered'):
        hvd.allreduce(torch.ones(1), process_set=subset)


def test_static_process_sets_after_reinit():
    hvd.shutdown()
    import os
    size = int(os.environ.get('RINGFOLD_SIZE') or os.environ['WORLD_SIZE'])
    evens = hvd.ProcessSet([q for q in range(size) if q % 2 == 0])
    hvd.init(process_sets=[evens])
    try:
        assert evens.process_set_id == 1
        if evens.included():
            out = hvd.allreduce(torch.ones(3), op=hvd.Sum, process_set=evens)
            torch.testing.assert_close(out, torch.full((3,), float(len(evens.ranks))))
            hvd.barrier(process_set=evens)
        hvd.barrier()
    finally:
        hvd.shutdown()
        hvd.init()


# ---- SyncBatchNorm --------------------------------------------------------------------------

@pytest.mark.parametrize('shape', [(BATCH, 4), (BATCH, 4, 3, 2)])
def test_sync_batch_norm_matches_full_batch(shape):
    g = torch.Generator().manual_seed(7)
    full = torch.randn((shape[0] * hvd.size(),) + shape[1:], generator=g, dtype=torch.float64)
    dy = torch.randn(full.shape, generator=g, dtype=torch.float64)
    ref_bn = torch.nn.BatchNorm1d(4).double() if len(shape) == 2 else torch.nn.BatchNorm2d(4).double()
    with torch.no_grad():
        ref_bn.weight.copy_(torch.linspace(0.5, 2, 4))
        ref_bn.bias.copy_(torch.linspace(-1, 1, 4))
    sync_bn = hvd.SyncBatchNorm(4).double()
    sync_bn.load_state_dict(ref_bn.state_dict())
    x_full = full.clone().requires_grad_()
    y_full = ref_bn(x_full)
    (y_full * dy).sum().backward()
    rows = slice(hvd.rank() * shape[0], (hvd.rank() + 1) * shape[0])
    x = full[rows].clone().requires_grad_()
    y = sync_bn(x)
    (y * dy[rows]).sum().backward()
    torch.testing.assert_close(y, y_full[rows])
    torch.testing.assert_close(x.grad, x_full.grad[rows])
    torch.testing.assert_close(sync_bn.running_mean, ref_bn.running_mean)
    torch.testing.assert_close(sync_bn.running_var, ref_bn.running_var)
    # weight/bias gradients are local; summed over ranks they are the full-batch ones
    torch.testing.assert_close(hvd.allreduce(sync_bn.weight.grad, op=hvd.Sum), ref_bn.weight.grad)
    torch.testing.assert_close(hvd.allreduce(sync_bn.bias.grad, op=hvd.Sum), ref_bn.bias.grad)


# ---- sparse gradients -----------------------------------------------------------------------

@pytest.mark.parametrize('sparse_as_dense', [False, True])
def test_sparse_embedding_gradients(sparse_as_dense):
    torch.manual_seed(3)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    reference = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
    ids = [torch.tensor([q, q + 1, 9]) for q in range(hvd.size())]
    emb(ids[hvd.rank()]).sum().backward()
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    (sum(reference(i).sum() for i in ids) / hvd.size()).backward()
    ref_opt.step()
    torch.testing.assert_close(emb.weight.detach(), reference.weight.detach())


def test_sparse_allreduce_async():
    i = torch.tensor([[hvd.rank()], [0]])
    t = torch.sparse_coo_tensor(i, torch.tensor([1.0]), (hvd.size(), 2))
    out = hvd.synchronize(hvd.sparse_allreduce_async(t, name='sparse', op=hvd.Sum))
    torch.testing.assert_close(out.to_dense(), torch.tensor([[1.0, 0.0]] * hvd.size()))
