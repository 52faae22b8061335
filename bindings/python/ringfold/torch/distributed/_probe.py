"""What the installed torch.distributed offers a Python ProcessGroup, found out at import.

Contract
  * FEATURES maps a feature name to True/False for this torch; nothing here assumes a version:
      pg_store_ctor       ProcessGroup(store, rank, size) exists (else ProcessGroup(rank, size))
      new_group_delegation  torch.distributed.new_group() hands subgroup creation to the default
                          group's own new_group() on every rank (what lets a subgroup become a
                          ringfold process set, which every rank must create together)
      coalescing          the trampoline routes _start_coalescing/_end_coalescing to Python
                          (ProcessGroup has them; torch's own test_c10d_pypg checks the routing)
      work_class          torch.distributed exposes the Work base class a Python Work derives from
    plus one entry per ProcessGroup method name ringfold implements (old and new spellings),
    True where torch's ProcessGroup has that method, i.e. where torch may call it.
  * METHODS lists those method names; the backend defines all of them whatever FEATURES says,
    so an older or newer torch that calls either spelling finds it.
  * Nothing here starts or contacts anything.
"""
import inspect

import torch.distributed as dist

# Every ProcessGroup method the backend implements; pairs are the new and old names of one call.
METHODS = (
    'allreduce', 'allreduce_coalesced', 'broadcast', 'allgather', 'allgather_coalesced',
    'all_gather_single', '_allgather_base',
    'all_gather_single_coalesced', 'allgather_into_tensor_coalesced',
    'reduce_scatter', 'reduce_scatter_single', '_reduce_scatter_base',
    'reduce_scatter_single_coalesced', 'reduce_scatter_tensor_coalesced',
    'all_to_all_single', 'alltoall_base', 'alltoall',
    'reduce', 'gather', 'gather_single', 'gather_into_tensor', 'scatter',
    'send', 'recv', 'recv_anysource', 'barrier', 'monitored_barrier',
    'start_coalescing', 'end_coalescing', 'shutdown', 'abort', 'new_group',
)


def _delegates_new_group():
    helper = getattr(dist.distributed_c10d, '_new_group_with_tag', None)
    if helper is None:
        return False
    try:
        return 'default_pg.new_group' in inspect.getsource(helper)
    except (OSError, TypeError):   # no source (frozen install): assume the older behaviour
        return False


def _has_store_ctor():
    doc = dist.ProcessGroup.__init__.__doc__ or ''
    return 'store' in doc


def probe():
    pg = dist.ProcessGroup
    features = {name: hasattr(pg, name) for name in METHODS}
    features['pg_store_ctor'] = _has_store_ctor()
    features['new_group_delegation'] = _delegates_new_group()
    features['coalescing'] = hasattr(pg, '_start_coalescing') and hasattr(pg, '_end_coalescing')
    features['work_class'] = hasattr(dist, '_Work') or hasattr(dist, 'Work')
    return features


FEATURES = probe()
WorkBase = getattr(dist, '_Work', None) or dist.Work
