"""Process sets: Horovod's `horovod.common.process_sets`.

Contract
  * ProcessSet(ranks) names a subset of the global ranks. It gets its id either at init (static
    sets passed to init(process_sets=[...])) or from add_process_set (dynamic mode:
    init(process_sets="dynamic") or RINGFOLD_DYNAMIC_PROCESS_SETS=1). A set without an id
    raises ValueError when used in a collective.
  * As in Horovod: size() and rank() return None for a set without an id, included() is None
    for a set without ranks; rank() on a set this rank is not in raises ValueError. Ranks must
    be integers (ValueError).
  * global_process_set (id 0) is every rank.
  * add_process_set / remove_process_set are collective: every rank calls them with the same
    ranks, in the same order. add_process_set raises ValueError naming the reason;
    remove_process_set returns False for a set that is not registered (or the global set),
    as Horovod's does, and raises ValueError for the other failures.
"""
import numbers

from ringfold import _lib
from ringfold.exceptions import InvalidArgumentError

_ERRORS = {
    _lib.PROCESS_SET_ERROR_INIT: 'ringfold has not been initialized',
    _lib.PROCESS_SET_ERROR_DYNAMIC:
        'dynamic process sets are off: init(process_sets="dynamic") or set RINGFOLD_DYNAMIC_PROCESS_SETS=1',
    _lib.PROCESS_SET_ERROR_UNKNOWN_SET: 'unknown process set',
    _lib.PROCESS_SET_ERROR_FOREIGN_SET: 'this rank is not a member of the process set',
    _lib.PROCESS_SET_ERROR_SHUTDOWN: 'the engine has stopped',
    _lib.PROCESS_SET_ERROR_EXISTING_SET: 'a process set with these ranks already exists',
}


def _raise(code, what):
    message = _ERRORS.get(code) or _lib.last_error() or ('error %d' % code)
    raise ValueError('%s: %s' % (what, message))


class ProcessSet:
    mpi_comm = None         # Horovod's attribute; ringfold uses no MPI communicators

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, 'Get_rank'):
            raise ValueError('ProcessSet: ringfold uses no MPI; pass a list of ranks')
        if ranks_or_comm is not None:
            ranks_or_comm = list(ranks_or_comm)
            if any(not isinstance(r, numbers.Integral) or isinstance(r, bool) for r in ranks_or_comm):
                raise ValueError('ProcessSet should be initialized with a list of process ranks (integers), '
                                 'not %r' % (ranks_or_comm,))
        self.ranks = None if ranks_or_comm is None else sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError('process set %s has not been registered (pass it to init(process_sets=...) '
                             'or add_process_set)' % (self.ranks,))
        return self.process_set_id

    def size(self):
        """The number of ranks in the set; None if the set has no id yet."""
        if self.process_set_id is None:
            return None
        value = _lib.lib().horovod_process_set_size(self.process_set_id)
        if value < 0:
            _raise(value, 'ProcessSet.size')
        return value

    def rank(self):
        """This process's rank within the set; None if the set has no id yet; ValueError if
        this process is not in the set. (Collectives take global ranks as root_rank, as in
        Horovod.)"""
        if self.process_set_id is None:
            return None
        value = _lib.lib().horovod_process_set_rank(self.process_set_id)
        if value < 0:
            _raise(value, 'ProcessSet.rank')
        return value

    def included(self):
        """Whether this process is in the set; None if the set's ranks are not known."""
        if self.process_set_id is not None:
            value = _lib.lib().horovod_process_set_included(self.process_set_id)
            if value < 0:
                _raise(value, 'ProcessSet.included')
            return bool(value)
        if self.ranks is None:
            return None
        rank = _lib.lib().horovod_rank()
        if rank < 0:
            _raise(_lib.PROCESS_SET_ERROR_INIT, 'ProcessSet.included')
        return rank in self.ranks

    def __str__(self):
        return 'ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)' % (self.process_set_id, self.ranks)

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id \
            and self.ranks == other.ranks

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks or ())))

    def __repr__(self):
        return 'ProcessSet(process_set_id=%s, ranks=%s)' % (self.process_set_id, self.ranks)


global_process_set = ProcessSet(None)
global_process_set.process_set_id = 0
_id_to_set = {0: global_process_set}


def _setup(static_sets):
    """After init: static sets get ids 1..n; the global set learns its ranks."""
    global_process_set.ranks = list(range(_lib.lib().horovod_size()))
    _id_to_set.clear()
    _id_to_set[0] = global_process_set
    for i, ps in enumerate(static_sets, start=1):
        ps.process_set_id = i
        _id_to_set[i] = ps


def _reset():
    for ps in list(_id_to_set.values()):
        if ps is not global_process_set:
            ps.process_set_id = None
    _id_to_set.clear()
    _id_to_set[0] = global_process_set


def add_process_set(process_set):
    """Registers a set at run time (dynamic mode) and returns it with its id."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError('add_process_set: %r is already registered' % (ps,))
    ranks, n = _lib.int_array(ps.ranks or [])
    value = _lib.lib().horovod_add_process_set(ranks, n)
    if value < 0:
        _raise(value, 'add_process_set(%s)' % (ps.ranks,))
    ps.process_set_id = value
    if ps.ranks is None:
        ps.ranks = list(range(_lib.lib().horovod_size()))
    _id_to_set[value] = ps
    return ps


def remove_process_set(process_set):
    """Removes a set added at run time; returns True, or False if it was not registered."""
    if process_set.process_set_id is None or process_set.process_set_id == 0:
        return False
    value = _lib.lib().horovod_remove_process_set(process_set.process_set_id)
    if value == _lib.PROCESS_SET_ERROR_UNKNOWN_SET:  # not (or no longer) registered: Horovod returns False
        _id_to_set.pop(process_set.process_set_id, None)
        process_set.process_set_id = None
        return False
    if value < 0:
        _raise(value, 'remove_process_set(%s)' % (process_set.ranks,))
    _id_to_set.pop(process_set.process_set_id, None)
    process_set.process_set_id = None
    return True


def _root_in_set(process_set, root_rank, what):
    """The set-relative root the engine takes for Horovod's root_rank, a global rank (Horovod
    translates it the same way). A root outside the set raises InvalidArgumentError at once, as
    Horovod's "broadcast received invalid root rank"."""
    set_id = process_set._id()
    ranks = process_set.ranks
    if ranks is None:
        ranks = _id_to_set.get(set_id, process_set).ranks
    if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral):
        raise InvalidArgumentError('%s: root_rank must be an int (a global rank), not %r' % (what, root_rank))
    if not ranks:             # not initialized: the engine says so
        return int(root_rank)
    try:
        return ranks.index(int(root_rank))
    except ValueError:
        raise InvalidArgumentError('%s: root rank %d is not in process set %d (global ranks %s); root_rank '
                                   'is a global rank, as in Horovod' % (what, root_rank, set_id, ranks)) from None
