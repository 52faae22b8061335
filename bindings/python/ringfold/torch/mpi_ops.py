"""Horovod's torch collectives (horovod/torch/mpi_ops.py) over ringfold's C ABI.

Contract
  * Every function keeps Horovod's name, arguments, defaults and return values. `_async`
    forms return an int handle for poll()/synchronize(); trailing-underscore forms work in
    place; the plain forms are autograd functions with Horovod's gradients:
      allreduce      -> allreduce of the gradient with the same op and scale factors
      allgather      -> average-allreduce of the gradient, then this rank's rows
      broadcast      -> average-allreduce of the gradient on the root, zeros elsewhere
      alltoall       -> alltoall of the gradient with the received splits
      reducescatter  -> allgather of the gradient, multiplied by the set size for Sum and by
                        the pre- and postscale factors (Horovod's HorovodReducescatter.backward)
  * dtypes: uint8, int8, int32, int64, float16, bfloat16, float32, float64 everywhere (uint32
    and uint64 too where torch has them); bool and int16 for the copying collectives
    (allgather, broadcast, alltoall). Anything else raises ValueError naming the dtype.
  * Non-contiguous tensors are copied to a contiguous buffer (and back, for in-place forms).
  * root_rank is a global rank, also with a process set (as in Horovod; the engine takes the
    rank within the set): a root outside the set raises InvalidArgumentError at once.
  * CUDA tensors: allreduce and broadcast pass them to the engine with their device and the
    current CUDA stream (the engine stages them through pinned host memory and reduces on the
    GPU; the stream waits for the result). allgather, alltoall and reducescatter, which the
    engine runs on host memory only, copy a CUDA input to the host and their result back to
    the input's device. Builds without CUDA support refuse CUDA tensors in allreduce and
    broadcast with InvalidArgumentError ("no CUDA support").
  * Errors, as Horovod's torch module raises them (ringfold.exceptions): a bad argument on this
    rank (a name already in flight, an unknown process set, alltoall splits that are not 32-bit
    integers, that do not fit the tensor or the set, ...) raises InvalidArgumentError, a
    ValueError; engine errors (ranks that disagree, a dead peer, use after shutdown) raise
    HorovodInternalError, a RuntimeError, on every rank for disagreements. Passing something
    that is not a tensor raises ValueError naming the function.
  * alltoall as Horovod's: splits in a tensor must be torch.int32; rows past the splits' sum
    are not sent (and get a zero gradient). Splits of the wrong count, negative or adding up to
    more than the first dimension are refused at once (InvalidArgumentError on that rank; the
    others wait, as in Horovod, until RINGFOLD_STALL_SHUTDOWN_TIME). A first dimension not
    divisible by the set size (no splits) fails in negotiation on every rank together:
    InvalidArgumentError where the tensor was wrong, HorovodInternalError elsewhere.
  * sparse_allreduce_async returns a callable, as Horovod's does: calling it (or passing it to
    synchronize()) waits and returns the sparse result.
"""
import itertools
import numbers
import warnings

import torch

from ringfold import _lib, _ops
from ringfold.basics import Average, Sum, Adasum
from ringfold.exceptions import HorovodInternalError, InvalidArgumentError
from ringfold.process_sets import _root_in_set, global_process_set
from ringfold.torch.compression import Compression
from ringfold.torch.sparse import SparseAllreduceHandle

_REDUCIBLE = {
    torch.uint8: _lib.UINT8, torch.int8: _lib.INT8, torch.int32: _lib.INT32, torch.int64: _lib.INT64,
    torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16, torch.float32: _lib.FLOAT32,
    torch.float64: _lib.FLOAT64,
}
for _name, _code in (('uint32', _lib.UINT32), ('uint64', _lib.UINT64)):
    if hasattr(torch, _name):
        _REDUCIBLE[getattr(torch, _name)] = _code
# Copying collectives move bytes: a 2-byte integer travels as any 2-byte type.
_COPYABLE = {**_REDUCIBLE, torch.bool: _lib.BOOL, torch.int16: _lib.FLOAT16}

_groups = {}                       # grouped handle -> list of engine handles
_group_ids = itertools.count(1 << 48)
_invalid_here = {}                 # handle -> True: this rank's own arguments were wrong


def _require_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError('%s: expected a torch.Tensor, got %s' % (what, type(tensor).__name__))


def _dtype_code(tensor, table, what):
    _require_tensor(tensor, what)
    code = table.get(tensor.dtype)
    if code is None:
        raise ValueError('%s: tensor type %s is not supported (supported: %s)'
                         % (what, tensor.dtype, ', '.join(sorted(str(d) for d in table))))
    return code


def _describe(tensor, code):
    if tensor.is_cuda:
        stream = torch.cuda.current_stream(tensor.device).cuda_stream
        return _ops.tensor(tensor.data_ptr(), code, tensor.shape, tensor.device.index, stream)
    return _ops.tensor(tensor.data_ptr(), code, tensor.shape)


def _average_op(op, average):
    if op is not None and average is not None:
        raise ValueError('The op parameter supersedes average; specify only one of them')
    if average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed',
                      DeprecationWarning)
        return Average if average else Sum
    return Average if op is None else op


def _contiguous_target(tensor):
    """(buffer to hand the engine, finish that returns `tensor`) for in-place operations."""
    if tensor.is_contiguous():
        return tensor, lambda h: tensor
    buffer = tensor.contiguous()

    def finish(h):
        tensor.copy_(buffer)
        return tensor
    return buffer, finish


def _host(tensor):
    """A contiguous host copy of a CUDA tensor (the collectives whose output the engine
    allocates run on host memory), or the contiguous tensor itself."""
    return tensor.contiguous().cpu() if tensor.is_cuda else tensor.contiguous()


def _engine_output(like, nsplits=0):
    """finish() for outputs the engine allocates: a new tensor of like's dtype and device."""
    def finish(handle):
        shape = _ops.result_shape(handle)
        out = torch.empty(shape, dtype=like.dtype)
        _ops.result_copy(handle, out.data_ptr(), out.numel() * out.element_size())
        if like.is_cuda:
            out = out.to(like.device)
        if nsplits:
            return out, torch.tensor(_ops.received_splits(handle, nsplits), dtype=torch.int32)
        return out
    return finish


def _check_adasum(op):
    if op == Adasum:
        raise NotImplementedError('ringfold does not implement Adasum; use Average or Sum')


# ---- allreduce ------------------------------------------------------------------------------

def _allreduce_async(tensor, output, finish, name, op, prescale_factor, postscale_factor, process_set):
    _check_adasum(op)
    code = _dtype_code(tensor, _REDUCIBLE, 'allreduce')
    src = tensor.contiguous()
    if not src.is_cuda:
        return _ops.enqueue_allreduce(src.data_ptr(), output.data_ptr(), code, src.shape,
                                      (src, output), finish, name, op, prescale_factor,
                                      postscale_factor, process_set._id())
    t_in = _describe(src, code)
    t_out = t_in if output is src else _describe(output, code)
    return _ops.enqueue(_lib.ALLREDUCE, t_in, t_out, (src, output), finish, name, op,
                        prescale_factor, postscale_factor, process_set=process_set._id())


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    _require_tensor(tensor, 'allreduce')
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, lambda h: output, name, op, prescale_factor,
                            postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    _require_tensor(tensor, 'allreduce_')
    buffer, finish = _contiguous_target(tensor)
    return _allreduce_async(buffer, buffer, finish, name, op, prescale_factor, postscale_factor,
                            process_set)


class HorovodAllreduce(torch.autograd.Function):
    # apply()'s arguments are Horovod's: (tensor, average, name, op, prescale, postscale, set)
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        op = _average_op(op, average)
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set), None, None, None, None, None, None


def _needs_grad(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    _require_tensor(tensor, 'allreduce')
    compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        reduced = HorovodAllreduce.apply(compressed, None, name, op, prescale_factor, postscale_factor,
                                         process_set)
    else:
        reduced = synchronize(allreduce_async(compressed, None, name, op, prescale_factor,
                                              postscale_factor, process_set))
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, finishes, name, op, prescale_factor,
                             postscale_factor, process_set):
    _check_adasum(op)
    if not tensors:
        raise ValueError('grouped_allreduce: the list of tensors is empty')
    srcs = [t.contiguous() for t in tensors]
    codes = [_dtype_code(t, _REDUCIBLE, 'grouped_allreduce') for t in srcs]
    devices = {(t.device.index if t.is_cuda else _lib.CPU_DEVICE) for t in srcs}
    if len(devices) != 1:
        raise ValueError('grouped_allreduce: all tensors of a group must be on one device')
    device = devices.pop()
    if device != _lib.CPU_DEVICE:
        # The grouped C entry point orders on the legacy default stream: let the torch stream's
        # pending work (that produced the inputs) finish first.
        torch.cuda.current_stream(device).synchronize()
    names = None if name is None else ['%s.%d' % (name, i) for i in range(len(srcs))]
    handles = _ops.enqueue_grouped_allreduce(
        [(t.data_ptr(), c, tuple(t.shape)) for t, c in zip(srcs, codes)],
        [(o.data_ptr(), c, tuple(o.shape)) for o, c in zip(outputs, codes)],
        (srcs, outputs), finishes, names, op, prescale_factor, postscale_factor,
        process_set._id(), device)
    group = next(_group_ids)
    _groups[group] = handles
    return group


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    for t in tensors:
        _require_tensor(t, 'grouped_allreduce')
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, [(lambda h, o=o: o) for o in outputs], name,
                                    op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    for t in tensors:
        _require_tensor(t, 'grouped_allreduce_')
    targets = [_contiguous_target(t) for t in tensors]
    buffers = [b for b, _ in targets]
    return _grouped_allreduce_async(buffers, buffers, [f for _, f in targets], name, op,
                                    prescale_factor, postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    # apply()'s arguments are Horovod's: (average, name, op, prescale, postscale, set, *tensors)
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        op = _average_op(op, average)
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                    postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return (None, None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _average_op(op, average)
    for t in tensors:
        _require_tensor(t, 'grouped_allreduce')
    compressed = [compression.compress(t) for t in tensors]
    inputs = [c for c, _ in compressed]
    if any(_needs_grad(t) for t in inputs):
        reduced = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor, postscale_factor,
                                                process_set, *inputs)
    else:
        reduced = synchronize(grouped_allreduce_async(inputs, None, name, op, prescale_factor,
                                                      postscale_factor, process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers indices and values and returns a callable that
    waits and returns the coalesced sparse sum (divided by the set size for Average)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError('sparse_allreduce_async: expected a sparse torch.Tensor, got %s'
                         % (tensor.type() if isinstance(tensor, torch.Tensor) else type(tensor).__name__))
    if op not in (Average, Sum):
        raise ValueError('sparse_allreduce_async: op must be Average or Sum (gathered values are added)')
    tensor = tensor.coalesce()
    indices = allgather_async(tensor._indices().t().contiguous(), name=None if name is None else name + '.indices',
                              process_set=process_set)
    values = allgather_async(tensor._values(), name=None if name is None else name + '.values',
                             process_set=process_set)
    return SparseAllreduceHandle(tensor, indices, values, op == Average, process_set, synchronize)


# ---- allgather ------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    code = _dtype_code(tensor, _COPYABLE, 'allgather')
    src = _host(tensor)
    return _ops.enqueue(_lib.ALLGATHER, _describe(src, code), None, src, _engine_output(tensor), name,
                        process_set=process_set._id())


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.process_set)
        offset = int(dims[:ctx.process_set.rank()].sum())
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    if _needs_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    handles = [allgather_async(t, None if name is None else '%s.%d' % (name, i), process_set)
               for i, t in enumerate(tensors)]
    group = next(_group_ids)
    _groups[group] = handles
    return group


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    if any(_needs_grad(t) for t in tensors):
        return [allgather(t, None if name is None else '%s.%d' % (name, i), process_set)
                for i, t in enumerate(tensors)]
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---- broadcast ------------------------------------------------------------------------------

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    code = _dtype_code(tensor, _COPYABLE, 'broadcast')
    src = tensor.contiguous()
    output = torch.empty_like(src)
    return _ops.enqueue(_lib.BROADCAST, _describe(src, code), _describe(output, code), (src, output),
                        lambda h: output, name, root=_root_in_set(process_set, root_rank, 'broadcast'),
                        process_set=process_set._id())


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    code = _dtype_code(tensor, _COPYABLE, 'broadcast_')
    buffer, finish = _contiguous_target(tensor)
    t = _describe(buffer, code)
    return _ops.enqueue(_lib.BROADCAST, t, t, buffer, finish, name,
                        root=_root_in_set(process_set, root_rank, 'broadcast_'),
                        process_set=process_set._id())


class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if _lib.lib().horovod_rank() != ctx.root_rank:      # root_rank is a global rank
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    if _needs_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall -------------------------------------------------------------------------------

def _alltoall_splits(tensor, splits, process_set):
    """(splits as a list or None, rows to send, whether this rank's arguments are wrong).
    Splits that are not integers raise InvalidArgumentError at once (Horovod: "alltoall expects
    splits to contain 32-bit integer elements"); the other mistakes are left to the library and
    the engine, which name them (see the module contract)."""
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise InvalidArgumentError('alltoall: splits must be a tensor of 32-bit integers (torch.int32), '
                                       'not %s' % splits.dtype)
        if splits.dim() > 1:
            raise InvalidArgumentError('alltoall: splits must be a 1-D tensor, not %d-D' % splits.dim())
        splits = splits.tolist()
    elif splits is not None:
        splits = list(splits)
        for s in splits:
            if not isinstance(s, numbers.Integral) or isinstance(s, bool):
                raise InvalidArgumentError('alltoall: splits must be integers, not %r' % (s,))
        splits = [int(s) for s in splits]
    rows = tensor.shape[0] if tensor.dim() else 0
    n = process_set.size()
    if not splits:
        return splits, rows, tensor.dim() == 0 or rows % n != 0
    total = sum(splits)
    wrong = len(splits) != n or any(s < 0 for s in splits) or total > rows
    return splits, (rows if wrong else total), wrong


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    code = _dtype_code(tensor, _COPYABLE, 'alltoall')
    splits, rows, wrong = _alltoall_splits(tensor, splits, process_set)
    src = _host(tensor)
    if tensor.dim() and rows < tensor.shape[0]:
        src = src.narrow(0, 0, rows).contiguous()      # Horovod ignores rows past the splits' sum
    handle = _ops.enqueue(_lib.ALLTOALL, _describe(src, code), None, src,
                          _engine_output(tensor, nsplits=process_set.size()), name, splits=splits,
                          process_set=process_set._id())
    if wrong:
        _invalid_here[handle] = True
    return handle


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.received_splits = received_splits
        ctx.rows = tensor.shape[0]
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = alltoall(grad_output, splits=ctx.received_splits, process_set=ctx.process_set)
        if grad.shape[0] < ctx.rows:           # rows past the splits' sum were not sent
            grad = torch.cat([grad, grad.new_zeros((ctx.rows - grad.shape[0],) + tuple(grad.shape[1:]))])
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns the received rows, or (rows, received_splits) when splits is given."""
    if _needs_grad(tensor):
        output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ---- reducescatter --------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _check_adasum(op)
    code = _dtype_code(tensor, _REDUCIBLE, 'reducescatter')
    src = _host(tensor)
    return _ops.enqueue(_lib.REDUCESCATTER, _describe(src, code), None, src, _engine_output(tensor),
                        name, op, prescale_factor, postscale_factor, process_set=process_set._id())


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        return _reducescatter_grad(ctx, grad_output), None, None, None, None, None


def _reducescatter_grad(ctx, grad_output):
    """Horovod's gradient of reducescatter: the gradient times the set size for Sum (none for
    Average) and times the pre- and postscale factors, allgathered."""
    scale = ctx.prescale_factor * ctx.postscale_factor
    if ctx.op == Sum:
        scale *= ctx.process_set.size()
    grad = grad_output.contiguous()
    if scale != 1.0:
        grad = grad * scale
    return allgather(grad, process_set=ctx.process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    _require_tensor(tensor, 'reducescatter')
    compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                              postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    handles = [reducescatter_async(t, None if name is None else '%s.%d' % (name, i), op,
                                   process_set, prescale_factor, postscale_factor)
               for i, t in enumerate(tensors)]
    group = next(_group_ids)
    _groups[group] = handles
    return group


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    for t in tensors:
        _require_tensor(t, 'grouped_reducescatter')
    if any(_needs_grad(t) for t in tensors):
        return [reducescatter(t, None if name is None else '%s.%d' % (name, i), compression, op,
                              process_set, prescale_factor, postscale_factor)
                for i, t in enumerate(tensors)]
    compressed = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_reducescatter_async([c for c, _ in compressed], name, op,
                                                   process_set, prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]


# ---- completion, join, barrier --------------------------------------------------------------

def poll(handle):
    """True when the operation behind the handle completed (synchronize will not block)."""
    if isinstance(handle, SparseAllreduceHandle):
        return handle.poll()
    group = _groups.get(handle)
    if group is None:
        return _ops.poll(handle)
    return all(_ops.poll(h) for h in group)


def synchronize(handle):
    """Waits for the operation and returns its output (a list for grouped operations, the
    sparse result for sparse_allreduce_async's callable)."""
    if isinstance(handle, SparseAllreduceHandle):
        return handle()
    group = _groups.pop(handle, None)
    if group is None:
        wrong_here = _invalid_here.pop(handle, False) if _invalid_here else False
        try:
            return _ops.synchronize(handle)
        except HorovodInternalError as e:
            if wrong_here:      # the engine refused this rank's own arguments
                raise InvalidArgumentError(str(e)) from None
            raise
    results, error = [], None
    for h in group:                      # wait for all, even after a failure: no leaked handles
        try:
            results.append(_ops.synchronize(h))
        except Exception as e:
            error = error or e
    if error is not None:
        raise error
    return results


def _forget_all():
    """After shutdown: handles from before it mean nothing (the engine completed or failed them)."""
    _groups.clear()
    _invalid_here.clear()


def join(device=-1):
    """This rank has no more data: until all ranks joined, the others' allreduces proceed with
    zeros from this rank. Blocks until every rank joined; returns the rank that joined last."""
    return _ops.synchronize(_ops.enqueue(_lib.JOIN, None, None, None, _ops.join_last_rank))


def barrier(process_set=global_process_set):
    _ops.synchronize(_ops.enqueue(_lib.BARRIER, None, None, None, None, process_set=process_set._id()))
