"""Horovod's torch helpers (horovod/torch/functions.py): broadcast of parameters, optimizer
state and Python objects, and allgather of Python objects.

Contract
  * broadcast_parameters(params, root_rank): params is a state_dict, an iterable of
    (name, tensor) pairs (named_parameters()) or of tensors. Tensors are overwritten in place
    with the root's values, in name order so every rank matches them the same way.
  * broadcast_optimizer_state(optimizer, root_rank, model=None): every rank ends with the
    root's optimizer.state_dict() (state tensors, step counts and every param_group option
    such as lr), loaded with load_state_dict, so it works for any torch optimizer (SGD, Adam,
    ...). A new optimizer's state is first initialized as Horovod does it: on a rank whose
    state is empty, every parameter that requires a gradient gets a zero gradient (sparse for
    SparseAdam, and for SGD on the sparse embeddings of `model`), and, when the root's state
    was empty, every rank runs one step of the wrapped optimizer (not an allreduce) with them,
    so the ranks' parameters stay equal. Parameters with requires_grad=False keep grad None.
  * root_rank is a global rank, also with a process set, as in Horovod.
  * broadcast_object / allgather_object pickle with cloudpickle when it is installed, with
    pickle otherwise; objects travel as uint8 tensors.
  * Default names: allgather_object uses the object's type name, as Horovod; broadcast_object
    matches unnamed calls by call order instead (Horovod's type-name default would differ
    between the root and ranks that pass None).
"""
import collections.abc
import io
import pickle

import torch

from ringfold import _lib
from ringfold.process_sets import global_process_set
from ringfold.torch import mpi_ops

try:
    import cloudpickle as _pickler
except ImportError:       # pragma: no cover - cloudpickle is optional
    _pickler = pickle


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, collections.abc.Iterable):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError('broadcast_parameters: invalid params of type %s' % type(params).__name__)
    handles = []
    for name, p in items:
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError('broadcast_parameters: %s is a %s, not a tensor'
                             % (name or 'a parameter', type(p).__name__))
        handles.append(mpi_ops.broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p,
                                                root_rank, name, process_set))
    for handle in handles:
        mpi_ops.synchronize(handle)


def _dumps(obj):
    buffer = io.BytesIO()
    _pickler.dump(obj, buffer)
    return buffer.getvalue()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns the root's `obj` on every rank. Unnamed calls are matched by call order (a
    default name from the object's type, as Horovod uses, would differ between the root and the
    ranks that pass None)."""
    sz_name, t_name = (None, None) if name is None else (name + '.sz', name + '.t')
    is_root = _global_rank() == root_rank
    if is_root:
        payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, sz_name, process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, t_name, process_set)
    if is_root:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order. The default name is the object's
    type name, as in Horovod, so that calls match by name even where the ranks' earlier unnamed
    calls did not (a rank that joined skipped some)."""
    if name is None:
        name = type(obj).__name__
    sz_name, t_name = name + '.sz', name + '.t'
    payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    sizes = mpi_ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64), sz_name, process_set)
    gathered = mpi_ops.allgather(payload, t_name, process_set).numpy().tobytes()
    objects, offset = [], 0
    for size in sizes.tolist():
        objects.append(pickle.loads(gathered[offset:offset + size]))
        offset += size
    return objects


def _global_rank():
    return _lib.lib().horovod_rank()


def _initialize_state(optimizer, root_rank, model, process_set):
    """Horovod's initialization of a new optimizer's state (see the module contract)."""
    own_empty = len(optimizer.state_dict()['state']) == 0
    if own_empty:
        sparse_ids = set()
        if model is not None:
            for m in model.modules():
                if isinstance(m, torch.nn.Embedding) and m.sparse:
                    sparse_ids.update(id(p) for p in m.parameters())
        for group in optimizer.param_groups:
            for p in group['params']:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    if isinstance(optimizer, torch.optim.SparseAdam) or \
                            (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse_ids):
                        p.grad = p.grad.to_sparse()
    is_root = _global_rank() == root_rank
    root_empty = broadcast_object(own_empty if is_root else None, root_rank,
                                  'optimizer_state.fresh', process_set)
    if root_empty:
        # The wrapped optimizer's own step: DistributedOptimizer.step() would allreduce.
        base = getattr(optimizer, '_base_class', type(optimizer))
        base.step(optimizer)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')
    _initialize_state(optimizer, root_rank, model, process_set)
    state_dict = broadcast_object(optimizer.state_dict(), root_rank, 'optimizer_state', process_set)
    if _global_rank() != root_rank:
        optimizer.load_state_dict(state_dict)
