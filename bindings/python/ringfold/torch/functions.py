"""Horovod's torch helpers (horovod/torch/functions.py): broadcast of parameters, optimizer
state and Python objects, and allgather of Python objects.

Contract
  * broadcast_parameters(params, root_rank): params is a state_dict, an iterable of
    (name, tensor) pairs (named_parameters()) or of tensors. Tensors are overwritten in place
    with the root's values, in name order so every rank matches them the same way.
  * broadcast_optimizer_state(optimizer, root_rank): every rank ends with the root's
    optimizer.state_dict() (state tensors, step counts and every param_group option such as
    lr), loaded with load_state_dict, so it works for any torch optimizer (SGD, Adam, ...),
    also before the first step.
  * broadcast_object / allgather_object pickle with cloudpickle when it is installed, with
    pickle otherwise; objects travel as uint8 tensors.
"""
import collections.abc
import io
import pickle

import torch

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
    if process_set.rank() == root_rank:
        payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, sz_name, process_set)
    if process_set.rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, t_name, process_set)
    if process_set.rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order."""
    sz_name, t_name = (None, None) if name is None else (name + '.sz', name + '.t')
    payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    sizes = mpi_ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64), sz_name, process_set)
    gathered = mpi_ops.allgather(payload, t_name, process_set).numpy().tobytes()
    objects, offset = [], 0
    for size in sizes.tolist():
        objects.append(pickle.loads(gathered[offset:offset + size]))
        offset += size
    return objects


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')
    state_dict = broadcast_object(optimizer.state_dict(), root_rank, 'optimizer_state', process_set)
    if process_set.rank() != root_rank:
        optimizer.load_state_dict(state_dict)
