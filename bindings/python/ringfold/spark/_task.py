"""What one task of a ringfold.spark job does: place its rank, start it, forward it, report it.

Contract
  * run_task(ctx, job) runs inside a Spark barrier task (ctx: pyspark's BarrierTaskContext) or
    inside the driver for HorovodRunner(np<0) (ctx: _local.LocalContext, same methods:
    partitionId, getTaskInfos, allGather, resources). `job` is the dict _driver.Job.spec() makes.
  * Placement (place()): every task's host is the host part of its getTaskInfos() address.
    Ranks are contiguous per host, hosts in the order of their first partition, so partition 0
    is rank 0 (as horovod.spark.run orders its ranks); local rank = index on the host, cross
    rank = the host's index among the hosts that have that local rank (Horovod's definition).
  * Store: rank 0's task reserves a free port on its host (bound with SO_REUSEADDR, never
    listening, held until its rank exits: ringfold's store binds it with SO_REUSEADDR too, the
    kernel hands it to no other bind(0) or connect meanwhile) and shares it in the one
    allGather every task makes (with its GPU addresses). If rank 0's store still cannot bind
    it, its failure is marked 'store_port_taken' and the driver retries the job with a new port.
  * GPUs: CUDA_VISIBLE_DEVICES = the GPU addresses Spark gave this host's tasks, in local-rank
    order, so that device local_rank() is this task's own GPU when each task has one (Horovod
    scripts' torch.cuda.set_device(hvd.local_rank())); RINGFOLD_SPARK_GPUS = the indices of this
    task's own GPUs in that list (ringfold.spark.task.get_available_devices()). Unset when Spark
    gave no GPU.
  * The rank runs as `executable -m ringfold.spark._worker` (a fresh process: Spark reuses
    Python workers, and an engine thread, CUDA context or atexit hook must not stay in one),
    with the task's environment + job['env'] (a None value removes a variable) + the RINGFOLD_*
    placement, the secret only in its environment. sys.path goes along as PYTHONPATH, so what
    Spark added (--py-files, addPyFile) imports there too.
  * Output: each line goes to the driver as it comes (job['forward'] == 'all'), or only
    log_to_driver lines ('log'), the others then going to this task's stderr (the executor
    log). The last TAIL_LINES lines are kept and sent with a failure.
  * A rank that fails sends FAILURE, then this task raises RuntimeError, which fails the
    barrier stage (Spark kills the other tasks, whose ranks die with them). A rank that
    succeeds sends RESULT (None instead of its value for ranks other than 0 when
    job['rank0_result_only'], as HorovodRunner asks).
"""
import collections
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

from ringfold.spark import _protocol

TAIL_LINES = 100
STORE_BIND_FAILURE = 'rendezvous store cannot listen on'


def host_of(address):
    """The host part of 'host:port', '[v6]:port' or a bare host."""
    if address.startswith('['):
        return address[1:address.index(']')]
    if address.count(':') == 1:
        return address.rsplit(':', 1)[0]
    return address


def place(hosts):
    """Rank placement for tasks on `hosts` (one entry per partition): a list, per partition, of
    dicts rank, local_rank, local_size, cross_rank, cross_size, host."""
    order = list(dict.fromkeys(hosts))
    by_host = {h: [p for p, hp in enumerate(hosts) if hp == h] for h in order}
    placement = [None] * len(hosts)
    rank = 0
    for h in order:
        for local_rank, p in enumerate(by_host[h]):
            peers = [g for g in order if len(by_host[g]) > local_rank]
            placement[p] = {'rank': rank, 'local_rank': local_rank, 'local_size': len(by_host[h]),
                            'cross_rank': peers.index(h), 'cross_size': len(peers), 'host': h}
            rank += 1
    return placement


def gpu_env(placement, gpus, partition):
    """(CUDA_VISIBLE_DEVICES, RINGFOLD_SPARK_GPUS) for `partition`, or None without GPUs.
    gpus: per partition, the GPU addresses Spark gave it."""
    if not gpus[partition]:
        return None
    host = placement[partition]['host']
    mates = sorted((p for p in range(len(placement)) if placement[p]['host'] == host),
                   key=lambda p: placement[p]['local_rank'])
    visible = list(dict.fromkeys(a for p in mates for a in gpus[p]))
    mine = [str(visible.index(a)) for a in gpus[partition]]
    return ','.join(visible), ','.join(mine)


def reserve_port():
    """A socket bound to a free port on every interface, not listening (see the contract)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', 0))
    return s


class DriverLink:
    """The authenticated connection to the driver's service (_protocol)."""

    def __init__(self, address, secret, partition, timeout):
        self._sock = socket.create_connection(address, timeout=timeout)
        nonce = _protocol.recv_exact(self._sock, _protocol.NONCE_BYTES)
        if nonce is None:
            raise RuntimeError('ringfold.spark: the driver at %s:%s closed the connection' % address)
        self._sock.sendall(_protocol.answer(secret, nonce))
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self.partition = partition
        self.send(_protocol.HELLO, -1, json.dumps({'partition': partition}).encode())

    def send(self, kind, rank, payload):
        frame = _protocol.pack(kind, rank, payload)
        with self._lock:
            self._sock.sendall(frame)

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_WR)
            self._sock.recv(1)  # the driver closes once it has read everything
        except OSError:
            pass
        self._sock.close()


# A rank's identity comes from this job alone: the same variables inherited from a launcher the
# driver or executor itself runs under (ringfoldrun, horovodrun, an elastic worker) would
# contradict it (the bootstrap refuses RINGFOLD_RANK and HOROVOD_RANK that disagree).
_INHERITED_IDENTITY = (
    'HOROVOD_RANK', 'HOROVOD_SIZE', 'HOROVOD_LOCAL_RANK', 'HOROVOD_LOCAL_SIZE', 'HOROVOD_CROSS_RANK',
    'HOROVOD_CROSS_SIZE', 'HOROVOD_ELASTIC', 'RINGFOLD_ELASTIC', 'RINGFOLD_ELASTIC_WORKER_ID',
    'RINGFOLD_INCARNATION')


def _rank_env(job, place_, store_addr, store_port, gpu, parent_pid, log_fd):
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_IDENTITY}
    for k, v in (job.get('env') or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    env.update({
        'RINGFOLD_RANK': str(place_['rank']), 'RINGFOLD_SIZE': str(job['num_proc']),
        'RINGFOLD_LOCAL_RANK': str(place_['local_rank']),
        'RINGFOLD_LOCAL_SIZE': str(place_['local_size']),
        'RINGFOLD_CROSS_RANK': str(place_['cross_rank']),
        'RINGFOLD_CROSS_SIZE': str(place_['cross_size']),
        'RINGFOLD_STORE_ADDR': store_addr, 'RINGFOLD_STORE_PORT': str(store_port),
        'RINGFOLD_STORE_SERVER': 'rank0', 'RINGFOLD_SECRET': job['secret'],
        'RINGFOLD_SPARK_PARENT_PID': str(parent_pid), 'RINGFOLD_SPARK_LOG_FD': str(log_fd),
        'PYTHONUNBUFFERED': '1', 'RINGFOLD_SPARK_PICKLER': job['pickler'],
    })
    if job.get('nics'):
        env['RINGFOLD_SOCKET_IFNAME'] = ','.join(job['nics'])
    if gpu is not None:
        env['CUDA_VISIBLE_DEVICES'], env['RINGFOLD_SPARK_GPUS'] = gpu
    else:
        env.pop('RINGFOLD_SPARK_GPUS', None)
    path = [p for p in sys.path if p]
    if env.get('PYTHONPATH'):
        path.append(env['PYTHONPATH'])
    env['PYTHONPATH'] = os.pathsep.join(dict.fromkeys(path))
    return env


def run_task(ctx, job, cancelled=None):
    """Runs this task's rank to the end (see the module contract). `cancelled`: an Event that
    stops the rank early (the driver's local mode; Spark kills the whole worker instead)."""
    partition = ctx.partitionId()
    hosts = [host_of(info.address) for info in ctx.getTaskInfos()]
    if len(hosts) != job['num_proc']:
        raise RuntimeError('ringfold.spark: the barrier stage has %d tasks, the job %d ranks'
                           % (len(hosts), job['num_proc']))
    resources = ctx.resources() or {}
    my_gpus = list(resources['gpu'].addresses) if 'gpu' in resources else []
    reservation = reserve_port() if partition == 0 else None
    try:
        mine = {'gpus': my_gpus, 'port': reservation.getsockname()[1] if reservation else 0}
        gathered = [json.loads(m) for m in ctx.allGather(json.dumps(mine))]
        placement = place(hosts)
        me = placement[partition]
        store_port = gathered[0]['port']
        gpu = gpu_env(placement, [g['gpus'] for g in gathered], partition)
        link = DriverLink(tuple(job['driver']), job['secret'], partition, job['connect_timeout'])
        try:
            link.send(_protocol.HELLO, me['rank'], json.dumps(
                {'partition': partition, 'host': me['host'], 'local_rank': me['local_rank']}).encode())
            return _run_rank(job, link, me, hosts[0], store_port, gpu, cancelled)
        finally:
            link.close()
    finally:
        if reservation is not None:
            reservation.close()


def _run_rank(job, link, me, store_addr, store_port, gpu, cancelled):
    rank = me['rank']
    workdir = tempfile.mkdtemp(prefix='ringfold-spark-')
    try:
        payload_path = os.path.join(workdir, 'payload')
        result_path = os.path.join(workdir, 'result')
        fd = os.open(payload_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'wb') as f:
            f.write(job['payload'])
        log_r, log_w = os.pipe()
        env = _rank_env(job, me, store_addr, store_port, gpu, os.getpid(), log_w)
        executable = job.get('executable') or sys.executable
        try:
            proc = subprocess.Popen([executable, '-m', 'ringfold.spark._worker', payload_path, result_path],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, pass_fds=(log_w,))
        finally:
            os.close(log_w)
        tail = collections.deque(maxlen=TAIL_LINES)
        readers = [threading.Thread(target=_forward, args=(pipe, stream, rank, job, link, tail),
                                    daemon=True)
                   for pipe, stream in ((proc.stdout, 'stdout'), (proc.stderr, 'stderr'),
                                        (os.fdopen(log_r, 'rb'), 'log'))]
        for r in readers:
            r.start()
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if cancelled is not None and cancelled.is_set():
                    proc.kill()
        for r in readers:
            r.join(timeout=10)
        outcome = None
        if os.path.exists(result_path):
            with open(result_path, 'rb') as f:
                outcome = pickle.load(f)
        if outcome is not None and outcome[0] == 'ok' and code == 0:
            # HorovodRunner keeps rank 0's value only: the others' need not cross the network
            keep = not job.get('rank0_result_only') or rank == 0
            link.send(_protocol.RESULT, rank, outcome[1] if keep else pickle.dumps(None))
            return
        if outcome is not None and outcome[0] == 'error':
            info = outcome[1]
        elif cancelled is not None and cancelled.is_set():
            info = {'type': 'Cancelled', 'message': 'stopped: the job was cancelled', 'what': 'cancelled',
                    'traceback': '', 'exception': None}
        else:
            info = {'type': 'ProcessExited', 'exception': None, 'traceback': '',
                    'what': 'its process exited with status %d' % code,
                    'message': 'exited with status %d%s' % (
                        code, ' (signal %d)' % -code if code < 0 else '')}
        info['exit_code'] = code
        info['host'] = me['host']
        info['tail'] = [(s, line) for s, line in tail]
        info['store_port_taken'] = (rank == 0 and STORE_BIND_FAILURE in info.get('message', '')
                                    and (':%d:' % store_port) in info['message'])
        link.send(_protocol.FAILURE, rank, pickle.dumps(info))
        raise RuntimeError('ringfold.spark: rank %d on %s failed: %s: %s'
                           % (rank, me['host'], info['type'], info['message']))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _forward(pipe, stream, rank, job, link, tail):
    code = _protocol.STREAM_CODES[stream]
    forward_all = job.get('forward', 'all') == 'all'
    with pipe:
        for raw in iter(pipe.readline, b''):
            line = raw.decode('utf-8', 'replace').rstrip('\n')
            tail.append((stream, line))
            if forward_all or stream == 'log':
                try:
                    link.send(_protocol.LINE, rank, code + line.encode('utf-8', 'replace'))
                except OSError:
                    pass  # the driver went away; the rank's outcome still decides the task
            else:
                sys.stderr.write('[%d]<%s>:%s\n' % (rank, stream, line))
