"""Behaviours where ringfold.torch must do what horovod.torch does (Horovod 0.28.1's
horovod/torch/{mpi_ops,optimizer,functions}.py and horovod/common/process_sets.py): issue 15,
items 4, 5, 7, 8, 9 and 10. Every test runs the same collectives on every rank, at any size."""
import pytest

torch = pytest.importorskip('torch')
import ringfold.torch as hvd  # noqa: E402


def r():
    return hvd.rank()


def n():
    return hvd.size()


# ---- item 4: sparse_allreduce_async returns a callable ----------------------------------------

def _rank_sparse(rank, rows=6, cols=3):
    """Rank q holds rows q and q + 1 (overlapping between neighbours) with values q + 1."""
    idx = torch.tensor([[rank % rows, (rank + 1) % rows]])
    values = torch.full((2, cols), float(rank + 1))
    return torch.sparse_coo_tensor(idx, values, (rows, cols), check_invariants=True)


@pytest.mark.parametrize('op', ['sum', 'average'])
def test_sparse_allreduce_async_returns_a_callable(op):
    hop = hvd.Sum if op == 'sum' else hvd.Average
    handle = hvd.sparse_allreduce_async(_rank_sparse(r()), name='sparse_' + op, op=hop)
    assert callable(handle)
    out = handle()
    assert out.is_sparse
    expected = sum(_rank_sparse(q).to_dense() for q in range(n()))
    if op == 'average':
        expected = expected / n()
    torch.testing.assert_close(out.to_dense(), expected)


def test_sparse_allreduce_handle_with_poll_and_synchronize():
    handle = hvd.sparse_allreduce_async(_rank_sparse(r()), name='sparse_sync', op=hvd.Sum)
    assert hvd.poll(handle) in (True, False)
    out = hvd.synchronize(handle)
    assert hvd.poll(handle)
    torch.testing.assert_close(out.to_dense(), sum(_rank_sparse(q).to_dense() for q in range(n())))


# ---- item 5: argument errors are ValueErrors, engine errors HorovodInternalErrors -------------

def test_exception_classes():
    assert issubclass(hvd.InvalidArgumentError, ValueError)
    assert not issubclass(hvd.InvalidArgumentError, hvd.HorovodInternalError)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


_ASYNC = {
    'allreduce': lambda t, name: hvd.allreduce_async(t, name=name),
    'allgather': lambda t, name: hvd.allgather_async(t, name=name),
    'broadcast': lambda t, name: hvd.broadcast_async(t, 0, name=name),
    'reducescatter': lambda t, name: hvd.reducescatter_async(t, name=name, op=hvd.Sum),
}


@pytest.mark.parametrize('kind', sorted(_ASYNC))
def test_name_in_flight_is_a_value_error_at_once(kind):
    # Each rank's own name stays in flight until every rank made its duplicate call: the others
    # submit it only after the barrier (with one shared name the first call could be complete).
    t = torch.ones(2 * n(), 3)
    names = ['dup_%s.%d' % (kind, q) for q in range(n())]
    first = _ASYNC[kind](t, names[r()])
    with pytest.raises(ValueError, match='already in flight') as info:
        _ASYNC[kind](t, names[r()])
    assert not isinstance(info.value, hvd.HorovodInternalError)
    hvd.barrier()
    others = [_ASYNC[kind](t, name) for q, name in enumerate(names) if q != r()]
    for h in [first] + others:
        hvd.synchronize(h)
    for name in names:                                     # reusable once completed
        hvd.synchronize(_ASYNC[kind](t, name))


def test_alltoall_indivisible_first_dimension_is_a_value_error():
    with pytest.raises(ValueError, match='not divisible') as info:
        hvd.alltoall(torch.zeros(n() + 1), name='a2a_indivisible')
    assert not isinstance(info.value, hvd.HorovodInternalError)


def test_alltoall_splits_beyond_first_dimension_is_a_value_error():
    with pytest.raises(ValueError, match='add up to') as info:
        hvd.alltoall(torch.zeros(n() - 1), torch.ones(n(), dtype=torch.int32), name='a2a_sum')
    assert not isinstance(info.value, hvd.HorovodInternalError)


@pytest.mark.parametrize('splits', [torch.ones(2, dtype=torch.float32), torch.ones(2, dtype=torch.int64),
                                    [1.0, 1.0], ['1', '1']], ids=['float32', 'int64', 'floats', 'str'])
def test_alltoall_splits_must_be_32_bit_integers(splits):
    if isinstance(splits, torch.Tensor):
        splits = splits.new_ones(n())
    else:
        splits = splits[:1] * n()
    with pytest.raises(ValueError, match='integers'):
        hvd.alltoall(torch.zeros(n()), splits, name='a2a_type')


def test_alltoall_indivisible_on_one_rank_fails_every_rank():
    """The rank whose first dimension is not divisible gets a ValueError, the others a
    HorovodInternalError: every rank fails together instead of waiting for the one at fault."""
    wrong = r() == n() - 1
    expected = ValueError if wrong else hvd.HorovodInternalError
    with pytest.raises(expected, match='not divisible') as info:
        hvd.alltoall(torch.zeros(n() + (1 if wrong else 0), 2), name='a2a_one_wrong')
    assert isinstance(info.value, hvd.HorovodInternalError) != wrong


def test_alltoall_splits_below_first_dimension_send_the_first_rows():
    """As in Horovod: rows past the splits' sum are not sent, and get a zero gradient."""
    rows = n() + 2
    t = (torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) + 100 * r()).requires_grad_()
    out, received = hvd.alltoall(t, torch.ones(n(), dtype=torch.int32), name='a2a_fewer')
    assert received.tolist() == [1] * n() and received.dtype == torch.int32
    expected = torch.stack([torch.arange(2 * r(), 2 * r() + 2, dtype=torch.float64) + 100 * q for q in range(n())])
    torch.testing.assert_close(out.detach(), expected)
    out.sum().backward()
    torch.testing.assert_close(t.grad, torch.cat([torch.ones(n(), 2), torch.zeros(2, 2)]).double())


def test_alltoall_errors_leave_the_engine_usable():
    out = hvd.alltoall(torch.arange(n(), dtype=torch.float32) + 10 * r(), name='a2a_after')
    torch.testing.assert_close(out, torch.tensor([10.0 * q + r() for q in range(n())]))


def test_disagreements_stay_horovod_internal_errors():
    with pytest.raises(hvd.HorovodInternalError, match='Mismatched'):
        hvd.allreduce(torch.zeros(2 + r()), name='compat_shape_err')


# ---- item 7: reducescatter's gradient is Horovod's ------------------------------------------

@pytest.mark.parametrize('op,pre,post', [('sum', 1.0, 1.0), ('average', 1.0, 1.0), ('sum', 0.5, 3.0),
                                          ('average', 2.0, 0.25)])
def test_reducescatter_gradient(op, pre, post):
    hop = hvd.Sum if op == 'sum' else hvd.Average
    t = torch.ones(n() * 4, 3, dtype=torch.float64, requires_grad=True)
    out = hvd.reducescatter(t, op=hop, prescale_factor=pre, postscale_factor=post)
    out.backward(torch.ones_like(out))
    scale = pre * post * (n() if op == 'sum' else 1)
    torch.testing.assert_close(t.grad, torch.full_like(t, scale))


@pytest.mark.parametrize('op', ['sum', 'average'])
def test_grouped_reducescatter_gradient(op):
    hop = hvd.Sum if op == 'sum' else hvd.Average
    ts = [torch.ones(n() * 2, dtype=torch.float32, requires_grad=True),
          torch.ones(n() * 3, 2, dtype=torch.float32, requires_grad=True)]
    outs = hvd.grouped_reducescatter(ts, op=hop, prescale_factor=2.0)
    sum(o.sum() for o in outs).backward()
    for t in ts:
        torch.testing.assert_close(t.grad, torch.full_like(t, 2.0 * (n() if op == 'sum' else 1)))


# ---- item 8: parameters without gradients ------------------------------------------------------

class _ModelNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
        self.b = torch.nn.Parameter(torch.rand(4) + r())

    def forward(self, x):
        return torch.index_select(self.b, 0, self.a.long()) * x


def test_broadcast_state_with_parameters_without_gradients():
    model = _ModelNoGrad()
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9, nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]['params'][1].grad
    assert opt.param_groups[0]['params'][0].grad is None
    assert grad is not None
    torch.testing.assert_close(hvd.broadcast(grad, root_rank=0), grad)
    assert len(opt.state_dict()['state']) == 1          # initialized, as Horovod does
    values = hvd.allgather(model.b.detach().unsqueeze(0))
    for q in range(n()):
        torch.testing.assert_close(values[q], values[0])   # the parameters stay equal
    model(torch.ones(2)).sum().backward()
    opt.step()


def test_broadcast_of_a_tensor_without_gradient():
    p = torch.nn.Parameter(torch.full((3,), float(r())))
    assert p.grad is None
    torch.testing.assert_close(hvd.broadcast(p, root_rank=0).detach(), torch.zeros(3))
    frozen = torch.nn.Parameter(torch.full((3,), float(r())), requires_grad=False)
    torch.testing.assert_close(hvd.broadcast(frozen, root_rank=0), torch.zeros(3))


def test_non_tensors_are_named_value_errors():
    with pytest.raises(ValueError, match='broadcast: expected a torch.Tensor, got NoneType'):
        hvd.broadcast(None, root_rank=0)
    with pytest.raises(ValueError, match='allreduce: expected a torch.Tensor'):
        hvd.allreduce(None)


# ---- item 9: sparse gradients in DistributedOptimizer -----------------------------------------

def _embedding_batches(step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randint(0, 12, (5,), generator=g) for _ in range(n())]


def _train_embedding(distributed, sparse_as_dense=False, steps=3):
    torch.manual_seed(7)
    emb = torch.nn.Embedding(12, 4, sparse=True)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.1)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
    for step in range(steps):
        opt.zero_grad()
        batches = _embedding_batches(step)
        if distributed:
            loss = (emb(batches[r()]) ** 2).sum()
        else:     # the average of every rank's loss: what Average allreduce of gradients gives
            loss = sum((emb(b) ** 2).sum() for b in batches) / n()
        loss.backward()
        if distributed:
            assert emb.weight.grad.is_sparse
        opt.step()
    return emb.weight.detach()


@pytest.mark.parametrize('sparse_as_dense', [False, True], ids=['sparse', 'sparse_as_dense'])
def test_sparse_adam_trains_like_one_process(sparse_as_dense):
    distributed = _train_embedding(True, sparse_as_dense)
    torch.testing.assert_close(distributed, _train_embedding(False))


def test_sparse_gradients_are_allgathered_not_densified():
    emb = torch.nn.Embedding(8, 2, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.0),
                                   named_parameters=emb.named_parameters())
    emb(torch.tensor([r() % 8])).sum().backward()
    opt.synchronize()
    assert emb.weight.grad.is_sparse
    expected = torch.zeros(8, 2)
    for q in range(n()):
        expected[q % 8] += 1.0 / n()
    torch.testing.assert_close(emb.weight.grad.to_dense(), expected)
    with opt.skip_synchronize():
        opt.step()


# ---- item 10: the rest of Horovod's API ------------------------------------------------------

def test_broadcast_root_rank_is_a_global_rank_in_a_process_set():
    """hvd.broadcast(t, root_rank, process_set=ps) takes a global rank, as in Horovod."""
    if n() < 2:
        pytest.skip('needs 2 ranks')
    ps = hvd.add_process_set(list(range(1, n())))          # every rank but 0
    try:
        if ps.included():
            root = n() - 1
            out = hvd.broadcast(torch.full((2,), float(r())), root_rank=root, process_set=ps)
            torch.testing.assert_close(out, torch.full((2,), float(root)))
            obj = hvd.broadcast_object({'from': r()}, root_rank=root, process_set=ps)
            assert obj == {'from': root}
            with pytest.raises(ValueError, match='root rank 0 is not in process set'):
                hvd.broadcast(torch.zeros(1), root_rank=0, process_set=ps)
        hvd.barrier()
    finally:
        hvd.remove_process_set(ps)


def test_broadcast_gradient_goes_to_the_global_root():
    if n() < 2:
        pytest.skip('needs 2 ranks')
    ps = hvd.add_process_set(list(range(1, n())))
    try:
        if ps.included():
            t = torch.ones(3, requires_grad=True)
            hvd.broadcast(t, root_rank=1, process_set=ps).sum().backward()
            expected = 1.0 if r() == 1 else 0.0
            torch.testing.assert_close(t.grad, torch.full((3,), expected))
        hvd.barrier()
    finally:
        hvd.remove_process_set(ps)


def test_process_set_queries_before_registration():
    ps = hvd.ProcessSet([0])
    assert ps.size() is None and ps.rank() is None
    assert ps.included() == (r() == 0)
    assert hvd.remove_process_set(ps) is False
    with pytest.raises(ValueError):
        hvd.ProcessSet([0.5])
    assert 'mpi_comm' in str(ps)


def test_process_set_rank_outside_the_set_raises():
    ps = hvd.add_process_set([0])
    try:
        if r() == 0:
            assert ps.rank() == 0 and ps.size() == 1 and ps.included()
        else:
            assert ps.included() is False
            with pytest.raises(ValueError, match='not a member'):
                ps.rank()
    finally:
        assert hvd.remove_process_set(ps) is True
    assert hvd.remove_process_set(ps) is False


def test_set_backward_passes_per_step_and_load_state_dict():
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    x = torch.ones(1, 3) * (r() + 1)
    model(x).sum().backward()
    model(x).sum().backward()            # two passes accumulate locally
    opt.step()
    mean = sum(q + 1 for q in range(n())) / n()
    torch.testing.assert_close(model.weight.detach(), torch.full((1, 3), 1 - 0.1 * 2 * mean))
    opt.zero_grad()
    model(x).sum().backward()            # one pass in flight, then a state is loaded:
    opt.load_state_dict(opt.state_dict())  # the pass count restarts, nothing left in flight
    opt.zero_grad()
    with pytest.raises(ValueError, match='backward_passes_per_step'):
        opt.set_backward_passes_per_step(0)


def test_groups_must_be_tensors():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match='torch.Tensor'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), groups=[['weight']])


def test_allgather_object_is_named_by_the_object_type():
    """As in Horovod, allgather_object's default name is the object's type name, so it matches
    across ranks whatever unnamed calls each rank made around it (here: rank 0 starts an
    unnamed allgather before it, the others after it)."""
    t = torch.full((3,), float(r()))
    handle = hvd.allgather_async(t) if r() == 0 else None
    assert hvd.allgather_object(r() * 10) == [q * 10 for q in range(n())]
    if handle is None:
        handle = hvd.allgather_async(t)
    assert hvd.synchronize(handle).tolist() == [float(q) for q in range(n()) for _ in range(3)]


def test_autograd_functions_take_horovods_arguments():
    """Scripts that call Horovod's autograd functions directly (mpi_ops.HorovodAllreduce.apply)
    pass Horovod's argument order, `average` included."""
    from ringfold.torch import mpi_ops
    t = torch.ones(3, requires_grad=True)
    out = mpi_ops.HorovodAllreduce.apply(t, None, 'compat_apply', hvd.Sum, 1.0, 1.0, hvd.global_process_set)
    torch.testing.assert_close(out.detach(), torch.full((3,), float(n())))
    out.sum().backward()
    torch.testing.assert_close(t.grad, torch.full((3,), float(n())))
    a, b = torch.ones(2, requires_grad=True), torch.ones(1, requires_grad=True)
    outs = mpi_ops.HorovodGroupedAllreduce.apply(True, 'compat_grouped', None, 1.0, 1.0,
                                                 hvd.global_process_set, a, b)
    torch.testing.assert_close(outs[0].detach(), torch.ones(2))
    (outs[0].sum() + outs[1].sum()).backward()
    torch.testing.assert_close(a.grad, torch.ones(2))
