"""Collectives on numpy arrays: ringfold without a deep-learning framework.

Contract
  * Same names and arguments as ringfold.torch (Horovod's API) minus autograd and
    compression: allreduce, allgather, broadcast, alltoall, reducescatter, each with `_async`
    forms, in-place `allreduce_` / `broadcast_` (and `_async_`), grouped_allreduce, join,
    barrier, poll and synchronize.
  * Arrays of any shape with dtype int8, uint8, int32, uint32, int64, uint64, float16, float32,
    float64 or bool (bool: copying collectives only). Non-contiguous inputs are copied; an
    in-place target must be C-contiguous and writeable (ValueError otherwise).
  * Out-of-place results are new arrays; the inputs are never modified. allreduce, its grouped
    form and broadcast keep a 0-d input 0-d (a numpy scalar in, a 0-d array out); the gathering
    and splitting collectives treat it as one element.
  * root_rank is a global rank, also with a process set (as in Horovod).
"""
import numpy as np

from ringfold import _lib, _ops
from ringfold.basics import Average
from ringfold.process_sets import _root_in_set, global_process_set

_DTYPES = {
    np.dtype(np.int8): _lib.INT8, np.dtype(np.uint8): _lib.UINT8, np.dtype(np.int32): _lib.INT32,
    np.dtype(np.uint32): _lib.UINT32, np.dtype(np.int64): _lib.INT64, np.dtype(np.uint64): _lib.UINT64,
    np.dtype(np.float16): _lib.FLOAT16, np.dtype(np.float32): _lib.FLOAT32,
    np.dtype(np.float64): _lib.FLOAT64, np.dtype(np.bool_): _lib.BOOL,
}


def _code(array):
    code = _DTYPES.get(array.dtype)
    if code is None:
        raise ValueError('ringfold: numpy dtype %s is not supported (supported: %s)'
                         % (array.dtype, ', '.join(str(d) for d in _DTYPES)))
    return code


def _contiguous(array):
    """`array` as a C-contiguous ndarray, copied only if needed; 0-d stays 0-d (which
    np.ascontiguousarray does not keep)."""
    return np.require(np.asarray(array), requirements='C')


def _input(array, keep_0d=False):
    array = _contiguous(array) if keep_0d else np.ascontiguousarray(array)
    return array, _ops.tensor(array.ctypes.data, _code(array), array.shape)


def _target(array, what):
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError('%s: the in-place target must be a writeable C-contiguous numpy array' % what)
    return _ops.tensor(array.ctypes.data, _code(array), array.shape)


def _engine_output(dtype, with_splits=0):
    """finish() for operations whose output the engine allocates."""
    def finish(handle):
        shape = _ops.result_shape(handle)
        out = np.empty(shape, dtype=dtype)
        _ops.result_copy(handle, out.ctypes.data, out.nbytes)
        if with_splits:
            return out, np.array(_ops.received_splits(handle, with_splits), dtype=np.int32)
        return out
    return finish


def allreduce_async_(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    _target(array, 'allreduce_')
    return _ops.enqueue_allreduce(array.ctypes.data, array.ctypes.data, _code(array), array.shape,
                                  array, lambda h: array, name, op, prescale_factor,
                                  postscale_factor, process_set._id())


def allreduce_async(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    src = _contiguous(array)
    out = np.empty_like(src)
    return _ops.enqueue_allreduce(src.ctypes.data, out.ctypes.data, _code(src), src.shape, (src, out),
                                  lambda h: out, name, op, prescale_factor, postscale_factor,
                                  process_set._id())


def allreduce(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    return _ops.synchronize(allreduce_async(array, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return _ops.synchronize(allreduce_async_(array, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce(arrays, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduces a list of arrays, negotiated and completed together (Horovod's groups)."""
    srcs = [_contiguous(a) for a in arrays]
    outs = [np.empty_like(a) for a in srcs]
    names = None if name is None else ['%s.%d' % (name, i) for i in range(len(srcs))]
    handles = _ops.enqueue_grouped_allreduce(
        [(a.ctypes.data, _code(a), a.shape) for a in srcs],
        [(o.ctypes.data, _code(o), o.shape) for o in outs], (srcs, outs),
        [(lambda h, o=o: o) for o in outs], names, op, prescale_factor, postscale_factor,
        process_set._id())
    return [_ops.synchronize(h) for h in handles]


def allgather_async(array, name=None, process_set=global_process_set):
    src, t_in = _input(array)
    return _ops.enqueue(_lib.ALLGATHER, t_in, None, src, _engine_output(src.dtype), name,
                        process_set=process_set._id())


def allgather(array, name=None, process_set=global_process_set):
    return _ops.synchronize(allgather_async(array, name, process_set))


def broadcast_async_(array, root_rank, name=None, process_set=global_process_set):
    t = _target(array, 'broadcast_')
    return _ops.enqueue(_lib.BROADCAST, t, t, array, lambda h: array, name,
                        root=_root_in_set(process_set, root_rank, 'broadcast_'),
                        process_set=process_set._id())


def broadcast_async(array, root_rank, name=None, process_set=global_process_set):
    src, t_in = _input(array, keep_0d=True)
    out = np.empty_like(src)
    t_out = _ops.tensor(out.ctypes.data, t_in.dtype, out.shape)
    return _ops.enqueue(_lib.BROADCAST, t_in, t_out, (src, out), lambda h: out, name,
                        root=_root_in_set(process_set, root_rank, 'broadcast'),
                        process_set=process_set._id())


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    return _ops.synchronize(broadcast_async(array, root_rank, name, process_set))


def broadcast_(array, root_rank, name=None, process_set=global_process_set):
    return _ops.synchronize(broadcast_async_(array, root_rank, name, process_set))


def alltoall_async(array, splits=None, name=None, process_set=global_process_set):
    src, t_in = _input(array)
    finish = _engine_output(src.dtype, with_splits=process_set.size() if splits is not None else 0)
    return _ops.enqueue(_lib.ALLTOALL, t_in, None, src, finish, name,
                        splits=None if splits is None else list(np.asarray(splits).ravel()),
                        process_set=process_set._id())


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Returns the received rows, or (rows, received_splits) when splits is given."""
    return _ops.synchronize(alltoall_async(array, splits, name, process_set))


def reducescatter_async(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
    src, t_in = _input(array)
    return _ops.enqueue(_lib.REDUCESCATTER, t_in, None, src, _engine_output(src.dtype), name, op,
                        prescale_factor, postscale_factor, process_set=process_set._id())


def reducescatter(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    return _ops.synchronize(reducescatter_async(array, name, op, prescale_factor, postscale_factor,
                                                process_set))


def join(process_set=global_process_set):
    """This rank has no more data; returns the rank that joined last, once all have."""
    return _ops.synchronize(_ops.enqueue(_lib.JOIN, None, None, None, _ops.join_last_rank,
                                         process_set=process_set._id()))


def barrier(process_set=global_process_set):
    _ops.synchronize(_ops.enqueue(_lib.BARRIER, None, None, None, None, process_set=process_set._id()))


poll = _ops.poll
synchronize = _ops.synchronize
