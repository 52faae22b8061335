"""ringfold.torch: Horovod's PyTorch API (horovod.torch) over ringfold.

    import ringfold.torch as hvd         # was: import horovod.torch as hvd

Pure Python over libringfold's C ABI with tensors passed by pointer: nothing is compiled
against PyTorch, so installing or upgrading torch never requires rebuilding ringfold.
Tested with torch 2.15 (CPU); needs torch >= 2.1 (register_post_accumulate_grad_hook).
"""
import torch as _torch

from ringfold.basics import (Average, Sum, Adasum, Min, Max, Product, init as _init,
                             shutdown as _shutdown, is_initialized, size, rank, local_size,
                             local_rank, cross_size, cross_rank, is_homogeneous,
                             mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
                             gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                             start_timeline, stop_timeline)
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError
from ringfold.process_sets import (ProcessSet, global_process_set, add_process_set,
                                   remove_process_set)
from ringfold.torch.compression import Compression
from ringfold.torch.mpi_ops import (allreduce, allreduce_async, allreduce_, allreduce_async_,
                                    grouped_allreduce, grouped_allreduce_async, grouped_allreduce_,
                                    grouped_allreduce_async_, sparse_allreduce_async, allgather,
                                    allgather_async, grouped_allgather, grouped_allgather_async,
                                    broadcast, broadcast_async, broadcast_, broadcast_async_,
                                    alltoall, alltoall_async, reducescatter, reducescatter_async,
                                    grouped_reducescatter, grouped_reducescatter_async, join,
                                    barrier, poll, synchronize)
from ringfold.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                      broadcast_object, allgather_object)
from ringfold.torch.optimizer import DistributedOptimizer
from ringfold.torch.sync_batch_norm import SyncBatchNorm
from ringfold import _ops
from ringfold.torch import mpi_ops

if tuple(int(x) for x in _torch.__version__.split('+')[0].split('.')[:2]) < (2, 1):
    raise ImportError('ringfold.torch needs torch >= 2.1 (found %s)' % _torch.__version__)


def init(comm=None, process_sets=None):
    _init(comm, process_sets)


def shutdown():
    _shutdown()
    _ops.forget_all()
    mpi_ops._forget_all()


# Horovod's hvd.elastic (run, TorchState, ElasticSampler, ...): imported last, it uses the above.
from ringfold.torch import elastic  # noqa: E402
