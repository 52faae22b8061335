"""Horovod's TensorFlow collectives (horovod/tensorflow/mpi_ops.py) over ringfold's C ABI.

Contract
  * Nothing is compiled against TensorFlow. In eager mode a collective calls the engine
    directly on the tensor's host memory (zero-copy numpy views) and returns a tf.Tensor.
    Inside tf.function it is a `tf.numpy_function` op (stateful) that does the same when the
    graph runs; its static shape is set from the input (allreduce, broadcast) or has an unknown
    first dimension (allgather, alltoall, reducescatter).
  * Graph mode (tf.function): each collective gets Horovod's trace-time name
    ("HorovodAllreduce_<tensor name>", ...) unless `name` is given, also as its graph node's
    name (so TensorFlow's error messages carry it, as Horovod's), and the collectives of one
    graph are chained with control dependencies in the order they were traced. Every rank
    therefore runs them in the same order, one at a time per graph: a py-function that waits
    holds one of TensorFlow's inter-op threads, so ops started in different orders on
    different ranks could otherwise exhaust the pool and deadlock. Inside tf.function
    TensorFlow's automatic control dependencies order stateful ops too; graphs without them
    (tf.compat.v1.wrap_function) rely on this chaining (tests/python/test_tensorflow_jobs.py,
    with a negative control that removes it).
  * Gradients are Horovod's (registered with tf.custom_gradient; eagerly with no GradientTape
    recording the op runs without it, as it would cost more than a small collective):
      allreduce      -> allreduce of the gradient with the same op and scale factors
      grouped_*      -> the same per tensor
      allgather      -> Average-allreduce of the gradient, then this rank's rows
      broadcast      -> Average-allreduce of the gradient on the root, zeros elsewhere
      alltoall       -> alltoall of the gradient with the received splits
      reducescatter  -> allgather of the gradient, times the set size for Sum and the scale
                        factors
  * dtypes: uint8, int8, int32, int64, float16, bfloat16, float32, float64 (uint32, uint64) for
    every collective; bool, int16 and uint16 for the copying ones (allgather, broadcast,
    alltoall). Anything else raises ValueError naming the dtype.
  * Errors keep ringfold's classes and are also TensorFlow's, as Horovod's TF ops raise them:
    a bad argument on this rank is InvalidArgumentError and tf.errors.InvalidArgumentError;
    ranks that disagree are HorovodInternalError and tf.errors.FailedPreconditionError (on
    every rank); a dead peer or a stopped engine is HorovodInternalError and
    tf.errors.UnknownError (Aborted for ABORTED). Inside tf.function TensorFlow re-raises a
    py-function's exception as its own error (UnknownError; InvalidArgumentError for a
    ValueError) whose message starts with the ringfold class name and message.
  * XLA: a collective traced under jit_compile=True raises NotImplementedError at trace time,
    naming the op and the fix (py-functions cannot be compiled by XLA).
"""
import re
import threading
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as _tf_ops
from tensorflow.python.ops import control_flow_util as _cf_util
try:   # whether any GradientTape is recording (TF >= 2.13; else always take the gradient path)
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:
    _could_record = None

from ringfold import _lib, _ops
from ringfold.basics import Average, Sum, Adasum
from ringfold.exceptions import HorovodInternalError, InvalidArgumentError
from ringfold.process_sets import _root_in_set, global_process_set

# --- errors that are ringfold's and TensorFlow's at once ------------------------------------


def _tf_error(ringfold_class, tf_class):
    def __init__(self, message):
        ringfold_class.__init__(self, message)
        tf_class.__init__(self, None, None, message)

    def __str__(self):
        return self.message
    return type(ringfold_class.__name__, (ringfold_class, tf_class),
                {'__init__': __init__, '__str__': __str__, '__module__': __name__})


TFInvalidArgumentError = _tf_error(InvalidArgumentError, tf.errors.InvalidArgumentError)
TFPreconditionError = _tf_error(HorovodInternalError, tf.errors.FailedPreconditionError)
TFAbortedError = _tf_error(HorovodInternalError, tf.errors.AbortedError)
TFUnknownError = _tf_error(HorovodInternalError, tf.errors.UnknownError)

_STATUS_ERRORS = {
    _lib.INVALID_ARGUMENT: TFInvalidArgumentError,
    _lib.PRECONDITION_ERROR: TFPreconditionError,
    _lib.ABORTED: TFAbortedError,
}


def _check(status):
    if status != _lib.OK:
        message = _lib.last_error() or ('status %d' % status)
        raise _STATUS_ERRORS.get(status, TFUnknownError)(message)


def _enqueued(fn, *args, **kwargs):
    """Calls an _ops enqueue function, mapping its errors to the TF-aware classes."""
    try:
        return fn(*args, **kwargs)
    except InvalidArgumentError as e:
        raise TFInvalidArgumentError(str(e)) from None
    except HorovodInternalError as e:
        raise TFUnknownError(str(e)) from None


def _wait(handle):
    """_ops.synchronize() with the library's status mapped to the TF-aware error classes."""
    keep, finish = _ops._pending.pop(handle)
    lib = _lib.lib()
    status = _lib.IN_PROGRESS
    try:
        while status == _lib.IN_PROGRESS:
            status = lib.ringfold_wait(handle, _ops._WAIT_SLICE_SECONDS)
    except BaseException:
        if lib.ringfold_poll(handle) == 0:
            _ops._pending[handle] = (keep, finish)
        else:
            lib.ringfold_release(handle)
        raise
    try:
        _check(status)
        return finish(handle) if finish is not None else None
    finally:
        lib.ringfold_release(handle)


def _wait_all(handles):
    """Waits for every handle (also after a failure, so no buffer is released early); raises
    the first error."""
    results, error = [], None
    for h in handles:
        try:
            results.append(_wait(h))
        except Exception as e:  # keep waiting for the others: they use our buffers
            if error is None:
                error = e
            results.append(None)
    if error is not None:
        raise error
    return results


# --- dtypes ---------------------------------------------------------------------------------

_REDUCIBLE = {
    tf.uint8: _lib.UINT8, tf.int8: _lib.INT8, tf.int32: _lib.INT32, tf.int64: _lib.INT64,
    tf.uint32: _lib.UINT32, tf.uint64: _lib.UINT64, tf.float16: _lib.FLOAT16,
    tf.bfloat16: _lib.BFLOAT16, tf.float32: _lib.FLOAT32, tf.float64: _lib.FLOAT64,
}
# Copying collectives move bytes: a 2-byte integer travels as any 2-byte type.
_COPYABLE = {**_REDUCIBLE, tf.bool: _lib.BOOL, tf.int16: _lib.FLOAT16, tf.uint16: _lib.FLOAT16}
_NP_CODES = {np.dtype(d.as_numpy_dtype): c for d, c in _COPYABLE.items()}
_NP_CODES[np.dtype(np.int16)] = _NP_CODES[np.dtype(np.uint16)] = _lib.FLOAT16


def _code(dtype, table, what):
    code = table.get(tf.as_dtype(dtype))
    if code is None:
        raise ValueError('%s: tensor type %s is not supported (supported: %s)'
                         % (what, tf.as_dtype(dtype).name,
                            ', '.join(sorted(d.name for d in table))))
    return code


def _np_code(array):
    return _NP_CODES[array.dtype]


# --- numpy-level collectives (run eagerly or inside a py-function) -------------------------

def _engine_output(dtype, nsplits=0):
    def finish(handle):
        shape = _ops.result_shape(handle)
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            _ops.result_copy(handle, out.ctypes.data, out.nbytes)
        if nsplits:
            return out, np.array(_ops.received_splits(handle, nsplits), dtype=np.int32)
        return out
    return finish


def _c(array):
    return np.require(array, requirements='C')   # keeps 0-d arrays 0-d (ascontiguousarray does not)


def _np_allreduce_start(arrays, names, op, prescale, postscale, ps_id):
    srcs = [_c(a) for a in arrays]
    outs = [np.empty_like(a) for a in srcs]
    if len(srcs) == 1:
        s, o = srcs[0], outs[0]
        return [_enqueued(_ops.enqueue_allreduce, s.ctypes.data, o.ctypes.data, _np_code(s), s.shape,
                          (s, o), lambda h, o=o: o, names[0] if names else None, op,
                          prescale, postscale, ps_id)]
    return _enqueued(_ops.enqueue_grouped_allreduce,
                     [(a.ctypes.data, _np_code(a), a.shape) for a in srcs],
                     [(o.ctypes.data, _np_code(o), o.shape) for o in outs], (srcs, outs),
                     [(lambda h, o=o: o) for o in outs], names, op, prescale, postscale, ps_id)


def _np_allreduce(arrays, names, op, prescale, postscale, ps_id):
    return _wait_all(_np_allreduce_start(arrays, names, op, prescale, postscale, ps_id))


def _np_simple_start(op_type, array, name, ps_id, reduce_op=0, prescale=1.0, postscale=1.0,
                     root=0, splits=None, nsplits=0):
    src = _c(array)
    t_in = _ops.tensor(src.ctypes.data, _np_code(src), src.shape)
    out, t_out, finish = None, None, _engine_output(src.dtype, nsplits)
    if op_type == _lib.BROADCAST:
        out = np.empty_like(src)
        t_out = _ops.tensor(out.ctypes.data, t_in.dtype, out.shape)
        finish = lambda h: out  # noqa: E731
    return _enqueued(_ops.enqueue, op_type, t_in, t_out, (src, out), finish, name, reduce_op,
                     prescale, postscale, root, splits, ps_id)


def _np_broadcast_many(arrays, root, names, ps_id):
    """Broadcasts every array (enqueued together, then waited for)."""
    handles = [_np_simple_start(_lib.BROADCAST, a, n, ps_id, root=root)
               for a, n in zip(arrays, names or [None] * len(arrays))]
    return _wait_all(handles)


# --- running a numpy collective eagerly or as a graph op -------------------------------------

_graph_chain = weakref.WeakKeyDictionary()   # graph -> the last collective op traced in it
_chain_lock = threading.Lock()


def _executing_eagerly():
    return tf.executing_eagerly()


def _normalize_name(name):
    """Horovod's: a TensorFlow op name made of [a-zA-Z0-9_]."""
    return re.sub('[^a-zA-Z0-9_]', '_', name)


def _check_not_xla(what):
    graph = _tf_ops.get_default_graph()
    if _cf_util.GraphOrParentsInXlaContext(graph):
        raise NotImplementedError(
            'ringfold.tensorflow.%s cannot run under XLA (tf.function(jit_compile=True) or a Keras '
            'model compiled with jit_compile=True): ringfold\'s ops are py-functions, which XLA cannot '
            'compile. Use jit_compile=False (model.compile(..., jit_compile=False)); '
            'ringfold.keras callbacks and DistributedOptimizer turn Keras\'s "auto" off.' % what)


def _run(what, fn, inputs, tout, node_name=None):
    """Runs fn(*numpy inputs) -> numpy outputs now (eager) or as a chained graph op named
    node_name (Horovod's op name: the collective's name, else "Horovod<Op>"), so TensorFlow's
    error messages carry it as they carry Horovod's ("[[{{node HorovodAllreduce_x_0}}]]", which
    horovod.tensorflow.elastic looks for)."""
    if _executing_eagerly():
        outs = fn(*[t.numpy() for t in inputs])
        return [tf.convert_to_tensor(o) for o in outs]
    _check_not_xla(what)
    graph = _tf_ops.get_default_graph()
    with _chain_lock:
        last = _graph_chain.get(graph)
    deps = [last] if last is not None else []
    with tf.control_dependencies(deps):
        outs = tf.numpy_function(lambda *a: tuple(fn(*a)), list(inputs), list(tout), stateful=True,
                                 name=_normalize_name(node_name) if node_name else
                                 'Horovod' + what.title().replace('_', ''))
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    with _chain_lock:
        _graph_chain[graph] = outs[0].op
    return outs


def _differentiable(forward, tensors):
    """forward(*tensors) -> (outputs, grad_fn) as a tf.custom_gradient op, or just its outputs
    when running eagerly with no gradient tape recording: the custom-gradient machinery costs
    ~150 us a call, more than the collective itself on small tensors."""
    if _executing_eagerly() and _could_record is not None and not _could_record():
        return forward(*tensors)[0]
    return tf.custom_gradient(forward)(*tensors)


def _graph_name(prefix, tensors, name):
    if name is not None or _executing_eagerly():
        return name
    if len(tensors) == 1:
        return '%s_%s' % (prefix, _normalize_name(tensors[0].name))
    return _normalize_name('%s_%s_%s' % (prefix, tensors[0].name, tensors[-1].name))


def _ps_object(ps):
    return ps if ps is not None else global_process_set


# --- the raw collectives (Horovod's _allreduce, allgather, ...) -------------------------------

def _tensor(x, what):
    if isinstance(x, tf.IndexedSlices):
        raise ValueError('%s: tf.IndexedSlices are handled by allreduce(), not here' % what)
    return tf.convert_to_tensor(x)


def _grouped_allreduce_raw(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                           process_set=global_process_set):
    """Horovod's _grouped_allreduce: no compression, op as given; gradient registered."""
    tensors = [_tensor(t, 'allreduce') for t in tensors]
    for t in tensors:
        _code(t.dtype, _REDUCIBLE, 'allreduce')
    if op == Adasum:
        raise NotImplementedError('ringfold has no Adasum (see docs/compatibility.md)')
    ps_id = process_set._id()
    base = _graph_name('HorovodAllreduce' if len(tensors) == 1 else 'HorovodGroupedAllreduce',
                       tensors, name)
    names = None if base is None else ([base] if len(tensors) == 1 else
                                       ['%s.%d' % (base, i) for i in range(len(tensors))])
    prescale, postscale = float(prescale_factor), float(postscale_factor)

    def forward(*xs):
        outs = _run('allreduce', lambda *a: _np_allreduce(a, names, op, prescale, postscale, ps_id),
                    xs, [x.dtype for x in xs], base)
        for o, x in zip(outs, xs):
            o.set_shape(x.shape)

        def grad(*dys):
            return _grouped_allreduce_raw(list(dys), None, op, prescale, postscale, process_set)
        return outs, grad
    return list(_differentiable(forward, tensors))


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return _grouped_allreduce_raw([tensor], name, op, prescale_factor, postscale_factor, process_set)[0]


def _allgather_np(name, ps_id):
    def run(a):
        return [_wait(_np_simple_start(_lib.ALLGATHER, a, name, ps_id))]
    return run


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return [allgather(t, None if name is None else '%s.%d' % (name, i), process_set)
            for i, t in enumerate(tensors)]


def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Concatenates every rank's tensor along dimension 0 (first dimensions may differ)."""
    tensor = _tensor(tensor, 'allgather')
    _code(tensor.dtype, _COPYABLE, 'allgather')
    ps_id = process_set._id()
    name = _graph_name('HorovodAllgather', [tensor], name)

    def forward(x):
        out, = _run('allgather', _allgather_np(name, ps_id), [x], [x.dtype], name)
        out.set_shape(tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else None)

        def grad(dy):
            if not x.dtype.is_floating:
                return None
            dy = _allreduce(dy, op=Average, process_set=process_set)
            d = tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1])
            sizes = tf.reshape(allgather(d, process_set=process_set), [process_set.size()])
            return tf.split(dy, num_or_size_splits=sizes, axis=0)[process_set.rank()]
        return out, grad
    return _differentiable(forward, [tensor])


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, ignore_name_scope=False):
    """The root rank's tensor on every rank of the set (root_rank is a global rank)."""
    tensor = _tensor(tensor, 'broadcast')
    _code(tensor.dtype, _COPYABLE, 'broadcast')
    ps_id = process_set._id()
    root = _root_in_set(process_set, root_rank, 'broadcast')
    name = _graph_name('HorovodBroadcast', [tensor], name)
    from ringfold.basics import rank

    def forward(x):
        out, = _run('broadcast', lambda a: [_wait(_np_simple_start(_lib.BROADCAST, a, name, ps_id,
                                                                    root=root))], [x], [x.dtype],
                    name)
        out.set_shape(x.shape)

        def grad(dy):
            reduced = _allreduce(dy, op=Average, process_set=process_set)
            return reduced if rank() == root_rank else reduced * 0
        return out, grad
    return _differentiable(forward, [tensor])


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's alltoall: returns the received rows, or (rows, received_splits) with splits."""
    tensor = _tensor(tensor, 'alltoall')
    _code(tensor.dtype, _COPYABLE, 'alltoall')
    ps_id = process_set._id()
    nranks = process_set.size()
    name = _graph_name('HorovodAlltoall', [tensor], name)
    splits_t = (tf.convert_to_tensor(splits) if splits is not None
                else tf.constant([], dtype=tf.int32))
    if splits_t.dtype not in (tf.int32, tf.int64):
        raise ValueError('alltoall: splits must be integers, got %s' % splits_t.dtype.name)

    def run(a, s):
        sp = None if s.size == 0 else [int(v) for v in s.ravel()]
        if sp is not None and len(sp) != nranks:
            raise TFInvalidArgumentError('alltoall: %d splits for a process set of %d ranks'
                                         % (len(sp), nranks))
        out, received = _wait(_np_simple_start(_lib.ALLTOALL, a, name, ps_id, splits=sp,
                                               nsplits=nranks))
        return [out, received]

    def forward(x):
        out, received = _run('alltoall', run, [x, splits_t], [x.dtype, tf.int32], name)
        out.set_shape(tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else None)
        received.set_shape([nranks])

        def grad(dy, _unused=None):
            if not x.dtype.is_floating:
                return None
            back, _ = alltoall(dy, splits=received, process_set=process_set)
            # Rows past the splits' sum were not sent: zero gradient.
            pad = tf.shape(x)[0] - tf.shape(back)[0]
            return tf.concat([back, tf.zeros(tf.concat([[pad], tf.shape(back)[1:]], 0), back.dtype)], 0)
        return (out, received), grad
    out, received = _differentiable(forward, [tensor])
    return (out, received) if splits is not None else out


def _reducescatter(tensor, name=None, op=Sum, process_set=global_process_set, prescale_factor=1.0,
                   postscale_factor=1.0):
    tensor = _tensor(tensor, 'reducescatter')
    _code(tensor.dtype, _REDUCIBLE, 'reducescatter')
    if op == Adasum:
        raise NotImplementedError('ringfold has no Adasum (see docs/compatibility.md)')
    ps_id = process_set._id()
    name = _graph_name('HorovodReducescatter', [tensor], name)
    prescale, postscale = float(prescale_factor), float(postscale_factor)

    def forward(x):
        out, = _run('reducescatter',
                    lambda a: [_wait(_np_simple_start(_lib.REDUCESCATTER, a, name, ps_id, op,
                                                      prescale, postscale))], [x], [x.dtype],
                    name)
        out.set_shape(tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else None)

        def grad(dy):
            if op == Sum:
                dy *= process_set.size()
            if prescale != 1.0:
                dy *= prescale
            if postscale != 1.0:
                dy *= postscale
            return allgather(dy, process_set=process_set)
        return out, grad
    return _differentiable(forward, [tensor])


def join(process_set=global_process_set):
    """This rank has no more data; returns (as an int32 scalar tensor) the last rank to join."""
    ps_id = process_set._id()

    def run():
        return [np.int32(_wait(_enqueued(_ops.enqueue, _lib.JOIN, None, None, None,
                                         _ops.join_last_rank, process_set=ps_id)))]
    if _executing_eagerly():
        return tf.constant(run()[0])
    return _run('join', run, [], [tf.int32])[0]


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has called barrier()."""
    ps_id = process_set._id()

    def run():
        _wait(_enqueued(_ops.enqueue, _lib.BARRIER, None, None, None, None, process_set=ps_id))
        return [np.int32(0)]
    if _executing_eagerly():
        run()
        return None
    return _run('barrier', run, [], [tf.int32])[0].op


def _forget_all():
    _graph_chain.clear()
