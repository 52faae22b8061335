"""ringfold: MPI-free ring/tree collectives with Horovod's API.

    import ringfold                      # plain Python: collectives on numpy arrays
    import ringfold.torch as hvd         # PyTorch: Horovod's horovod.torch API

`import ringfold` needs only numpy. Framework modules (ringfold.torch) are pure Python over
libringfold's C ABI: installing or upgrading the framework never requires rebuilding ringfold.
"""
from ringfold.basics import (Average, Sum, Adasum, Min, Max, Product, init, shutdown,
                             is_initialized, size, rank, local_size, local_rank, cross_size,
                             cross_rank, is_homogeneous, mpi_threads_supported, mpi_enabled,
                             mpi_built, gloo_enabled, gloo_built, nccl_built, ddl_built,
                             ccl_built, cuda_built, rocm_built, start_timeline, stop_timeline)
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError
from ringfold.process_sets import (ProcessSet, global_process_set, add_process_set,
                                   remove_process_set)
from ringfold._numpy import (allreduce, allreduce_, allreduce_async, allreduce_async_,
                             grouped_allreduce, allgather, allgather_async, broadcast, broadcast_,
                             broadcast_async, broadcast_async_, alltoall, alltoall_async,
                             reducescatter, reducescatter_async, join, barrier, poll, synchronize)

__version__ = '0.1.0'


def library_version():
    """The version of the loaded libringfold."""
    from ringfold import _lib
    return _lib.lib().ringfold_version().decode()
