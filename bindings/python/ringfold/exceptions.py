"""Exceptions raised by ringfold, under Horovod's names.

Which error is which (as Horovod's torch module raises them):
  * InvalidArgumentError (a ValueError): a bad argument on this rank, raised at once on the rank
    that passed it (the library's RINGFOLD_INVALID_ARGUMENT): a name already in flight, an
    unknown process set or one this rank is not in, alltoall splits that are not 32-bit
    integers, do not match the set size, or add up to more than the first dimension, a first
    dimension not divisible by the set size without splits, a tensor the operation cannot take.
    Horovod raises ValueError for these (its C++ std::invalid_argument).
  * HorovodInternalError (a RuntimeError): everything else from the engine: ranks that disagree
    about a tensor (raised on every rank with the same message), a peer that died or went
    silent, use before init or after shutdown.
  * Plain ValueError: Python-level argument checks (unsupported dtype, `op` and `average`
    together, an unregistered process set, an unknown handle).
"""


class HorovodInternalError(RuntimeError):
    """An operation failed in the engine: the ranks disagreed about a tensor (shape, dtype, op,
    root, ...; raised on every rank with the same message), a peer died or went silent, or the
    engine was shut down. After a peer failure the engine must be re-initialized (shutdown(),
    init()), which is what elastic training does."""


class InvalidArgumentError(ValueError):
    """A bad argument on this rank (RINGFOLD_INVALID_ARGUMENT), raised at once by the call that
    passed it; the engine stays usable. Not a HorovodInternalError: elastic training must not
    treat a programming error as a lost peer."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic signal that the host set changed: state.commit() raises it on every rank
    at the same commit (ringfold.elastic), and the elastic loop resets to the new membership."""

    def __init__(self, skip_sync=False):
        super().__init__('hosts updated')
        self.skip_sync = skip_sync
