"""ringfold.keras: Horovod's Keras API (horovod.keras / horovod.tensorflow.keras) for Keras 3,
on the TensorFlow backend (through ringfold.tensorflow) and the PyTorch backend
(KERAS_BACKEND=torch, through ringfold.torch; Horovod never had this).

    import ringfold.keras as hvd             # or: import ringfold.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, loss=..., jit_compile=False)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

Contract
  * Needs Keras >= 3 (tf-keras, Keras 2 under TF_USE_LEGACY_KERAS=1, raises ImportError saying
    what to use instead) and the tensorflow or torch backend (others: ImportError).
  * DistributedOptimizer(optimizer, ...) returns an optimizer of a dynamic subclass of the
    optimizer's own class, with the same class name (isinstance holds; models saved with it
    record the plain optimizer class), built from optimizer.get_config() as Horovod does (a
    fresh optimizer: state is not copied). Its apply() (which apply_gradients and every Keras
    trainer call once per step) allreduces the step's gradients first: with the TensorFlow
    backend in ONE py-function call (see ringfold.tensorflow.gradients), with torch as one
    grouped allreduce. op is Average (default) or Sum; gradient_predivide_factor,
    compression, sparse_as_dense, groups, process_set and register_local_var as in Horovod.
    backward_passes_per_step=n > 1 uses Keras 3's gradient_accumulation_steps=n: gradients
    are accumulated locally and allreduced once every n steps, before clipping; the applied
    gradient is the sum of the n steps (Horovod's default) or, with
    average_aggregated_gradients=True, their mean. Keras increments optimizer.iterations
    every step (Horovod only on the steps that apply).
  * broadcast_global_variables(root_rank) raises RuntimeError in TensorFlow 2, as Horovod's
    does; use callbacks.BroadcastGlobalVariablesCallback or broadcast_variables.
  * broadcast_variables(variables, root_rank, process_set) assigns the root's values to Keras
    (or tf) variables, eagerly; allreduce/allgather/broadcast/reducescatter(value, ...) take
    numpy-compatible values and return numpy arrays (Horovod's keras helpers).
  * load_model(filepath, custom_optimizers=None, custom_objects=None, compression=...) loads a
    model whose optimizer is wrapped with DistributedOptimizer (its saved state restored).
"""
import numpy as np

try:
    import keras as _keras
except ImportError as e:  # ringfold itself needs no Keras: say what this module needs
    raise ImportError('ringfold.keras needs Keras >= 3 with the tensorflow or torch backend (tested with '
                      'Keras 3.15): pip install keras tensorflow-cpu (or torch); %s' % e) from e

if int(_keras.__version__.split('.')[0]) < 3:
    raise ImportError(
        'ringfold.keras needs Keras 3 (found Keras %s, e.g. tf-keras with TF_USE_LEGACY_KERAS=1). '
        'Unset TF_USE_LEGACY_KERAS to use tf.keras (Keras 3, TensorFlow >= 2.16), or write the '
        'training loop with ringfold.tensorflow.DistributedGradientTape.' % _keras.__version__)

_BACKEND = _keras.backend.backend()
if _BACKEND not in ('tensorflow', 'torch'):
    raise ImportError('ringfold.keras supports the Keras backends "tensorflow" and "torch", not %r '
                      '(set KERAS_BACKEND)' % _BACKEND)

from ringfold.basics import (Average, Sum, Adasum, is_initialized,  # noqa: E402
                             start_timeline, stop_timeline, size, local_size, cross_size, rank,
                             local_rank, cross_rank, is_homogeneous, mpi_threads_supported,
                             mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built,
                             ddl_built, ccl_built, cuda_built, rocm_built)
from ringfold.exceptions import HorovodInternalError, InvalidArgumentError  # noqa: E402
from ringfold.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: E402
                                   remove_process_set)
from ringfold.keras import _impl  # noqa: E402
from ringfold.keras._impl import (DistributedOptimizer, broadcast_variables,  # noqa: E402
                                  Compression, load_model)
from ringfold.keras import callbacks  # noqa: E402

if _BACKEND == 'tensorflow':
    import ringfold.tensorflow as _backend_module  # noqa: E402
else:
    import ringfold.torch as _backend_module  # noqa: E402
init = _backend_module.init
shutdown = _backend_module.shutdown


def broadcast_global_variables(root_rank):
    """Horovod's: raises in TensorFlow 2 / Keras 3 (no global variable collection)."""
    raise RuntimeError('hvd.broadcast_global_variables() does not support eager execution. '
                       'Please use `hvd.broadcast_variables(<model/optimizer variables>)` or '
                       'hvd.callbacks.BroadcastGlobalVariablesCallback instead.')


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Horovod's keras allreduce of a tensor-compatible value (default op Average)."""
    if op is not None and average is not None:
        raise ValueError('The op parameter supersedes average. Please provide only one of them.')
    if op is None:
        op = Average if average is None or average else Sum
    return _impl.np_allreduce(np.asarray(value, dtype=_impl.floatx_if_python(value)), name, op,
                              prescale_factor, postscale_factor)


def allgather(value, name=None):
    return _impl.np_collective('allgather', np.asarray(value, dtype=_impl.floatx_if_python(value)), name)


def broadcast(value, root_rank, name=None):
    return _impl.np_collective('broadcast', np.asarray(value, dtype=_impl.floatx_if_python(value)),
                               name, root_rank=root_rank)


def reducescatter(value, name=None, op=Average):
    return _impl.np_collective('reducescatter', np.asarray(value, dtype=_impl.floatx_if_python(value)),
                               name, op=op)
