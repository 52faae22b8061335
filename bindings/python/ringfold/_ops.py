"""The framework-independent half of every collective: enqueue through ringfold_enqueue, keep
the buffers alive while the engine uses them, wait, read engine-allocated results, release.

Contract
  * A frontend (ringfold.ops for numpy, ringfold.torch) describes its buffers with `tensor()`
    (pointer, dtype code, shape, device, stream) and calls `enqueue()`, passing `keep` (objects
    that must outlive the operation: the input and output buffers) and `finish(handle)`, a
    function run once the operation succeeded that returns what synchronize() returns.
  * enqueue() returns an int handle; engine errors raise at once (a bad argument on this rank:
    InvalidArgumentError) or from synchronize() (disagreement between ranks, peer failure:
    HorovodInternalError), as _lib.check() maps the library's status.
  * synchronize(handle) waits with the GIL released, in slices of a second so that Ctrl-C
    still interrupts it, then runs `finish` and releases the handle in every case. A handle is
    synchronized once; an unknown handle raises ValueError.
  * Names get Horovod's prefix, "<op>.<name>", so one name may be used by two kinds of
    operation at once, as in Horovod.
"""
import ctypes

from ringfold import _lib

_OP_PREFIX = {
    _lib.ALLREDUCE: 'allreduce.', _lib.ALLGATHER: 'allgather.', _lib.BROADCAST: 'broadcast.',
    _lib.ALLTOALL: 'alltoall.', _lib.REDUCESCATTER: 'reducescatter.', _lib.REDUCE: 'reduce.',
}

_pending = {}            # handle -> (keep, finish)
_WAIT_SLICE_SECONDS = 1.0

# Shapes and names repeat every training step: their C forms are built once. The arrays are
# only read by the library, so one array may serve many calls at once.
_shape_arrays = {}       # shape tuple -> ctypes int64 array
_wire_names = {}         # (op type, name) -> encoded "<op>.<name>"
_CACHE_LIMIT = 4096


def _cached(cache, key, make):
    value = cache.get(key)
    if value is None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        value = cache[key] = make()
    return value


def _shape_array(shape):
    shape = tuple(shape)
    return _cached(_shape_arrays, shape, lambda: (ctypes.c_int64 * max(len(shape), 1))(*shape))


def _wire_name(op_type, name):
    """Horovod's "<op>.<name>", encoded; None (auto-named by the engine) for no name."""
    if name is None:
        return None
    return _cached(_wire_names, (op_type, name), lambda: (_OP_PREFIX.get(op_type, '') + str(name)).encode())


def tensor(ptr, dtype, shape, device=_lib.CPU_DEVICE, stream=None):
    """A ringfold_tensor_t over existing memory (shape: a sequence of ints)."""
    t = _lib.Tensor()
    t.data = ptr
    t.dtype = dtype
    t.ndim = len(shape)
    t.device = device
    t.stream = stream
    if len(shape):
        t.shape = _shape_array(shape)
    return t


def enqueue(op_type, inp, out, keep, finish, name=None, reduce_op=0, prescale=1.0, postscale=1.0,
            root=0, splits=None, process_set=0):
    op = _lib.Op()
    op.type = op_type
    op.name = _wire_name(op_type, name)
    op.reduce_op = reduce_op
    op.prescale = prescale
    op.postscale = postscale
    op.root = root
    op.process_set = process_set
    if splits is not None:
        splits = [int(s) for s in splits]
        op.nsplits = len(splits)
        if splits:
            op.splits = (ctypes.c_int64 * len(splits))(*splits)
    handle = ctypes.c_int64()
    status = _lib.lib().ringfold_enqueue(ctypes.byref(op), inp, out, ctypes.byref(handle))
    _lib.check(status)
    _pending[handle.value] = (keep, finish)
    return handle.value


def enqueue_allreduce(in_ptr, out_ptr, dtype, shape, keep, finish, name, reduce_op, prescale,
                      postscale, process_set):
    """enqueue() for one allreduce of host memory through the flat C entry point
    (ringfold_allreduce_async): no structs to build, shapes and names cached. This is the
    per-gradient path, where Python's cost per call matters."""
    handle = ctypes.c_int64()
    _lib.check(_lib.lib().ringfold_allreduce_async(in_ptr, out_ptr, dtype, _shape_array(shape), len(shape),
                                                   _wire_name(_lib.ALLREDUCE, name),
                                                   reduce_op, prescale, postscale, process_set,
                                                   _lib.CPU_DEVICE, ctypes.byref(handle)))
    _pending[handle.value] = (keep, finish)
    return handle.value


def enqueue_grouped_allreduce(inputs, outputs, keep, finishes, names, reduce_op, prescale, postscale,
                              process_set, device=_lib.CPU_DEVICE):
    """`inputs`/`outputs`: lists of (ptr, dtype, shape). One handle per tensor, negotiated and
    completed together by the engine (ringfold_grouped_allreduce_async)."""
    count = len(inputs)
    if count == 0:
        return []
    void_array = ctypes.c_void_p * count
    shapes = [_shape_array(s) for _, _, s in inputs]
    handles = (ctypes.c_int64 * count)()
    c_names = None
    if names is not None:
        c_names = (ctypes.c_char_p * count)(*[_wire_name(_lib.ALLREDUCE, n) for n in names])
    status = _lib.lib().ringfold_grouped_allreduce_async(
        count, void_array(*[p for p, _, _ in inputs]), void_array(*[p for p, _, _ in outputs]),
        (ctypes.c_int * count)(*[d for _, d, _ in inputs]),
        (ctypes.POINTER(ctypes.c_int64) * count)(*[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shapes]),
        (ctypes.c_int * count)(*[len(s) for _, _, s in inputs]), c_names, reduce_op, prescale,
        postscale, process_set, device, handles)
    _lib.check(status)
    for i in range(count):
        _pending[handles[i]] = (keep, finishes[i])
    return list(handles)


def poll(handle):
    """True once the operation completed (successfully or not)."""
    if handle not in _pending:
        raise ValueError('poll: unknown or already synchronized handle %r' % (handle,))
    result = _lib.lib().ringfold_poll(handle)
    if result < 0:
        _lib.check(-result)
    return result == 1


def synchronize(handle):
    try:
        keep, finish = _pending.pop(handle)
    except (KeyError, TypeError):
        raise ValueError('synchronize: unknown or already synchronized handle %r' % (handle,)) from None
    lib = _lib.lib()
    status = _lib.IN_PROGRESS
    try:
        while status == _lib.IN_PROGRESS:
            status = lib.ringfold_wait(handle, _WAIT_SLICE_SECONDS)
    except BaseException:                 # interrupted (Ctrl-C): the engine still owns the buffers
        if lib.ringfold_poll(handle) == 0:
            _pending[handle] = (keep, finish)
        else:
            lib.ringfold_release(handle)
        raise
    try:
        _lib.check(status)
        return finish(handle) if finish is not None else None
    finally:
        lib.ringfold_release(handle)


def forget_all():
    """Drops every pending record (after shutdown the engine has completed or failed them)."""
    _pending.clear()


def result_shape(handle):
    lib = _lib.lib()
    ndim = ctypes.c_int()
    _lib.check(lib.ringfold_result_ndim(handle, ctypes.byref(ndim)))
    shape = (ctypes.c_int64 * max(ndim.value, 1))()
    _lib.check(lib.ringfold_result_shape(handle, shape, max(ndim.value, 1)))
    return tuple(shape[:ndim.value])


def result_copy(handle, ptr, nbytes):
    _lib.check(_lib.lib().ringfold_result_copy(handle, ptr, nbytes))


def received_splits(handle, nranks):
    splits = (ctypes.c_int64 * max(nranks, 1))()
    _lib.check(_lib.lib().ringfold_result_received_splits(handle, splits, max(nranks, 1)))
    return list(splits[:nranks])


def join_last_rank(handle):
    rank = ctypes.c_int()
    _lib.check(_lib.lib().ringfold_join_last_rank(handle, ctypes.byref(rank)))
    return rank.value


def nbytes(dtype, shape):
    n = _lib.DTYPE_SIZES[dtype]
    for d in shape:
        n *= d
    return n
