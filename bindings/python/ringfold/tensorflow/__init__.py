"""ringfold.tensorflow: Horovod's TensorFlow 2 API (horovod.tensorflow) over ringfold.

    import ringfold.tensorflow as hvd        # was: import horovod.tensorflow as hvd

Pure Python over libringfold's C ABI: nothing is compiled against TensorFlow, so any
TensorFlow >= 2.16 works without rebuilding ringfold (tested with tensorflow-cpu 2.21, whose
tf.keras is Keras 3). `import ringfold` never imports TensorFlow; this module does.

Contract (Horovod's names, arguments, defaults and return values; differences are listed in
docs/tensorflow.md):
  * init/shutdown/size/rank/... and the *_built queries are ringfold.basics'.
  * allreduce, grouped_allreduce, allgather, grouped_allgather, broadcast, alltoall,
    reducescatter, grouped_reducescatter, join, barrier: eager and inside tf.function (see
    mpi_ops for how), with Horovod's gradients. allreduce's default op is Average;
    tf.IndexedSlices are allgathered (values divided by the set size for Average), as Horovod
    does, unless a caller asked for sparse_as_dense.
  * DistributedGradientTape(tape, ...) returns a tape of the same class whose gradient()
    allreduces the gradients: all of one call's dense gradients in ONE py-function call per
    group (one engine negotiation, one TF inter-op thread), with Horovod's scaling
    (gradient_predivide_factor: prescale 1/f, postscale f, Average divides by the set size).
    On a process set of one rank, or one this rank is not in, gradients pass through.
  * DistributedOptimizer(keras_optimizer, ...) is ringfold.tensorflow.keras.DistributedOptimizer
    (Keras 3); `callbacks` is ringfold.tensorflow.keras.callbacks (imported on first use).
  * broadcast_variables(variables, root_rank) assigns the root's values (one fused call);
    broadcast_object / allgather_object pickle with cloudpickle (pickle without it).
"""
import warnings

try:
    import tensorflow as tf
except ImportError as e:  # ringfold itself needs no TensorFlow: say what this module needs
    raise ImportError('ringfold.tensorflow needs TensorFlow >= 2.16 (tested with 2.21): '
                      'pip install tensorflow-cpu (or tensorflow); %s' % e) from e

_TF_VERSION = tuple(int(x) for x in tf.__version__.split('.')[:2] if x.isdigit())
if _TF_VERSION < (2, 16):
    raise ImportError('ringfold.tensorflow needs TensorFlow >= 2.16 (found %s); tested with 2.21'
                      % tf.__version__)

from ringfold.basics import (Average, Sum, Adasum, Min, Max, Product, init as _init,  # noqa: E402
                             shutdown as _shutdown, is_initialized, size, rank, local_size,
                             local_rank, cross_size, cross_rank, is_homogeneous,
                             mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
                             gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                             start_timeline, stop_timeline)
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError  # noqa: E402
from ringfold.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: E402
                                   remove_process_set)
from ringfold import _ops  # noqa: E402
from ringfold.tensorflow import mpi_ops  # noqa: E402
from ringfold.tensorflow.compression import Compression  # noqa: E402
from ringfold.tensorflow.mpi_ops import (allgather, grouped_allgather, broadcast, alltoall,  # noqa: E402
                                         join, barrier, _allreduce, _grouped_allreduce_raw,
                                         _reducescatter, _executing_eagerly)
from ringfold.tensorflow.functions import (broadcast_variables, broadcast_, broadcast_object,  # noqa: E402
                                           allgather_object)
from ringfold.tensorflow.gradients import (DistributedGradientTape,  # noqa: E402
                                           PartialDistributedGradientTape, _make_allreduce_grads_fn)


def init(comm=None, process_sets=None):
    _init(comm, process_sets)


def shutdown():
    _shutdown()
    _ops.forget_all()
    mpi_ops._forget_all()


def _average_op(op, average):
    """Horovod's handle_average_backwards_compatibility."""
    if op is not None:
        if average is not None:
            raise ValueError('The op parameter supersedes average. Please provide only one of them.')
        return op
    if average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed in v1.0',
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def _sparse_allreduce(slices, op, prescale_factor, postscale_factor, process_set):
    if op == Adasum:
        raise NotImplementedError('The Adasum reduction does not currently support sparse tensors. As a '
                                  'workaround please pass sparse_as_dense=True to DistributedOptimizer')
    if op != Sum and op != Average:
        raise NotImplementedError('Only Sum and Average ops are supported with tf.IndexedSlices')
    values = allgather(slices.values, process_set=process_set)
    indices = allgather(slices.indices, process_set=process_set)
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError('Pre/postscale_factor are not supported with tf.IndexedSlices')
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, ignore_name_scope=False):
    """Horovod's allreduce of a tf.Tensor, tf.Variable or tf.IndexedSlices (default op Average)."""
    op = _average_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor, process_set)
    if op == Adasum:
        raise NotImplementedError('ringfold has no Adasum (see docs/compatibility.md)')
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, process_set=process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Horovod's grouped_allreduce: the dense tensors negotiated and reduced together; the
    tf.IndexedSlices among them allgathered as allreduce() does."""
    if not tensors:
        return tensors
    op = _average_op(op, average)
    if op == Adasum:
        raise NotImplementedError('ringfold has no Adasum (see docs/compatibility.md)')
    merged = [None] * len(tensors)
    dense_idx = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            merged[i] = _sparse_allreduce(t, op, prescale_factor, postscale_factor, process_set)
        else:
            dense_idx.append(i)
    if dense_idx:
        compressed, ctxs = zip(*[compression.compress(tf.convert_to_tensor(tensors[i]))
                                 for i in dense_idx])
        reduced = _grouped_allreduce_raw(list(compressed), name=name, op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor, process_set=process_set)
        for i, r, ctx in zip(dense_idx, reduced, ctxs):
            merged[i] = compression.decompress(r, ctx)
    return merged


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Horovod's reducescatter (default op Average): this rank's slice of the first dimension."""
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _reducescatter(compressed, name=name, op=op, process_set=process_set,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    if not tensors:
        return tensors
    return [reducescatter(t, device_dense, compression, op, None, process_set, False,
                          prescale_factor, postscale_factor) for t in tensors]


def _value_op(value):
    return tf.constant(value, dtype=tf.int32)


def size_op(process_set_id=0, name=None):
    """The set's size as an int32 scalar (fixed when traced: ringfold's sets do not change size
    while the job runs; Horovod evaluates it when the graph runs, for elastic jobs)."""
    from ringfold.process_sets import _id_to_set
    ps = _id_to_set.get(process_set_id)
    if ps is None:
        raise ValueError('size_op: unknown process set id %d' % process_set_id)
    return _value_op(ps.size())


def rank_op(name=None):
    return _value_op(rank())


def local_rank_op(name=None):
    return _value_op(local_rank())


def local_size_op(name=None):
    return _value_op(local_size())


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's: a Keras optimizer is wrapped by ringfold.tensorflow.keras.DistributedOptimizer
    (TF1's tf.compat.v1.train.Optimizer is not supported: TensorFlow 2 with Keras 3 only)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op == Adasum:
        raise ValueError('op == Adasum is not supported yet with Keras')
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise ValueError('ringfold.tensorflow.DistributedOptimizer: TF1 optimizers '
                         '(tf.compat.v1.train.Optimizer) are not supported; use a Keras optimizer '
                         'or DistributedGradientTape')
    from ringfold.tensorflow import keras as _keras
    return _keras.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def broadcast_global_variables(root_rank):
    """Horovod's TF1 helper: in TensorFlow 2 (eager) it raises, as Horovod's does."""
    raise RuntimeError('hvd.broadcast_global_variables() does not support eager execution. '
                       'Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.')


def __getattr__(name):
    # `hvd.callbacks` / `hvd.keras` after `import ringfold.tensorflow as hvd` (Horovod's guides
    # use them), imported on first use so that plain TF users never import Keras through us.
    if name in ('callbacks', 'keras'):
        import importlib
        module = importlib.import_module('ringfold.tensorflow.keras')
        return module.callbacks if name == 'callbacks' else module
    raise AttributeError("module 'ringfold.tensorflow' has no attribute %r" % name)
