"""Exceptions raised by ringfold, under Horovod's names."""


class HorovodInternalError(RuntimeError):
    """An operation failed in the engine: the ranks disagreed about a tensor (shape, dtype, op,
    root, ...; raised on every rank with the same message), a peer died or went silent, or the
    engine was shut down. After a peer failure the engine must be re-initialized (shutdown(),
    init()), which is what elastic training does."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic signal that the host set changed (kept for scripts that catch it)."""

    def __init__(self, skip_sync=False):
        super().__init__('hosts updated')
        self.skip_sync = skip_sync
