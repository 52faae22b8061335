"""ringfold.torch.distributed: "ringfold" as a torch.distributed backend (c10d), in pure Python.

    import ringfold.torch.distributed          # registers the backend "ringfold"
    torch.distributed.init_process_group("ringfold")      # was: "gloo" or "nccl"

Nothing is compiled against torch: the backend is a Python subclass of
torch.distributed.ProcessGroup (ProcessGroupRingfold, _group.py) over libringfold's C ABI, which
torch's init_process_group, new_group, DistributedDataParallel, the object collectives, the
coalescing manager and DeepSpeed use as they use gloo's.

Contract
  * Importing this module registers the backend once (register(), idempotent) with
    torch.distributed.Backend.register_backend("ringfold", ..., extended_api=True,
    devices=["cpu", "cuda"]); BACKEND_NAME is "ringfold". Under ringfoldrun it also sets torch's
    launcher variables where they are missing (_bootstrap.prepare_environment), so the default
    init_method "env://" works there as under torchrun.
  * init_process_group("ringfold", ...) with any init_method (env://, tcp://, file://, a store)
    starts ringfold's engine through the store torch made (_bootstrap.start_engine: ringfold's
    own rendezvous never takes MASTER_PORT), or uses an engine already running with the same
    rank and size (ringfold.torch's hvd.init()). The `timeout` bounds every wait of every
    collective. destroy_process_group() stops the engine the backend started; a later
    init_process_group starts a new one.
  * new_group(ranks) with the default backend makes a ringfold process set with those ranks
    (every rank must call it, as torch requires; use_local_synchronization=True is refused);
    new_group(ranks, backend="gloo") under a ringfold world makes a gloo group as usual. A
    "ringfold" group under another backend's world must span the whole world.
  * FEATURES (from _probe) says what the installed torch routes to a Python process group.
"""
import torch
import torch.distributed as dist

from ringfold.torch.distributed import _bootstrap
from ringfold.torch.distributed._group import BACKEND_NAME, ProcessGroupRingfold
from ringfold.torch.distributed._probe import FEATURES
from ringfold.torch.distributed._work import MultiWork, Work

__all__ = ['BACKEND_NAME', 'FEATURES', 'ProcessGroupRingfold', 'Work', 'MultiWork', 'register',
           'is_available']


def _world_size():
    return dist.get_world_size() if dist.is_initialized() else None


def _create(opts, options=None):
    """The creator torch calls (extended API): builds the process group for one c10d group."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    timeout = opts.timeout
    global_ranks = list(getattr(opts, 'global_ranks_in_group', []) or [])
    group_name = str(getattr(opts, 'group_id', '') or '0')
    if global_ranks:
        world = _world_size()
        if world is not None and global_ranks != list(range(world)):
            raise NotImplementedError(
                'ringfold: a "ringfold" subgroup of ranks %s cannot be created here: %s. Make "ringfold" '
                'the default backend (init_process_group("ringfold")) on a torch whose new_group() '
                'delegates to the default group (torch %s: %s), or make the group span all ranks'
                % (global_ranks,
                   'the default group is not ringfold' if dist.get_backend() != BACKEND_NAME
                   else 'this torch creates subgroups on their members only',
                   torch.__version__,
                   'delegates' if FEATURES['new_group_delegation'] else 'does not delegate'))
    seconds = timeout.total_seconds() if hasattr(timeout, 'total_seconds') else float(timeout)
    owns = _bootstrap.start_engine(store, rank, size, seconds)
    # tag: "w" for the default group; a ringfold group spanning another backend's world is
    # made on every rank (torch's group names agree there)
    tag = 'w' if not global_ranks else 'x%s' % group_name
    pg = ProcessGroupRingfold(store, rank, size, timeout, 0, global_ranks or None, tag)
    pg._owns_engine = owns
    return pg


def is_available():
    """True when libringfold loads (the backend can run)."""
    try:
        from ringfold import _lib
        _lib.lib()
        return True
    except (ImportError, OSError):
        return False


_registered = False


def register():
    """Registers the "ringfold" backend with torch.distributed (idempotent). Also the
    registrar a "torch.distributed.backends" entry point may name."""
    global _registered
    if _registered or BACKEND_NAME.upper() in getattr(dist.Backend, '_plugins', {}):
        _registered = True
        return
    try:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=['cpu', 'cuda'])
    except TypeError:        # a torch whose register_backend has no `devices`
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)
    _registered = True


register()
_bootstrap.prepare_environment()
