"""The Keras 3 half of ringfold.keras: DistributedOptimizer, variable broadcast, numpy
collectives for callbacks, load_model. Backend-specific work (the gradient allreduce inside a
traced train step) goes to ringfold.tensorflow or ringfold.torch; everything that runs
between steps (broadcasts, metric averaging) goes through numpy views and ringfold's C ABI.

See ringfold/keras/__init__.py for the contract.
"""
import ctypes  # noqa: F401  (kept: numpy views are passed to the C ABI by address)
import warnings

import numpy as np
import keras

from ringfold import _lib, _ops
from ringfold.basics import Average, Sum
from ringfold.exceptions import HorovodInternalError, InvalidArgumentError  # noqa: F401
from ringfold.process_sets import _root_in_set, global_process_set

_BACKEND = keras.backend.backend()

if _BACKEND == 'tensorflow':
    from ringfold.tensorflow.compression import Compression
else:
    from ringfold.torch.compression import Compression

# --- numpy collectives (between steps: callbacks, broadcasts) -------------------------------

_NP = {np.dtype(np.int8): _lib.INT8, np.dtype(np.uint8): _lib.UINT8, np.dtype(np.int32): _lib.INT32,
       np.dtype(np.uint32): _lib.UINT32, np.dtype(np.int64): _lib.INT64,
       np.dtype(np.uint64): _lib.UINT64, np.dtype(np.float16): _lib.FLOAT16,
       np.dtype(np.float32): _lib.FLOAT32, np.dtype(np.float64): _lib.FLOAT64}
_OPS = {'allgather': _lib.ALLGATHER, 'broadcast': _lib.BROADCAST, 'reducescatter': _lib.REDUCESCATTER}


def floatx_if_python(value):
    """Horovod's keras helpers make a backend constant: Python floats become floatx (float32)."""
    if isinstance(value, float) or (isinstance(value, (list, tuple)) and value and
                                    isinstance(value[0], float)):
        return keras.backend.floatx()
    return None


def _code(array):
    code = _NP.get(array.dtype)
    if code is None:
        raise ValueError('ringfold.keras: dtype %s is not supported here' % array.dtype)
    return code


def _finish_engine_output(dtype):
    def finish(handle):
        out = np.empty(_ops.result_shape(handle), dtype=dtype)
        if out.nbytes:
            _ops.result_copy(handle, out.ctypes.data, out.nbytes)
        return out
    return finish


def np_allreduce(array, name=None, op=Average, prescale=1.0, postscale=1.0,
                 process_set=global_process_set):
    src = np.require(array, requirements='C')
    out = np.empty_like(src)
    h = _ops.enqueue_allreduce(src.ctypes.data, out.ctypes.data, _code(src), src.shape, (src, out),
                               lambda h: out, name, op, float(prescale), float(postscale),
                               process_set._id())
    return _ops.synchronize(h)


def np_collective(kind, array, name=None, root_rank=0, op=Average, process_set=global_process_set):
    src = np.require(array, requirements='C')
    t_in = _ops.tensor(src.ctypes.data, _code(src), src.shape)
    t_out, finish, keep = None, _finish_engine_output(src.dtype), src
    root = 0
    if kind == 'broadcast':
        out = np.empty_like(src)
        t_out = _ops.tensor(out.ctypes.data, t_in.dtype, out.shape)
        finish, keep = (lambda h: out), (src, out)
        root = _root_in_set(process_set, root_rank, 'broadcast')
    h = _ops.enqueue(_OPS[kind], t_in, t_out, keep, finish, name, op if kind == 'reducescatter' else 0,
                     1.0, 1.0, root, None, process_set._id())
    return _ops.synchronize(h)


def np_broadcast_bytes(arrays, root_rank, process_set=global_process_set):
    """Broadcasts arrays of any dtype (as bytes: a broadcast copies) in one batch; returns new
    arrays of the same dtypes and shapes."""
    root = _root_in_set(process_set, root_rank, 'broadcast')
    handles = []
    for a in arrays:
        src = np.require(a, requirements='C')
        raw = src.reshape(-1).view(np.uint8)
        out = np.empty_like(raw)
        t_in = _ops.tensor(raw.ctypes.data, _lib.UINT8, raw.shape)
        t_out = _ops.tensor(out.ctypes.data, _lib.UINT8, out.shape)
        handles.append(_ops.enqueue(_lib.BROADCAST, t_in, t_out, (src, raw, out),
                                    lambda h, out=out, src=src: out.view(src.dtype).reshape(src.shape),
                                    None, 0, 1.0, 1.0, root, None, process_set._id()))
    results, error = [], None
    for h in handles:
        try:
            results.append(_ops.synchronize(h))
        except Exception as e:
            error = error or e
    if error is not None:
        raise error
    return results


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns the root's values to every variable (Keras or backend variables), eagerly."""
    variables = list(variables)
    values = [keras.ops.convert_to_numpy(v.value if hasattr(v, 'value') else v) for v in variables]
    for v, new in zip(variables, np_broadcast_bytes(values, root_rank, process_set)):
        v.assign(new)


# --- the gradient allreduce (inside the traced train step) -----------------------------------

def _torch_allreduce_grads(settings):
    import torch
    import ringfold.torch as rt
    op, prescale, postscale = settings['op'], settings['prescale'], settings['postscale']
    compression, ps = settings['compression'], settings['process_set']

    def reduce(grads, variables):
        idx = [i for i, g in enumerate(grads) if g is not None]
        if not idx or not (ps.included() and ps.size() > 1):
            return list(grads)
        out = list(grads)
        dense = [grads[i].to_dense() if getattr(grads[i], 'is_sparse', False) else grads[i]
                 for i in idx]
        with torch.no_grad():
            reduced = rt.grouped_allreduce([g.detach() for g in dense], compression=compression,
                                           op=op, prescale_factor=prescale,
                                           postscale_factor=postscale, process_set=ps)
        for i, r in zip(idx, reduced):
            out[i] = r
        return out
    return reduce


def _make_reduce(settings):
    if _BACKEND == 'tensorflow':
        from ringfold.tensorflow.gradients import _make_allreduce_grads_fn
        fn = _make_allreduce_grads_fn(settings['name'] or 'DistributedOptimizer', '', '',
                                      settings['compression'], settings['sparse_as_dense'],
                                      settings['op'], settings['gradient_predivide_factor'],
                                      settings['groups'], settings['process_set'])
        return lambda grads, variables: fn(grads, variables)
    return _torch_allreduce_grads(settings)


def _apply_local_scaling(self, grads, variables):
    if not self._rf_local_vars or not self._rf['scale_local_gradients'] or variables is None:
        return grads
    n = float(self._rf['process_set'].size())
    return [g / n if g is not None and id(v) in self._rf_local_vars else g
            for g, v in zip(grads, variables)]


def _reduce(self, grads, variables):
    if self._rf_reduce_fn is None:
        self._rf_reduce_fn = _make_reduce(self._rf)
    grads = list(grads)
    if variables is None or not self._rf_local_vars:
        return self._rf_reduce_fn(grads, variables)
    variables = list(variables)
    keep = [i for i, v in enumerate(variables) if id(v) not in self._rf_local_vars]
    reduced = self._rf_reduce_fn([grads[i] for i in keep], [variables[i] for i in keep])
    out = list(grads)
    for i, r in zip(keep, reduced):
        out[i] = r
    return _apply_local_scaling(self, out, variables)


def _distributed_class(base, settings):
    """A subclass of `base` (same name and module) whose apply() allreduces first."""
    if getattr(base, '_rf_distributed', False):
        base = base._rf_base

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self._rf_reduce_fn = None
        self._rf_local_vars = set()
        n = self._rf['backward_passes_per_step']
        if n > 1 and not self.gradient_accumulation_steps:
            self.gradient_accumulation_steps = n

    def register_local_var(self, var):
        """Keeps this variable's gradient local (not allreduced), as Horovod's."""
        self._rf_local_vars.add(id(var))

    def apply(self, grads, trainable_variables=None):
        if not self.gradient_accumulation_steps:
            variables = trainable_variables
            if variables is None and self.built:
                variables = self._trainable_variables
            grads = _reduce(self, grads, variables)
        return base.apply(self, grads, trainable_variables)

    def _clip_gradients(self, grads):
        # With gradient accumulation Keras calls this only on the steps that apply, with the
        # mean of the accumulated gradients: allreduce them there, before clipping.
        if self.gradient_accumulation_steps:
            grads = _reduce(self, grads, None)
            if not self._rf['average_aggregated_gradients']:
                steps = float(self.gradient_accumulation_steps)
                grads = [g if g is None else g * steps for g in grads]
        return base._clip_gradients(self, grads)

    namespace = {'__init__': __init__, 'apply': apply, '_clip_gradients': _clip_gradients,
                 'register_local_var': register_local_var, '_rf': settings,
                 '_rf_distributed': True, '_rf_base': base, '__module__': base.__module__,
                 '__qualname__': base.__qualname__, '__doc__': base.__doc__}
    return type(base.__name__, (base,), namespace)


def _settings(name, compression, sparse_as_dense, gradient_predivide_factor, op,
              backward_passes_per_step, average_aggregated_gradients, groups, process_set,
              scale_local_gradients):
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    return dict(name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                gradient_predivide_factor=gradient_predivide_factor, op=op,
                prescale=prescale, postscale=postscale,
                backward_passes_per_step=int(backward_passes_per_step),
                average_aggregated_gradients=average_aggregated_gradients, groups=groups,
                process_set=process_set, scale_local_gradients=scale_local_gradients)


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's keras DistributedOptimizer for Keras 3 (see the package contract)."""
    if op != Average and op != Sum:
        raise ValueError('op currently only supports Average and Sum')
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` '
                      'and will be removed in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if not (isinstance(groups, list) or groups > 0):
            raise ValueError('groups should be a non-negative integer or '
                             'a list of list of tf.Variable.')
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError('ringfold.keras.DistributedOptimizer wraps a Keras 3 optimizer '
                         '(keras.optimizers.Optimizer), not %s' % type(optimizer).__name__)
    if backward_passes_per_step < 1:
        raise ValueError('backward_passes_per_step must be >= 1')
    settings = _settings(name, compression, sparse_as_dense, gradient_predivide_factor, op,
                         backward_passes_per_step, average_aggregated_gradients, groups,
                         process_set, scale_local_gradients)
    cls = _distributed_class(type(optimizer), settings)
    config = optimizer.get_config()
    if name is not None:
        config['name'] = name
    return cls.from_config(config)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """keras.models.load_model with every Keras optimizer (and custom_optimizers) wrapped."""
    settings = _settings(None, compression, False, 1.0, Average, 1, False, None,
                         global_process_set, True)
    objects = {}
    for cls in keras.optimizers.Optimizer.__subclasses__():
        wrapped = _distributed_class(cls, settings)
        objects[cls.__name__] = wrapped
        objects[cls.__name__.lower()] = wrapped
    for cls in custom_optimizers or []:
        objects[cls.__name__] = _distributed_class(cls, settings)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)
