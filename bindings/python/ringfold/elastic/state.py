"""Horovod's elastic state objects (horovod/common/elastic.py: State, ObjectState), framework-
neutral, over ringfold's engine.

Contract (Horovod's, except where marked "ringfold")
  * State(bcast_object, get_rank): the base class. register_reset_callbacks(callbacks) appends
    functions called, in order, after every reset (a worker added or removed), once the engine
    is initialized again and before the state is synchronized; on_reset() runs reset() then them.
    save(), restore(), sync() are the subclass's; reset() does nothing by default.
  * commit() = save() + check_host_updates().
  * check_host_updates() raises HostsUpdatedInterrupt when ringfoldrun's discovery found a change
    (hosts or slots added or removed) while this incarnation is current. ringfold: rank 0 reads
    the store key `elastic/inc<N>/update` and the flag is allreduced (max) over the global set,
    so every rank raises at the same commit -- a collective, as Horovod's broadcast of the
    update timestamp is. skip_sync is always False (the state is broadcast again after every
    reset: a new worker and the survivors always meet in the same sync, which is what Horovod
    #3494 lacked). Outside elastic mode there is no discovery: it returns at once, with no
    collective.
  * ObjectState(bcast_object, get_rank, **kwargs): each keyword becomes an attribute; save()
    records their current values, restore() puts the recorded ones back, sync() broadcasts the
    recorded values from rank 0 and sets them. ringfold: bcast_object and get_rank may be
    omitted (None): then ringfold's own broadcast of a pickled object (numpy, no framework) and
    ringfold.rank() are used.
"""
import pickle

import numpy as np

from ringfold import basics as _basics
from ringfold import _numpy
from ringfold.elastic import membership
from ringfold.exceptions import HostsUpdatedInterrupt

try:
    import cloudpickle as _pickler
except ImportError:       # pragma: no cover - cloudpickle is optional
    _pickler = pickle

_UPDATE_NAME = 'ringfold.elastic.hosts_updated'


def broadcast_object(obj, root_rank=0, name=None):
    """Returns the root's `obj` on every rank (pickled -- with cloudpickle when installed -- and
    broadcast as bytes with ringfold's numpy API; no framework needed)."""
    sz_name, b_name = (None, None) if name is None else (name + '.sz', name + '.b')
    is_root = _basics.rank() == root_rank
    if is_root:
        payload = np.frombuffer(_pickler.dumps(obj), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        length = np.zeros(1, dtype=np.int64)
    length = _numpy.broadcast(length, root_rank, name=sz_name)
    if not is_root:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    payload = _numpy.broadcast(payload, root_rank, name=b_name)
    if is_root:
        return obj
    return pickle.loads(payload.tobytes())


def hosts_updated():
    """Whether ringfoldrun has found a host change for this incarnation, agreed by every rank
    (a collective in elastic mode; False without one outside it)."""
    if not membership.enabled():
        return False
    flag = 1 if _basics.rank() == 0 and membership.update_pending() else 0
    agreed = _numpy.allreduce(np.array([flag], dtype=np.int32), name=_UPDATE_NAME, op=_basics.Max)
    return bool(agreed[0])


class State(object):
    """State representation used for tracking in memory state across workers.

    Args:
        bcast_object: Function used to broadcast a variable from rank 0 to the other workers.
        get_rank: Function that returns the current rank of this worker.
    """

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or broadcast_object
        self._rank = get_rank or _basics.rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Registers functions called after every reset event (worker added or removed), e.g.
        to scale the learning rate with the new number of workers."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (save()), then checks for host changes (check_host_updates()), which
        raises HostsUpdatedInterrupt on every rank at once when there is one. A commit copies the
        state (from the GPU too): commit every few batches rather than every one."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt when ringfoldrun found hosts added or removed (every rank
        raises at the same call)."""
        if hosts_updated():
            raise HostsUpdatedInterrupt(False)

    def save(self):
        """Saves state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing any uncommitted modifications."""
        raise NotImplementedError()

    def sync(self):
        """Synchronizes state across workers."""
        raise NotImplementedError()

    def reset(self):
        """Resets objects and variables following a reset event (before synchronization)."""


class ObjectState(State):
    """State for simple Python objects: every keyword argument becomes an attribute, saved,
    restored and synchronized (from rank 0) as a whole.

    Args:
        bcast_object: broadcast-object function used to sync the state dictionary (None:
            ringfold's own).
        get_rank: rank function (None: ringfold.rank).
        kwargs: properties to sync, exposed as attributes of the object.
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._bcast_object = bcast_object or broadcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=self._bcast_object, get_rank=get_rank)

    def save(self):
        new_state = {}
        for attr in self._saved_state.keys():
            new_state[attr] = getattr(self, attr)
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)
