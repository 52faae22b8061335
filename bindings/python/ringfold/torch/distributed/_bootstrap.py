"""Starting and stopping ringfold's engine for torch.distributed, without colliding with torch.

Contract
  * start_engine(store, rank, size, timeout) makes sure the engine runs with `rank`/`size` as
    its own and returns whether this module started it (and so must stop it):
      - an engine already running (hvd.init() before, or started by prepare_environment()) is
        used as it is, if its rank and size are torch's; otherwise ValueError;
      - under ringfoldrun (RINGFOLD_STORE_SERVER=external) the launcher's variables and store
        are used unchanged;
      - otherwise ringfold's rendezvous is agreed through `store`, torch's own store (the one
        init_process_group made on MASTER_PORT, or torchrun's): rank 0 publishes an address
        (RINGFOLD_STORE_ADDR, else the host of torch's TCPStore, else MASTER_ADDR, else this
        host's name), a port (RINGFOLD_STORE_PORT, else MASTER_PORT + 1 if free on rank 0's
        host, else one the kernel picks) and a job secret (RINGFOLD_SECRET, else 32 random
        bytes); the others read them. ringfold's store therefore never takes MASTER_PORT, and a
        port already in use is never chosen. Local rank and size come from LOCAL_RANK and
        LOCAL_WORLD_SIZE, else from host names gathered by rank 0 through the same store. The
        keys are unique per start (a per-process count, the same on every rank, and torchrun's
        restart count), so a re-init never reads an earlier job's values.
    The variables it sets for ringfold's bootstrap are restored once the engine is up.
    Dynamic process sets are switched on (subgroups are process sets); unless set by the user,
    RINGFOLD_TIMEOUT becomes min(60 s, timeout) and RINGFOLD_STALL_SHUTDOWN_TIME the timeout.
  * stop_engine() shuts the engine down (collectively, as ringfold.shutdown()).
  * prepare_environment(): under ringfoldrun without torch's variables (MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE), sets them so that init_process_group's default env://
    works unchanged: RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE from ringfoldrun's, and
    MASTER_ADDR/MASTER_PORT agreed by starting ringfold's engine now (rank 0 picks a free port
    and broadcasts it with the host's name; 127.0.0.1 when every rank is on one host).
"""
import ctypes
import json
import os
import secrets
import socket
import threading

from ringfold import _lib, _ops
from ringfold import process_sets as _ps
from ringfold.basics import _free_port, _port_is_free

_lock = threading.Lock()
_starts = 0          # engines started through torch's store by this process (same on every rank)
_owned = False       # this module started the running engine
_unclaimed = False   # ... in prepare_environment(), and no process group has taken it yet


def _getenv(*names):
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def _tcp_store_host(store):
    """The host of the TCPStore under `store`'s prefixes, or None."""
    seen = 0
    while store is not None and seen < 16:
        host = getattr(store, 'host', None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, 'underlying_store', None)
        seen += 1
    return None


def _host_id():
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            boot = f.read().strip()
    except OSError:
        boot = ''
    return '%s/%s' % (socket.gethostname(), boot)


def _engine_rank_size():
    lib = _lib.lib()
    return lib.horovod_rank(), lib.horovod_size()


class _Env:
    """Sets variables for the engine's bootstrap and puts the old values back."""

    def __init__(self):
        self._saved = {}

    def set(self, name, value):
        if name not in self._saved:
            self._saved[name] = os.environ.get(name)
        os.environ[name] = str(value)

    def set_default(self, name, value, *aliases):
        if _getenv(name, *aliases) is None:
            self.set(name, value)

    def restore(self):
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()


def _rendezvous(store, rank, size, env):
    """Agrees on ringfold's store through torch's store (see the module contract)."""
    global _starts
    key = 'ringfold/%s/%d' % (os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'), _starts)
    _starts += 1
    if rank == 0:
        addr = _getenv('RINGFOLD_STORE_ADDR') or _tcp_store_host(store) or _getenv('MASTER_ADDR') \
            or socket.gethostname()
        port = _getenv('RINGFOLD_STORE_PORT')
        if port is None:
            master = _getenv('MASTER_PORT')
            master = int(master) if master and master.isdigit() else None
            if master and master < 65535 and _port_is_free(master + 1):
                port = master + 1
            else:
                port = _free_port()
        secret = _getenv('RINGFOLD_SECRET') or secrets.token_hex(32)
        store.set(key, json.dumps({'addr': addr, 'port': int(port), 'secret': secret}))
    else:
        info = json.loads(store.get(key))
        addr, port, secret = info['addr'], info['port'], info['secret']
    local_rank, local_size = _getenv('LOCAL_RANK'), _getenv('LOCAL_WORLD_SIZE')
    if local_rank is None or local_size is None:
        store.set('%s/host/%d' % (key, rank), _host_id())
        if rank == 0:
            hosts = [store.get('%s/host/%d' % (key, r)).decode() for r in range(size)]
            layout = [(hosts[:r].count(h), hosts.count(h)) for r, h in enumerate(hosts)]
            store.set(key + '/layout', json.dumps(layout))
        local_rank, local_size = json.loads(store.get(key + '/layout'))[rank]
    for suffix, value in (('RANK', rank), ('SIZE', size), ('LOCAL_RANK', local_rank),
                          ('LOCAL_SIZE', local_size), ('STORE_ADDR', addr), ('STORE_PORT', port),
                          ('SECRET', secret)):
        env.set('RINGFOLD_' + suffix, value)
        if os.environ.get('HOROVOD_' + suffix) is not None:      # the two must agree
            env.set('HOROVOD_' + suffix, value)
    for suffix in ('CROSS_RANK', 'CROSS_SIZE'):                  # derived from the above
        for prefix in ('RINGFOLD_', 'HOROVOD_'):
            if os.environ.get(prefix + suffix) is not None:
                env._saved.setdefault(prefix + suffix, os.environ[prefix + suffix])
                del os.environ[prefix + suffix]
    env.set('RINGFOLD_STORE_SERVER', 'rank0')


def _init_engine(env):
    try:
        _lib.check(_lib.lib().ringfold_init(None, 0, None, None, 0), 'ringfold.init')
    finally:
        env.restore()
    _ps._setup([])


def start_engine(store, rank, size, timeout_seconds):
    """See the module contract. Returns True if this call started the engine."""
    global _owned, _unclaimed
    with _lock:
        lib = _lib.lib()
        if lib.horovod_is_initialized():
            engine_rank, engine_size = _engine_rank_size()
            if (engine_rank, engine_size) != (rank, size):
                raise ValueError('ringfold: the running ringfold engine has rank %d of %d, but '
                                 'torch.distributed asks for rank %d of %d; start both from the same '
                                 'launcher variables' % (engine_rank, engine_size, rank, size))
            claimed, _unclaimed = _unclaimed, False     # started by prepare_environment()
            return claimed
        env = _Env()
        env.set('RINGFOLD_DYNAMIC_PROCESS_SETS', '1')
        if timeout_seconds:
            env.set_default('RINGFOLD_TIMEOUT', '%g' % min(60.0, timeout_seconds), 'HOROVOD_GLOO_TIMEOUT_SECONDS')
            env.set_default('RINGFOLD_STALL_SHUTDOWN_TIME', '%g' % timeout_seconds,
                            'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS')
        under_ringfoldrun = os.environ.get('RINGFOLD_STORE_SERVER') == 'external'
        try:
            if under_ringfoldrun:
                launched = (int(os.environ.get('RINGFOLD_RANK', -1)), int(os.environ.get('RINGFOLD_SIZE', -1)))
                if launched != (rank, size):
                    raise ValueError('ringfold: ringfoldrun started this process as rank %d of %d, but '
                                     'torch.distributed asks for rank %d of %d' % (launched + (rank, size)))
            elif size > 1:
                _rendezvous(store, rank, size, env)
            else:
                env.set('RINGFOLD_SIZE', 1)
                env.set('RINGFOLD_RANK', 0)
                env.set('RINGFOLD_LOCAL_RANK', 0)
                env.set('RINGFOLD_LOCAL_SIZE', 1)
                env.set('RINGFOLD_SECRET', secrets.token_hex(16))
        except BaseException:
            env.restore()
            raise
        _init_engine(env)
        _owned = True
        return True


def owns_engine():
    return _owned


def stop_engine():
    """Shuts down the engine this module started (collectively); nothing otherwise."""
    global _owned, _unclaimed
    with _lock:
        if not _owned:
            return
        _owned = _unclaimed = False
        lib = _lib.lib()
        if lib.horovod_is_initialized():
            status = lib.ringfold_shutdown()
            _ps._reset()
            _ops.forget_all()
            if status != _lib.OK:
                raise RuntimeError('ringfold: shutdown: %s' % _lib.last_error())


def prepare_environment():
    """See the module contract; does nothing outside ringfoldrun or when torch's variables are
    set."""
    global _owned, _unclaimed
    env = os.environ
    if env.get('RINGFOLD_STORE_SERVER') != 'external' or env.get('RINGFOLD_RANK') is None:
        return
    for torch_name, ours in (('RANK', 'RINGFOLD_RANK'), ('WORLD_SIZE', 'RINGFOLD_SIZE'),
                             ('LOCAL_RANK', 'RINGFOLD_LOCAL_RANK'),
                             ('LOCAL_WORLD_SIZE', 'RINGFOLD_LOCAL_SIZE')):
        if env.get(torch_name) is None and env.get(ours) is not None:
            env[torch_name] = env[ours]
    if env.get('MASTER_ADDR') and env.get('MASTER_PORT'):
        return
    with _lock:
        lib = _lib.lib()
        if not lib.horovod_is_initialized():
            saved = _Env()
            saved.set('RINGFOLD_DYNAMIC_PROCESS_SETS', '1')
            _init_engine(saved)
            _owned = _unclaimed = True
        rank, size = _engine_rank_size()
        one_host = lib.horovod_local_size() == size
        # rank 0's choice, broadcast over the engine: a port (int64) and a host name (bytes)
        buf = (ctypes.c_int64 * 33)()
        if rank == 0:
            host = b'127.0.0.1' if one_host else (env.get('HOROVOD_HOSTNAME') or socket.gethostname()).encode()
            buf[0] = _free_port()
            ctypes.memmove(ctypes.byref(buf, 8), host[:255], min(len(host), 255))
        t = _ops.tensor(ctypes.addressof(buf), _lib.INT64, (33,))
        handle = _ops.enqueue(_lib.BROADCAST, t, t, buf, None, name='ringfold.torch.distributed.master',
                              root=0)
        _ops.synchronize(handle)
        host = ctypes.string_at(ctypes.byref(buf, 8), 256).split(b'\0', 1)[0].decode()
        env.setdefault('MASTER_ADDR', host)
        env.setdefault('MASTER_PORT', str(buf[0]))
