"""Lifecycle, topology and build queries: Horovod's `horovod.common.basics` over the C ABI.

Contract
  * init(comm=None, process_sets=None) bootstraps from the launcher's environment (ringfoldrun,
    torchrun, Slurm, horovodrun, Open MPI; none: rank 0 of 1) and blocks until every rank is
    connected. `comm` may be None or a list of every rank (ringfold takes its ranks from the
    launcher, as Horovod with Gloo does). `process_sets` is a list of ProcessSet objects
    (static sets, ids 1..n in list order) or the string "dynamic" (enables add/remove at run
    time). Calling init again while initialized does nothing. shutdown() is registered with
    atexit, as Horovod does, and may be followed by init() (elastic training).
  * Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True, RINGFOLD_STORE_PORT unset), init() agrees
    on ringfold's store port through torchrun's own store: rank 0 takes MASTER_PORT + 1 if it is
    free on its host, else a free port the kernel picks, and publishes it there; the others read
    it. A second job whose torchrun store landed on MASTER_PORT + 1 therefore costs nothing. If
    torch or torchrun's store cannot be reached, the C++ bootstrap's rule (MASTER_PORT + 1)
    applies as it does for programs that are not Python.
  * Topology queries raise ValueError before init, as Horovod's do.
  * Nothing here needs numpy or a framework.
"""
import atexit
import os
import socket
import sys

from ringfold import _lib
from ringfold import process_sets as _ps

# Reduce ops (Horovod's codes).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_atexit_registered = False


def _port_is_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ringfold's store binds
        try:
            s.bind(('0.0.0.0', port))
        except OSError:
            return False
    return True


def _free_port():
    with socket.socket() as s:
        s.bind(('0.0.0.0', 0))
        return s.getsockname()[1]


def _store_port_from_torchrun():
    """Sets RINGFOLD_STORE_PORT from torchrun's store, where that applies (see the module contract)."""
    env = os.environ
    if env.get('TORCHELASTIC_USE_AGENT_STORE') != 'True' or env.get('RINGFOLD_STORE_PORT'):
        return
    try:
        rank, size = int(env['RANK']), int(env['WORLD_SIZE'])
        addr, port = env['MASTER_ADDR'], int(env['MASTER_PORT'])
    except (KeyError, ValueError):
        return  # the C++ bootstrap names what is missing
    if size <= 1:
        return
    try:
        import datetime
        from torch.distributed import TCPStore
        timeout = float(env.get('RINGFOLD_START_TIMEOUT') or env.get('HOROVOD_START_TIMEOUT') or 60)
        store = TCPStore(addr, port, is_master=False, timeout=datetime.timedelta(seconds=timeout))
    except Exception as e:  # no torch, an old one, or the store is not where torchrun said
        print('ringfold: cannot use torchrun\'s store at %s:%s (%s); ringfold\'s store takes '
              'MASTER_PORT + 1' % (addr, port, e), file=sys.stderr)
        return
    key = 'ringfold/store_port/%s' % env.get('TORCHELASTIC_RESTART_COUNT', '0')
    if rank == 0:
        chosen = port + 1 if port < 65535 and _port_is_free(port + 1) else _free_port()
        store.set(key, str(chosen))
    else:
        try:
            chosen = int(store.get(key))
        except Exception as e:
            raise RuntimeError('ringfold.init: rank 0 did not publish ringfold\'s store port in torchrun\'s '
                               'store at %s:%s within %g s (RINGFOLD_START_TIMEOUT): %s'
                               % (addr, port, timeout, e)) from None
    env['RINGFOLD_STORE_PORT'] = str(chosen)


def init(comm=None, process_sets=None):
    global _atexit_registered
    lib = _lib.lib()
    if comm is not None and not isinstance(comm, (list, tuple)):
        raise ValueError('ringfold.init(comm=...): ringfold uses no MPI communicator; pass None or '
                         'the list of all ranks, not %r' % type(comm).__name__)
    static_sets = []
    if process_sets == 'dynamic':
        os.environ['RINGFOLD_DYNAMIC_PROCESS_SETS'] = '1'
    elif process_sets is not None:
        static_sets = list(process_sets)
        for ps in static_sets:
            if not isinstance(ps, _ps.ProcessSet):
                raise ValueError('init(process_sets=...) takes ProcessSet objects or "dynamic", '
                                 'not %r' % (ps,))
            if ps.ranks is None:
                raise ValueError('init(process_sets=...): a static ProcessSet needs explicit ranks')
    if not lib.horovod_is_initialized():
        _store_port_from_torchrun()
    ranks, nranks = _lib.int_array(comm or [])
    flat = [r for ps in static_sets for r in ps.ranks]
    ps_ranks, _ = _lib.int_array(flat)
    ps_sizes, num_ps = _lib.int_array([len(ps.ranks) for ps in static_sets])
    _lib.check(lib.ringfold_init(ranks, nranks, ps_ranks, ps_sizes, num_ps), 'ringfold.init')
    _ps._setup(static_sets)
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True


def shutdown():
    """Stops the engine on every rank (collectively). Does nothing when not initialized."""
    lib = _lib.lib()
    if lib.horovod_is_initialized():
        _lib.check(lib.ringfold_shutdown(), 'ringfold.shutdown')
    _ps._reset()


def is_initialized():
    return bool(_lib.lib().horovod_is_initialized())


def _query(fn_name, what):
    value = getattr(_lib.lib(), fn_name)()
    if value == -1 and not _lib.lib().horovod_is_initialized():
        raise ValueError('ringfold has not been initialized; use ringfold.init() (asked for %s)' % what)
    return value


def size():
    return _query('horovod_size', 'size')


def rank():
    return _query('horovod_rank', 'rank')


def local_size():
    return _query('horovod_local_size', 'local_size')


def local_rank():
    return _query('horovod_local_rank', 'local_rank')


def cross_size():
    return _query('horovod_cross_size', 'cross_size')


def cross_rank():
    return _query('horovod_cross_rank', 'cross_rank')


def is_homogeneous():
    _query('horovod_size', 'is_homogeneous')
    return bool(_lib.lib().horovod_is_homogeneous())


def mpi_threads_supported():
    return bool(_query('horovod_mpi_threads_supported', 'mpi_threads_supported'))


def _build_flag(fn_name, convert=bool):
    def query():
        return convert(getattr(_lib.lib(), fn_name)())
    query.__name__ = fn_name[len('horovod_'):]
    query.__doc__ = 'Horovod\'s %s() (ringfold uses no MPI, Gloo, NCCL, DDL, CCL or ROCm).' % query.__name__
    return query


mpi_enabled = _build_flag('horovod_mpi_enabled')
mpi_built = _build_flag('horovod_mpi_built')
gloo_enabled = _build_flag('horovod_gloo_enabled')
gloo_built = _build_flag('horovod_gloo_built')
nccl_built = _build_flag('horovod_nccl_built', int)
ddl_built = _build_flag('horovod_ddl_built')
ccl_built = _build_flag('horovod_ccl_built')
cuda_built = _build_flag('horovod_cuda_built')
rocm_built = _build_flag('horovod_rocm_built')


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline to file_path (rank 0 writes; others do nothing)."""
    result = _lib.lib().horovod_start_timeline(os.fsencode(file_path), bool(mark_cycles))
    if result == -1:
        raise ValueError('ringfold has not been initialized; use ringfold.init()')
    if result != 1:
        raise ValueError('start_timeline(%r): %s' % (file_path, _lib.last_error()))


def stop_timeline():
    result = _lib.lib().horovod_stop_timeline()
    if result == -1:
        raise ValueError('ringfold has not been initialized; use ringfold.init()')
