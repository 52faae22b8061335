#!/usr/bin/env python3
"""The fault matrix: every fault ringfold promises to turn into a clear, bounded error (or to ride
out with correct data), measured cell by cell.

    sudo tests/faults/matrix.py [--reduced] [--rows ID,ID,...|FAULT,...] [--list]
                                [--out FILE.md] [--json FILE] [--cap S] [--lock-wait S]

A cell is one fault x placement x start mode x op x size x backend. It starts 4 ranks of
tests/faults/worker.py (int32 data, every result checked bit for bit), injects the fault and
records, for every rank: how it ended (correct data: DONE, or an ERROR and its text), the time
from the fault to its error, whether the text names the culprit (the rank, or for a link fault
the network/link), ranks still running past the bound (hung), wrong bits, and what was left
behind (processes in the cell's namespaces, /dev/shm entries, rf_netdelay emulators, network
namespaces). Settings: RINGFOLD_TIMEOUT=5, RINGFOLD_START_TIMEOUT=8 (15 under torch). The bound
is RINGFOLD_TIMEOUT + 2 s, or RINGFOLD_START_TIMEOUT + 2 s for faults before the mesh exists.

Placements (network namespaces PREFIX "rfm", addresses 10.78.0.x, scripts/netns_lib.sh):
  netns   4 emulated hosts, one rank each (eth0 on a bridge)
  netns2  2 emulated hosts, two ranks each (shared memory inside a host, TCP between: per_peer)
  host    one host (one namespace), 4 ranks
Start modes: hand (RINGFOLD_RANK/SIZE/... by hand, rank 0 hosts the store), run (ringfoldrun;
over ssh to each emulated host's own sshd), torch (ringfoldrun, FM_API=torch: ringfold.torch
DistributedOptimizer training plus the collective on torch tensors).
Backends: tcp (tcp_uring; on one host RINGFOLD_LOCAL_TRANSPORT=tcp), shm (RINGFOLD_TRANSPORT=shm),
rdma (RINGFOLD_TRANSPORT=rdma over libfabric's tcp;ofi_rxm), mix (netns2's default per_peer).

Phases are hit exactly through the test hook RINGFOLD_TEST_STOP_AT=RANK:PHASE (the rank stops
itself on entering the phase and says so; the driver then SIGKILLs it). One run at a time per
machine (the namespaces are shared): a second waits for the first's lock (--lock-wait, 900 s). --list prints the cells;
the full form runs every cell, --reduced one per fault (the CI form). Exit status: 0 when every
cell met its goal, 1 otherwise, 77 when not root or a prerequisite is missing (skipped).
Needs: root, iptables, sshd (openssh-server) for ringfoldrun on emulated hosts, the build
($BUILD_DIR, default build/: libringfold.so, ringfoldrun, tests/netns/rf_netdelay), the venvs
of scripts/pyenv.sh (plain: numpy; test: torch).
"""
import argparse
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get('BUILD_DIR', os.path.join(ROOT, 'build')))
P = 'rfm'
NET = '10.78.0.'
SSH_PORT = 2222
TIMEOUT = 5
START_TIMEOUT = 8
START_TIMEOUT_TORCH = 15
NRANKS = 4
VICTIM = 2
WORKER = os.path.join(ROOT, 'tests', 'faults', 'worker.py')
KiB, MiB = 1024, 1024 * 1024
SIZES = [1 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB]
OPS = ['allreduce', 'allgather', 'broadcast', 'alltoall']
MODES = ['hand', 'run', 'torch']
DELAYS_MS = [1, 5, 10, 20, 2]

# name: (what, trigger, expect, bound, needs_netns, modes)
#   trigger: hook:<phase> (the victim stopped itself there), steady (every rank ran 3 steps),
#            start (the fault is in place before the ranks start)
#   expect:  error (every live rank must raise), finish (correct data on every rank),
#            end (either, bounded: the fault hits after the last collective)
#   bound:   timeout (RINGFOLD_TIMEOUT + 2) or start (RINGFOLD_START_TIMEOUT + 2)
FAULTS = {
    'kill-store': ('SIGKILL rank 2 on entering the store rendezvous', 'hook:store', 'error', 'start', False, MODES),
    'kill-mesh': ('SIGKILL rank 2 in mesh set-up (address published, no peer answered)', 'hook:mesh', 'error',
                  'start', False, MODES),
    'kill-first': ('SIGKILL rank 2 in the first collective (agreed, before data moves)', 'hook:first', 'error',
                   'timeout', False, MODES),
    'kill-steady': ('SIGKILL rank 2 in steady state', 'steady', 'error', 'timeout', False, MODES),
    'kill-shutdown': ('SIGKILL rank 2 on entering shutdown', 'hook:shutdown', 'end', 'timeout', False, MODES),
    'kill-rank0': ('SIGKILL rank 0 (by hand: the store\'s host) in steady state', 'steady', 'error', 'timeout',
                   False, MODES),
    'kill-launcher': ('SIGKILL ringfoldrun in steady state', 'steady', 'gone', 'timeout', False, ['run', 'torch']),
    'stop': ('SIGSTOP rank 2 (frozen) in steady state', 'steady', 'error', 'timeout', False, MODES),
    'stop-cont': ('SIGSTOP rank 2, SIGCONT 2.5 s later (< timeout)', 'steady', 'finish', 'timeout', False, MODES),
    'link-down': ('rank 2\'s host link down for good', 'steady', 'error', 'timeout', True, MODES),
    'link-flap': ('rank 2\'s host link down for 2 s, then up', 'steady', 'finish', 'timeout', True, MODES),
    'loss-1': ('1% packet loss on every host (from start)', 'start', 'finish', 'timeout', True, MODES),
    'loss-5': ('5% packet loss on every host (from start)', 'start', 'finish', 'timeout', True, MODES),
    'reorder': ('10% of packets reordered on every host', 'start', 'finish', 'timeout', True, MODES),
    'duplicate': ('5% of packets duplicated on every host', 'start', 'finish', 'timeout', True, MODES),
    'delay': ('1-20 ms delay (+-20% jitter) on every host', 'start', 'finish', 'timeout', True, MODES),
    'store-unreach': ('the store\'s host unreachable at start (host 0 drops all TCP but ssh)', 'start', 'error',
                      'start', True, MODES),
    'store-lost': ('the store lost after start (its port dropped both ways)', 'steady', 'finish', 'timeout', True,
                   MODES),
    'timeline-full': ('RINGFOLD_TIMELINE on a full 16 KiB tmpfs (full at start)', 'start', 'error', 'timeout', False,
                      MODES),
    'timeline-fills': ('RINGFOLD_TIMELINE on a 16 KiB tmpfs with 4 KiB free (full after a few steps)', 'start',
                       'finish', 'timeout', False, MODES),
    'stdout-blocked': ('ringfoldrun\'s stdout a pipe nobody reads; ranks print 64 KiB a step', 'start', 'finish',
                       'timeout', False, ['run', 'torch']),
}


def build_cells():
    """The covering design: every fault x 5 cells (one per size, ops and start modes rotated, so
    that every fault meets every op, size and start mode), plus kill/stop/first on the shm, rdma
    and mixed backends. `reduced` marks one cell per fault (and per backend) for CI."""
    cells = []
    for fi, (fault, (_, _, _, _, needs_netns, modes)) in enumerate(FAULTS.items()):
        for k in range(5):
            size = SIZES[k]
            op = OPS[(k + fi // 4) % 4]
            mode = modes[(k + fi) % len(modes)]
            placement = 'netns'
            if not needs_netns and k == 4 - (fi % 2):
                placement = 'host'
            if fault in ('loss-5', 'reorder', 'duplicate', 'loss-1') and size == 64 * MiB:
                size = 16 * MiB  # 64 MiB under loss runs for minutes on 2 vCPUs; 16 MiB is the largest
            c = dict(fault=fault, placement=placement, mode=mode, op=op, size=size, backend='tcp', reduced=False)
            if fault == 'delay':
                c['delay_ms'] = DELAYS_MS[k]
            cells.append(c)
    extra = [
        ('shm', 'host', 'kill-steady', 'hand', 'allreduce', 1 * MiB, True),
        ('shm', 'host', 'stop', 'run', 'allgather', 64 * KiB, False),
        ('shm', 'host', 'stop-cont', 'torch', 'broadcast', 16 * MiB, False),
        ('shm', 'host', 'kill-first', 'run', 'alltoall', 64 * MiB, False),
        ('shm', 'host', 'kill-rank0', 'hand', 'allreduce', 4 * KiB, False),
        ('rdma', 'host', 'kill-steady', 'run', 'allgather', 64 * KiB, False),
        ('rdma', 'host', 'stop', 'hand', 'allreduce', 1 * MiB, True),
        ('rdma', 'host', 'stop-cont', 'hand', 'alltoall', 1 * KiB, False),
        ('rdma', 'host', 'kill-first', 'torch', 'broadcast', 16 * MiB, False),
        ('rdma', 'host', 'kill-rank0', 'run', 'allreduce', 64 * MiB, False),
        ('mix', 'netns2', 'kill-steady', 'run', 'alltoall', 16 * MiB, True),
        ('mix', 'netns2', 'stop', 'hand', 'broadcast', 1 * MiB, False),
        ('mix', 'netns2', 'stop-cont', 'run', 'allreduce', 64 * KiB, False),
        ('mix', 'netns2', 'link-down', 'hand', 'allgather', 64 * KiB, False),
        ('mix', 'netns2', 'kill-mesh', 'torch', 'allreduce', 1 * KiB, False),
    ]
    for backend, placement, fault, mode, op, size, _ in extra:
        cells.append(dict(fault=fault, placement=placement, mode=mode, op=op, size=size, backend=backend,
                          reduced=False))
    for i, c in enumerate(cells, 1):
        c['id'] = i
    return cells


# The reduced (CI) form: one cell per fault and per extra backend, at most 1 MiB and one torch
# cell, so that the whole runs in about 3 minutes. Ids 201 and up.
REDUCED = [
    ('kill-store', 'netns', 'hand', 'allreduce', 1 * KiB, 'tcp'),
    ('kill-mesh', 'netns', 'run', 'allgather', 64 * KiB, 'tcp'),
    ('kill-first', 'netns', 'run', 'broadcast', 1 * MiB, 'tcp'),
    ('kill-steady', 'host', 'hand', 'alltoall', 64 * KiB, 'tcp'),
    ('kill-shutdown', 'netns', 'hand', 'allreduce', 1 * KiB, 'tcp'),
    ('kill-rank0', 'netns', 'hand', 'allgather', 64 * KiB, 'tcp'),
    ('kill-launcher', 'netns', 'run', 'alltoall', 64 * KiB, 'tcp'),
    ('stop', 'host', 'run', 'allreduce', 1 * MiB, 'tcp'),
    ('stop-cont', 'netns', 'torch', 'broadcast', 1 * KiB, 'tcp'),
    ('link-down', 'netns', 'hand', 'alltoall', 64 * KiB, 'tcp'),
    ('link-flap', 'netns', 'run', 'allreduce', 64 * KiB, 'tcp'),
    ('loss-1', 'netns', 'hand', 'allgather', 1 * MiB, 'tcp'),
    ('loss-5', 'netns', 'hand', 'allreduce', 64 * KiB, 'tcp'),
    ('reorder', 'netns', 'run', 'broadcast', 64 * KiB, 'tcp'),
    ('duplicate', 'netns', 'hand', 'alltoall', 1 * MiB, 'tcp'),
    ('delay', 'netns', 'hand', 'allreduce', 1 * MiB, 'tcp'),
    ('store-unreach', 'netns', 'hand', 'allgather', 1 * KiB, 'tcp'),
    ('store-lost', 'netns', 'run', 'broadcast', 64 * KiB, 'tcp'),
    ('timeline-full', 'netns', 'hand', 'allreduce', 64 * KiB, 'tcp'),
    ('timeline-fills', 'host', 'run', 'allgather', 64 * KiB, 'tcp'),
    ('stdout-blocked', 'host', 'run', 'alltoall', 1 * MiB, 'tcp'),
    ('kill-steady', 'host', 'hand', 'allreduce', 1 * MiB, 'shm'),
    ('stop', 'host', 'hand', 'allgather', 64 * KiB, 'rdma'),
    ('kill-steady', 'netns2', 'run', 'alltoall', 1 * MiB, 'mix'),
]


def reduced_cells():
    cells = []
    for i, (fault, placement, mode, op, size, backend) in enumerate(REDUCED, 201):
        c = dict(id=i, fault=fault, placement=placement, mode=mode, op=op, size=size, backend=backend, reduced=True)
        if fault == 'delay':
            c['delay_ms'] = 20
        cells.append(c)
    return cells


def human(n):
    return '%d MiB' % (n // MiB) if n >= MiB else '%d KiB' % (n // KiB)


# ---- environment --------------------------------------------------------------------------

def sh(script, check=True):
    return subprocess.run(['bash', '-c', 'set -e; source %s/scripts/netns_lib.sh; %s' % (ROOT, script)],
                          check=check, capture_output=True, text=True)


def netns_exec(ns, *cmd, check=True):
    return subprocess.run(['ip', 'netns', 'exec', ns] + list(cmd), check=check, capture_output=True, text=True)


def have_impair():
    with open(os.path.join(ROOT, 'scripts', 'netns_lib.sh')) as f:
        return re.search(r'^netns_impair\s*\(\)', f.read(), re.M) is not None


class Cluster:
    """Emulated hosts PREFIX h0..h<n-1> (10.78.0.1..n), with sshd on :2222 when asked."""

    def __init__(self, keydir):
        self.keydir = keydir
        self.n = 0

    def up(self, n, sshd):
        self.down()
        cmds = ['netns_bridge %s' % P]
        cmds += ['netns_host %s h%d %d %s%d/24 eth0' % (P, i, i, NET, i + 1) for i in range(n)]
        sh('; '.join(cmds))
        self.n = n
        if sshd:
            for i in range(n):
                d = os.path.join(self.keydir, 'h%d' % i)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, 'sshd_config'), 'w') as f:
                    f.write('\n'.join([
                        'ListenAddress %s%d:%d' % (NET, i + 1, SSH_PORT),
                        'HostKey %s/host_key' % self.keydir, 'PidFile %s/sshd.pid' % d,
                        'AuthorizedKeysFile %s/authorized_keys' % self.keydir,
                        'PermitRootLogin prohibit-password', 'PubkeyAuthentication yes',
                        'PasswordAuthentication no', 'KbdInteractiveAuthentication no', 'UsePAM no',
                        'StrictModes no', 'UseDNS no', 'PrintMotd no', 'MaxStartups 200', 'MaxSessions 50',
                        'ClientAliveInterval 1', 'ClientAliveCountMax 3', 'SetEnv HOME=%s/home' % self.keydir,
                        'LogLevel ERROR', '']))
                netns_exec(self.ns(i), '/usr/sbin/sshd', '-f', os.path.join(d, 'sshd_config'), '-E',
                           os.path.join(d, 'log'))
            for i in range(n):
                for _ in range(100):
                    out = netns_exec(self.ns(i), 'ss', '-ltnH', 'sport = :%d' % SSH_PORT, check=False).stdout
                    if out.strip():
                        break
                    time.sleep(0.05)
                else:
                    raise RuntimeError('sshd on %s did not start' % self.ns(i))

    def ns(self, i):
        return '%sh%d' % (P, i)

    def down(self):
        sh('netns_down %s "h[0-9]+"' % P, check=False)
        self.n = 0

    def pids(self):
        """pid -> namespace of every process in the cluster's namespaces but sshd (the listener)."""
        out = {}
        for i in range(self.n):
            r = subprocess.run(['ip', 'netns', 'pids', self.ns(i)], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    with open('/proc/%s/comm' % pid) as f:
                        comm = f.read().strip()
                    with open('/proc/%s/stat' % pid) as f:
                        ppid = f.read().rsplit(')', 1)[1].split()[1]
                except OSError:
                    continue
                if comm == 'sshd' and ppid == '1':
                    continue  # the host's sshd listener
                out[int(pid)] = (self.ns(i), comm)
        return out


def make_keys(keydir):
    os.makedirs(os.path.join(keydir, 'home'), exist_ok=True)
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', os.path.join(keydir, 'id_user')],
                   check=True)
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', os.path.join(keydir, 'host_key')],
                   check=True)
    shutil.copy(os.path.join(keydir, 'id_user.pub'), os.path.join(keydir, 'authorized_keys'))
    with open(os.path.join(keydir, 'host_key.pub')) as f:
        hk = ' '.join(f.read().split()[:2])
    with open(os.path.join(keydir, 'known_hosts'), 'w') as f:
        for i in range(8):
            f.write('[%s%d]:%d %s\n' % (NET, i + 1, SSH_PORT, hk))
    os.makedirs('/run/sshd', exist_ok=True)


def shm_entries():
    try:
        return set(os.listdir('/dev/shm'))
    except OSError:
        return set()


def netdelay_pids():
    out = []
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                with open('/proc/%s/comm' % pid) as f:
                    if f.read().strip() == 'rf_netdelay':
                        with open('/proc/%s/cmdline' % pid) as g:
                            if ('--netns\0%s' % P) in g.read():
                                out.append(int(pid))
            except OSError:
                pass
    return out


def pid_state(pid):
    """'gone', 'Z', 'T' (stopped) or 'R'/'S'/... for a live process."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return 'gone'


# ---- one cell -----------------------------------------------------------------------------

class Cell:
    def __init__(self, spec, ctx):
        self.c = spec
        self.ctx = ctx
        self.fault = spec['fault']
        self.what, self.trigger, self.expect, self.bound_kind, _, _ = FAULTS[self.fault]
        self.lines = queue.Queue()
        self.procs = []          # Popen: the ranks (hand) or the launcher
        self.rank_pid = {}
        self.ready, self.steady = {}, {}
        self.init_t = {}
        self.error, self.done, self.exited = {}, {}, {}
        self.wrong = {}
        self.launcher_lines = []
        self.log = []
        self.victim = 0 if self.fault == 'kill-rank0' else VICTIM
        self.t_fault = None
        self.t_fault_end = None
        self.stopped_pid = None
        self.outdir = None
        self.port = ctx['port']

    # -- set-up
    def hosts(self):
        pl = self.c['placement']
        return {'netns': 4, 'netns2': 2, 'host': 1}[pl]

    def host_of(self, rank):
        pl = self.c['placement']
        return {'netns': rank, 'netns2': rank // 2, 'host': 0}[pl]

    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('RINGFOLD_', 'HOROVOD_', 'OMPI_', 'SLURM_', 'FM_', 'MASTER_', 'RANK',
                                    'WORLD_SIZE', 'LOCAL_RANK', 'TORCHELASTIC'))}
        torch = self.c['mode'] == 'torch'
        env.update(PYTHONPATH=os.path.join(ROOT, 'bindings', 'python'),
                   RINGFOLD_LIBRARY=os.path.join(BUILD, 'libringfold.so'),
                   RINGFOLD_TIMEOUT=str(TIMEOUT),
                   RINGFOLD_START_TIMEOUT=str(START_TIMEOUT_TORCH if torch else START_TIMEOUT),
                   FM_OP=self.c['op'], FM_BYTES=str(self.c['size']), FM_API='torch' if torch else 'numpy',
                   FM_STEPS=str(self.steps()), FM_SLEEP=str(self.step_sleep()), OMP_NUM_THREADS='1')
        b = self.c['backend']
        if b == 'tcp' and self.c['placement'] == 'host':
            env['RINGFOLD_LOCAL_TRANSPORT'] = 'tcp'
        elif b == 'shm':
            env['RINGFOLD_TRANSPORT'] = 'shm'
        elif b == 'rdma':
            env.update(RINGFOLD_TRANSPORT='rdma', RINGFOLD_LOCAL_TRANSPORT='rdma', RINGFOLD_RDMA_FABRIC='ofi',
                       RINGFOLD_OFI_PROVIDER='tcp;ofi_rxm')
        if self.trigger.startswith('hook:'):
            env['RINGFOLD_TEST_STOP_AT'] = '%d:%s' % (self.victim, self.trigger[5:])
        if self.fault.startswith('timeline-'):
            env['RINGFOLD_TIMELINE'] = os.path.join(self.ctx['tiny'], 'timeline.json')
            env['FM_TIMELINE_FILE'] = env['RINGFOLD_TIMELINE']
        if self.fault == 'stdout-blocked':
            env['FM_SPAM'] = str(64 * KiB)
        return env

    def steps(self):
        if self.expect == 'error' or self.fault == 'kill-launcher':
            return 0  # until the fault ends it
        s = self.c['size']
        if self.trigger == 'steady':  # must outlast the fault (2.5 s): paced small steps
            return 60 if s <= MiB else (12 if s <= 16 * MiB else 8)
        return 20 if s <= MiB else (6 if s <= 16 * MiB else 4)

    def step_sleep(self):
        if self.trigger == 'steady' and self.expect == 'finish' and self.c['size'] <= MiB:
            return 0.1
        return 0.0

    def bound(self):
        if self.bound_kind == 'start':
            return (START_TIMEOUT_TORCH if self.c['mode'] == 'torch' else START_TIMEOUT) + 2.0
        return TIMEOUT + 2.0

    def python(self):
        return self.ctx['py_torch'] if self.c['mode'] == 'torch' else self.ctx['py_plain']

    def reader(self, stream, src):
        for line in iter(stream.readline, ''):
            self.lines.put((time.time(), src, line.rstrip('\n')))
        stream.close()

    def start(self):
        env = self.base_env()
        n = self.hosts()
        if self.fault == 'store-unreach':
            # host 0 answers nothing on TCP but ssh (the launcher must still reach the others)
            ns0 = self.ctx['cluster'].ns(0)
            netns_exec(ns0, 'iptables', '-w', '5', '-A', 'INPUT', '-i', 'eth0', '-p', 'tcp', '--sport', str(SSH_PORT),
                       '-j', 'ACCEPT')  # the launcher's own ssh sessions to the other hosts
            netns_exec(ns0, 'iptables', '-w', '5', '-A', 'INPUT', '-i', 'eth0', '-p', 'tcp',
                       '!', '--dport', str(SSH_PORT), '-j', 'DROP')
        if self.fault in ('loss-1', 'loss-5', 'reorder', 'duplicate', 'delay'):
            self.impair(n)
        py = self.python()
        if self.c['mode'] == 'hand':
            per_host = NRANKS // n
            store = '127.0.0.1' if self.c['placement'] == 'host' else NET + '1'
            for r in range(NRANKS):
                e = dict(env, RINGFOLD_RANK=str(r), RINGFOLD_SIZE=str(NRANKS),
                         RINGFOLD_LOCAL_RANK=str(r % per_host), RINGFOLD_LOCAL_SIZE=str(per_host),
                         RINGFOLD_STORE_ADDR=store, RINGFOLD_STORE_PORT=str(self.port),
                         RINGFOLD_SECRET='fault-matrix-%d' % self.port)
                p = subprocess.Popen(['ip', 'netns', 'exec', self.ctx['cluster'].ns(self.host_of(r)), py, WORKER],
                                     env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, cwd=ROOT)
                self.procs.append(p)
                self.rank_pid[r] = p.pid
                threading.Thread(target=self.reader, args=(p.stdout, 'r%d' % r), daemon=True).start()
                threading.Thread(target=self.reader, args=(p.stderr, 'r%d!' % r), daemon=True).start()
        else:
            self.outdir = tempfile.mkdtemp(prefix='rfm-out-')
            cmd = ['ip', 'netns', 'exec', self.ctx['cluster'].ns(0), os.path.join(BUILD, 'ringfoldrun'),
                   '-np', str(NRANKS), '--start-timeout', env['RINGFOLD_START_TIMEOUT'], '--grace-period', '2',
                   '--output-filename', self.outdir]
            if n > 1:
                k = self.ctx['keydir']
                cmd += ['-H', ','.join('%s%d:%d' % (NET, i + 1, NRANKS // n) for i in range(n)),
                        '--ssh-port', str(SSH_PORT), '--ssh-identity-file', os.path.join(k, 'id_user'),
                        '--ssh-option', 'UserKnownHostsFile=%s/known_hosts' % k,
                        '--ssh-option', 'StrictHostKeyChecking=yes',
                        '--ssh-option', 'GlobalKnownHostsFile=/dev/null']
                for v in ('PYTHONPATH', 'OMP_NUM_THREADS') + tuple(x for x in env if x.startswith('FM_')):
                    cmd += ['-x', v]
            cmd += [py, WORKER]
            if self.fault == 'stdout-blocked':
                rfd, wfd = os.pipe()
                self.blocked_pipe = rfd     # never read
                p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=wfd,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, cwd=ROOT)
                os.close(wfd)
                threading.Thread(target=self.tail_files, daemon=True).start()
            else:
                p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, cwd=ROOT)
                threading.Thread(target=self.reader, args=(p.stdout, 'L'), daemon=True).start()
            threading.Thread(target=self.reader, args=(p.stderr, 'L!'), daemon=True).start()
            self.procs.append(p)

    def tail_files(self):
        """stdout-blocked: the ranks' lines from --output-filename's files (the pipe is never read)."""
        pos = {}
        while not getattr(self, 'finished', False):
            for r in range(NRANKS):
                path = os.path.join(self.outdir, 'rank.%d' % r, 'stdout')
                try:
                    with open(path) as f:
                        f.seek(pos.get(r, 0))
                        data = f.read()
                        cut = data.rfind('\n') + 1
                        pos[r] = pos.get(r, 0) + len(data[:cut].encode())
                        for line in data[:cut].splitlines():
                            if line.startswith('FM '):
                                self.lines.put((time.time(), 'f%d' % r, line))
                except OSError:
                    pass
            time.sleep(0.1)

    def impair(self, n):
        f = self.fault
        if have_impair():
            if f == 'delay':
                us = self.c['delay_ms'] * 1000
                args = '--delay-us %d --jitter-us %d' % (us, us // 5)
            else:
                args = {'loss-1': '--loss 0.01', 'loss-5': '--loss 0.05', 'reorder': '--reorder 0.1',
                        'duplicate': '--duplicate 0.05'}[f]
            # One emulator at the bridge (br_netfilter), so that every packet between hosts is
            # impaired once and the senders' TCP small queues do not hold delayed packets; else
            # one at each host's egress.
            br = P + 'br'
            if netns_exec(br, 'sysctl', '-qw', 'net.bridge.bridge-nf-call-iptables=1', check=False).returncode == 0:
                where = [br]
            else:
                where = [self.ctx['cluster'].ns(i) for i in range(n)]
            for ns in where:
                r = sh('netns_impair %s 0 %s' % (ns, args), check=False)
                if r.returncode:
                    raise RuntimeError('netns_impair failed: ' + r.stderr.strip())
            self.impaired = 'netns_impair %s %s' % ('at the bridge' if where == [br] else 'at each host', args)
        elif f in ('loss-1', 'loss-5'):
            prob = '0.01' if f == 'loss-1' else '0.05'
            for i in range(n):
                netns_exec(self.ctx['cluster'].ns(i), 'iptables', '-w', '5', '-A', 'OUTPUT', '!', '-o', 'lo', '-m',
                           'statistic', '--mode', 'random', '--probability', prob, '-j', 'DROP')
            self.impaired = 'iptables statistic drop ' + prob
        elif f == 'delay':
            for i in range(n):
                r = sh('netns_delay %s %d 0' % (self.ctx['cluster'].ns(i), self.c['delay_ms'] * 1000), check=False)
                if r.returncode:
                    raise RuntimeError('netns_delay failed: ' + r.stderr.strip())
            self.impaired = 'netns_delay %d ms' % self.c['delay_ms']
        else:
            raise NotRun('needs netns_impair (scripts/netns_lib.sh) for %s' % f)

    # -- the fault
    def inject(self, pid=None):
        f = self.fault
        cl = self.ctx['cluster']
        self.t_fault = time.time()
        if f.startswith('kill-') and f != 'kill-launcher':
            os.kill(pid or self.rank_pid[self.victim], signal.SIGKILL)
        elif f == 'kill-launcher':
            self.procs[0].send_signal(signal.SIGKILL)
        elif f in ('stop', 'stop-cont'):
            self.stopped_pid = self.rank_pid[self.victim]
            os.kill(self.stopped_pid, signal.SIGSTOP)
            if f == 'stop-cont':
                time.sleep(2.5)
                os.kill(self.stopped_pid, signal.SIGCONT)
                self.t_fault_end = time.time()
        elif f in ('link-down', 'link-flap'):
            h = self.host_of(self.victim)
            subprocess.run(['ip', '-n', cl.ns(h), 'link', 'set', 'eth0', 'down'], check=True)
            if f == 'link-flap':
                time.sleep(2.0)
                subprocess.run(['ip', '-n', cl.ns(h), 'link', 'set', 'eth0', 'up'], check=True)
                self.t_fault_end = time.time()
        elif f == 'store-lost':
            port = self.store_port
            for chain, d in (('INPUT', '--dport'), ('OUTPUT', '--sport')):
                netns_exec(cl.ns(0), 'iptables', '-w', '5', '-I', chain, '-p', 'tcp', d, str(port), '-j', 'DROP')
            self.t_fault_end = self.t_fault

    def handle(self, t, src, line):
        self.log.append('%.3f %s %s' % (t, src, line))
        m = re.search(r'RINGFOLD_TEST_STOP_AT: rank (\d+) \(pid (\d+)\) stopped itself at (\w+)', line)
        if m and self.t_fault is None:
            pid = int(m.group(2))
            for _ in range(100):  # wait until it is really stopped
                if pid_state(pid) == 'T':
                    break
                time.sleep(0.01)
            self.rank_pid.setdefault(int(m.group(1)), pid)
            self.inject(pid)
            return
        if src == 'L!' and line.startswith('ringfoldrun: ') and 'stopping' not in line \
                and 'grace period' not in line:
            self.launcher_lines.append(line)
        m = re.search(r'FM (\w+) (\S+) ?(.*)', line)
        if not m:
            return
        kind, rank, rest = m.group(1), m.group(2), m.group(3)
        try:
            rank = int(rank)
        except ValueError:
            return
        if kind == 'START':
            self.rank_pid.setdefault(rank, int(rest.split()[0]))
        elif kind == 'INIT':
            self.init_t[rank] = float(rest.split()[0])
        elif kind == 'READY':
            w = rest.split()
            self.rank_pid[rank] = int(w[0])
            self.ready[rank] = float(w[1])
            if w[2] != '-':
                self.store_port = int(w[2])
        elif kind == 'STEADY':
            self.steady[rank] = float(rest.split()[0])
        elif kind == 'ERROR':
            tt, text = rest.split(' ', 1)
            self.error.setdefault(rank, (float(tt), text))
        elif kind == 'DONE':
            w = rest.split()
            self.done[rank] = (float(w[0]), int(w[1]), int(w[2]))
        elif kind == 'WRONG':
            self.wrong[rank] = self.wrong.get(rank, 0) + int(rest.split()[1])

    def live_ranks(self):
        if self.fault in ('kill-launcher',):
            return []
        if self.fault.startswith('kill-') or self.fault == 'stop':
            return [r for r in range(NRANKS) if r != self.victim]
        return list(range(NRANKS))

    def ended(self, r):
        return r in self.error or r in self.done or r in self.exited

    def run(self):
        self.load = os.getloadavg()[0]
        self.t_start = time.time()
        self.store_port = self.port
        self.start()
        if self.trigger == 'start':
            self.t_fault = self.t_start
        cap = self.ctx['cap']
        hard = self.t_start + (90 if self.c['mode'] == 'torch' else 45) + cap  # to reach the fault
        while True:
            now = time.time()
            try:
                t, src, line = self.lines.get(timeout=0.05)
                self.handle(t, src, line)
            except queue.Empty:
                pass
            # exits of ranks we know the pid of
            for r, pid in list(self.rank_pid.items()):
                if r not in self.exited:
                    if self.c['mode'] == 'hand':
                        p = self.procs[r]
                        if p.poll() is not None:
                            self.exited[r] = time.time()
                    elif pid_state(pid) in ('gone', 'Z'):
                        self.exited[r] = time.time()
            if self.trigger == 'steady' and self.t_fault is None and len(self.steady) == NRANKS:
                time.sleep(0.3)
                self.inject()
            if self.t_fault is not None:
                # done when every rank (live or not) ended, or past the deadline
                deadline = (self.t_fault_end or self.t_fault) + self.bound() + cap
                if self.expect == 'finish' or self.expect == 'end':
                    deadline = max(deadline, self.t_start + cap + 30)
                live = self.live_ranks()
                if self.fault == 'kill-launcher':
                    if all(pid_state(p) in ('gone', 'Z') for p in self.rank_pid.values()):
                        # Ranks that went after this round's exit check above exited by now:
                        # without this, ranks that all died within one 50 ms round (the launcher's
                        # death reaches them at once) were counted as hung.
                        gone_at = time.time()
                        for r in self.rank_pid:
                            self.exited.setdefault(r, gone_at)
                        break
                elif all(self.ended(r) for r in live):
                    break
                if now > deadline:
                    self.deadline_hit = True
                    break
            elif now > hard:
                self.deadline_hit = True
                break
        self.t_end = time.time()
        # Every process of the cell must end by itself (ranks, the launcher, its ssh clients and
        # remote shells): wait up to 12 s, draining output, then count what is left.
        end = time.time() + 12
        while time.time() < end:
            try:
                t, src, line = self.lines.get(timeout=0.1)
                self.handle(t, src, line)
            except queue.Empty:
                pass
            if all(p.poll() is not None for p in self.procs if not self.frozen_by_driver(p.pid)) \
                    and not self.leftovers():
                break
        self.t_clean = time.time()
        while True:
            try:
                self.handle(*self.lines.get_nowait())
            except queue.Empty:
                break
        self.finished = True

    def frozen_by_driver(self, pid):
        return pid == self.stopped_pid and self.c['mode'] == 'hand' and self.fault == 'stop'

    def leftovers(self):
        cl = self.ctx['cluster']
        left = []
        for pid, (ns, comm) in cl.pids().items():
            if self.frozen_by_driver(pid):
                continue  # the driver's own frozen victim: no launcher exists to stop it
            if comm == 'rf_netdelay':
                continue  # the driver's emulators (counted after netns_down)
            left.append('%s:%s(%d)' % (ns, comm, pid))
        return left

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for pid in self.rank_pid.values():
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if getattr(self, 'blocked_pipe', None) is not None:
            os.close(self.blocked_pipe)
        if self.outdir:
            shutil.rmtree(self.outdir, ignore_errors=True)


class NotRun(Exception):
    pass


# How long a run waits for another run of the matrix on the same machine (they share namespaces).
LOCK_WAIT_S = 900


# Misses understood and recorded in docs/reliability.md but not fixed yet: a cell whose only miss
# is one of these is reported as "missed (known: ...)" and does not fail the run.
KNOWN = {
}


def culprit_ok(cell, rank, text):
    f = cell.fault
    v = cell.victim
    t = text.lower()
    names_victim = re.search(r'\brank %d\b' % v, text) is not None
    if f in ('link-down',):
        if rank == v or cell.c['placement'] == 'netns2' and rank // 2 == v // 2:
            return 'network' in t or 'link' in t
        return names_victim or 'network' in t
    if f == 'store-unreach':
        return 'store' in t
    if f == 'timeline-full':  # rank 0 (which writes it) names the file, the others rank 0
        return 'timeline' in t or re.search(r'\brank 0\b', text) is not None
    return names_victim


def evaluate(cell):
    r = dict(cell.c)
    r['what'] = cell.what
    r['load'] = cell.load
    if cell.t_fault is None:  # the job never got to the fault: say how far it got, judge nothing
        r.update(outcome='not reached', goal_met=None, seconds=round(cell.t_end - cell.t_start, 1),
                 reason='the fault was not injected: %d of %d ranks started, %d ready, %d steady after %.0f s '
                        '(load average %.1f)' % (len(cell.rank_pid), NRANKS, len(cell.ready), len(cell.steady),
                                                  cell.t_end - cell.t_start, cell.load),
                 ranks={}, hung=[], wrong_bits=0, late=[], bad_culprit=[], launcher=cell.launcher_lines[:3])
        return r
    if getattr(cell, 'impaired', None):
        r['impairment'] = cell.impaired
    live = cell.live_ranks() if cell.fault != 'kill-launcher' else []
    per = {}
    hung, wrong, bad_culprit, late = [], 0, [], []
    bound = cell.bound()
    t0 = cell.t_fault_end if cell.expect == 'finish' and cell.t_fault_end else cell.t_fault
    def since(rk, t):
        # a fault in place before the start: from this rank's own call of init()
        if cell.trigger == 'start':
            return t - cell.init_t.get(rk, cell.t_start)
        return t - (cell.t_fault or cell.t_start)
    for rk in range(NRANKS):
        e = {}
        if rk in cell.done:
            e['end'] = 'done'
            e['wrong_bits'] = cell.done[rk][2]
            wrong += cell.done[rk][2]
            e['t'] = since(rk, cell.done[rk][0])
        elif rk in cell.error:
            e['end'] = 'error'
            e['t'] = since(rk, cell.error[rk][0])
            e['message'] = cell.error[rk][1]
            e['culprit_ok'] = culprit_ok(cell, rk, cell.error[rk][1])
        elif rk in cell.exited:
            e['end'] = 'stopped' if rk in live else 'exited'
            e['t'] = since(rk, cell.exited[rk])
        elif rk not in cell.rank_pid and cell.c['mode'] != 'hand' and cell.procs[0].poll() is not None:
            e['end'] = 'never started'  # ringfoldrun gave up before starting it
        else:
            e['end'] = 'hung' if rk in live or cell.fault == 'kill-launcher' else 'victim'
        wrong += cell.wrong.get(rk, 0) if rk not in cell.done else 0
        per[rk] = e
    for rk in live:
        e = per[rk]
        if e['end'] == 'hung':
            hung.append(rk)
        if cell.expect == 'error' and e['end'] == 'error':
            if e['t'] > bound:
                late.append(rk)
            if not e['culprit_ok']:
                bad_culprit.append(rk)
        if cell.expect == 'error' and e['end'] == 'stopped' and e['t'] > bound:
            late.append(rk)
    if cell.fault == 'kill-launcher':
        for rk in range(NRANKS):
            if per[rk]['end'] == 'hung':
                hung.append(rk)
            elif per[rk].get('t', 0) > bound:
                late.append(rk)
    ok = not hung and not wrong and not late and not bad_culprit
    if cell.expect == 'finish':
        ok = ok and all(per[rk]['end'] == 'done' for rk in range(NRANKS))
        r['outcome'] = 'correct data' if all(per[rk]['end'] == 'done' for rk in range(NRANKS)) else 'error'
    elif cell.expect == 'error':
        ok = ok and all(per[rk]['end'] in ('error', 'stopped', 'never started') for rk in live)
        if any(per[rk]['end'] == 'error' for rk in live):
            r['outcome'] = 'error'
        elif live and all(per[rk]['end'] in ('stopped', 'never started') for rk in live) and cell.launcher_lines:
            # ringfoldrun saw the failure first and stopped every rank: its message must name it
            r['outcome'] = 'stopped by ringfoldrun'
            if not culprit_ok(cell, -1, ' '.join(cell.launcher_lines)):
                bad_culprit.append('launcher')
                ok = False
        else:
            ok = False
            r['outcome'] = 'correct data' if all(per[rk]['end'] == 'done' for rk in live) else 'no error'
    elif cell.expect == 'gone':
        r['outcome'] = 'every rank stopped'
    else:
        r['outcome'] = 'correct data' if all(per[rk]['end'] == 'done' for rk in live) else 'error'
    if not ok and cell.fault in KNOWN and not hung and not wrong and not late and bad_culprit \
            and set(bad_culprit) <= KNOWN[cell.fault][0]:
        r['known'] = KNOWN[cell.fault][1]
    if cell.t_fault:
        r['clean_seconds'] = round(cell.t_clean - cell.t_fault, 2)  # fault to nothing left running
    r['launcher'] = cell.launcher_lines[:3]
    r['live'] = live
    if cell.fault.startswith('timeline-'):
        r['timeline_warning'] = next((l.split('] ', 1)[-1] for l in cell.log if 'events are being dropped' in l), None)
    r.update(ranks=per, hung=hung, wrong_bits=wrong, late=late, bad_culprit=bad_culprit, bound=bound,
             goal_met=ok, seconds=round(cell.t_end - cell.t_start, 1))
    if cell.t_fault_end and cell.t_fault:
        r['fault_seconds'] = round(cell.t_fault_end - cell.t_fault, 2)
    done_t = [cell.done[k][0] for k in cell.done]
    ready_t = list(cell.ready.values())
    if done_t and ready_t and len(done_t) == NRANKS:
        r['run_seconds'] = round(max(done_t) - max(ready_t), 2)
    return r


def run_cell(spec, ctx):
    cl = ctx['cluster']
    n = {'netns': 4, 'netns2': 2, 'host': 1}[spec['placement']]
    cl.up(n, sshd=spec['mode'] != 'hand' and n > 1)
    ctx['port'] += 1
    shm_before = shm_entries()
    cell = Cell(spec, ctx)
    try:
        try:
            cell.run()
        except (NotRun, RuntimeError, subprocess.CalledProcessError) as e:
            cell.finished = True
            cell.cleanup()
            cl.down()
            return dict(spec, what=FAULTS[spec['fault']][0], outcome='not run', reason=str(e), goal_met=None)
        res = evaluate(cell)
        left = cell.leftovers()
    finally:
        cell.finished = True
        cell.cleanup()
    time.sleep(0.3)
    new_shm = sorted(shm_entries() - shm_before)
    cl.down()
    stray_ns = [ns for ns in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout.split()
                if ns.startswith(P)]
    emus = netdelay_pids()
    res['leftovers'] = left + ['/dev/shm/' + s for s in new_shm] + ['netns ' + s for s in stray_ns] + \
        ['rf_netdelay(%d)' % p for p in emus]
    if res['leftovers']:
        res['goal_met'] = False
    res['log'] = cell.log[-60:]
    return res


# ---- report -------------------------------------------------------------------------------

def fmt_times(r):
    out = []
    for rk in range(NRANKS):
        e = r['ranks'][rk]
        end = e['end']
        if end == 'error':
            out.append('%d: %.2f%s' % (rk, e['t'], '' if e.get('culprit_ok') else '?'))
        elif end == 'stopped':
            out.append('%d: L%.2f' % (rk, e['t']))
        elif end == 'done':
            out.append('%d: ok' % rk)
        elif end == 'hung':
            out.append('%d: HUNG' % rk)
        elif end == 'never started':
            out.append('%d: n/s' % rk)
        elif end == 'victim':
            out.append('%d: -' % rk)
        else:
            out.append('%d: x%.2f' % (rk, e.get('t', 0)))
    return ' '.join(out)


def first_message(r):
    for rk in range(NRANKS):
        e = r['ranks'].get(rk, {})
        if e.get('message'):
            return 'rank %d: %s' % (rk, e['message'][:220].replace('|', '/'))
    if r.get('launcher'):
        return ' / '.join(r['launcher'])[:220].replace('|', '/')
    return ''


def table(results):
    head = ['| # | fault | placement | start | op | size | backend | outcome | per rank: s from fault to error '
            '(L: stopped by the launcher, ok: correct data) | hung | wrong bits | leftovers (s from fault to none running) | goal | first message |',
            '|---:|---|---|---|---|---:|---|---|---|---|---:|---|---|---|']
    rows = []
    for r in results:
        fault = r['fault'] + (' %d ms' % r['delay_ms'] if 'delay_ms' in r else '')
        if r.get('outcome') in ('not run', 'not reached'):
            rows.append('| %d | %s | %s | %s | %s | %s | %s | %s: %s | | | | | | |' % (
                r['id'], fault, r['placement'], r['mode'], r['op'], human(r['size']), r['backend'], r['outcome'],
                r['reason']))
            continue
        extra = ''
        if r.get('run_seconds') is not None:
            extra = ' (%.1f s run)' % r['run_seconds']
        rows.append('| %d | %s | %s | %s | %s | %s | %s | %s%s | %s | %s | %d | %s | %s | %s |' % (
            r['id'], fault, r['placement'], r['mode'], r['op'], human(r['size']), r['backend'], r['outcome'],
            extra, fmt_times(r), ','.join(map(str, r['hung'])) or '0', r['wrong_bits'],
            (', '.join(r['leftovers'][:4]) or 'none') + (
                ' (%.1f s)' % r['clean_seconds'] if r.get('clean_seconds') is not None else ''), 'met' if r['goal_met'] else (
                'missed (known: %s)' % r['known'] if r.get('known') else '**missed**'), first_message(r)))
    return '\n'.join(head + rows)


def by_fault(results):
    """One row per fault: its cells, how many met the goal, and the worst figures."""
    rows = ['| fault | what | cells | goal met | outcomes | slowest error on a live rank | hung ranks | wrong bits '
            '| cells with leftovers |', '|---|---|---:|---:|---|---:|---:|---:|---:|']
    for fault, spec in FAULTS.items():
        rs = [r for r in results if r['fault'] == fault]
        if not rs:
            continue
        ran = [r for r in rs if r.get('outcome') not in ('not run', 'not reached')]
        outcomes = {}
        for r in rs:
            outcomes[r['outcome']] = outcomes.get(r['outcome'], 0) + 1
        times = [e['t'] for r in ran for rk, e in r['ranks'].items()
                 if e['end'] in ('error', 'stopped') and (fault == 'kill-launcher' or rk in r.get('live', []))]
        rows.append('| %s | %s | %d | %d | %s | %s | %d | %d | %d |' % (
            fault, spec[0], len(rs), sum(1 for r in ran if r['goal_met']),
            ', '.join('%s %d' % kv for kv in sorted(outcomes.items())),
            '%.2f s' % max(times) if times else '-', sum(len(r['hung']) for r in ran),
            sum(r['wrong_bits'] for r in ran), sum(1 for r in ran if r['leftovers'])))
    return '\n'.join(rows)


def summary(results):
    ran = [r for r in results if r.get('outcome') not in ('not run', 'not reached')]
    met = sum(1 for r in ran if r['goal_met'])
    hung = sum(len(r['hung']) for r in ran)
    wrong = sum(r['wrong_bits'] for r in ran)
    late = sum(len(r['late']) for r in ran)
    culprit = sum(len(r['bad_culprit']) for r in ran)
    left = sum(1 for r in ran if r['leftovers'])
    worst = max([e['t'] for r in ran if r['fault'] != 'kill-launcher' for e in r['ranks'].values()
                 if e['end'] == 'error'] or [0])
    known = sum(1 for r in ran if not r['goal_met'] and r.get('known'))
    return ('%d cells run (%d not run or fault not reached): goal met in %d (missed: %d known, %d new); hung ranks %d; wrong bits %d; errors past the bound %d; '
            'wrong culprit %d; cells with leftovers %d; slowest error %.2f s after its fault' % (
                len(ran), len(results) - len(ran), met, known, len(ran) - met - known, hung, wrong, late, culprit, left, worst))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--reduced', action='store_true', help='one cell per fault and backend (CI)')
    ap.add_argument('--rows', help='cell ids or fault names, comma-separated')
    ap.add_argument('--list', action='store_true', help='print the cells and exit')
    ap.add_argument('--out', help='write the Markdown report here')
    ap.add_argument('--json', help='write every cell\'s record here')
    ap.add_argument('--cap', type=float, default=20, help='seconds past the bound before a rank counts as hung')
    ap.add_argument('--lock-wait', type=float, default=LOCK_WAIT_S,
                    help='seconds to wait for another run of the matrix on this machine (they share namespaces)')
    ap.add_argument('--from-json', help='print the report of an earlier run\'s --json file (runs nothing)')
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        for r in results:
            r['ranks'] = {int(k): v for k, v in r.get('ranks', {}).items()}
            if 'live' not in r:
                victim = 0 if r['fault'] == 'kill-rank0' else VICTIM
                gone = r['fault'] == 'stop' or (r['fault'].startswith('kill-') and r['fault'] != 'kill-launcher')
                r['live'] = [k for k in range(NRANKS) if not (gone and k == victim)]
        text = '%s\n\n%s\n\n%s\n' % (summary(results), by_fault(results), table(results))
        print(text)
        if args.out:
            with open(args.out, 'w') as f:
                f.write(text)
        return 0
    cells = reduced_cells() if args.reduced else build_cells()
    if args.rows:
        want = args.rows.split(',')
        cells = [c for c in cells if str(c['id']) in want or c['fault'] in want]
    if args.list:
        for c in cells:
            print('%3d %-15s %-7s %-6s %-10s %-7s %-5s%s' % (c['id'], c['fault'], c['placement'], c['mode'], c['op'],
                                                            human(c['size']), c['backend'],
                                                            ' reduced' if c['reduced'] else ''))
        return 0
    if os.geteuid() != 0:
        print('matrix.py: skipped: needs root (network namespaces)')
        return 77
    for tool in ('iptables', 'ssh-keygen', 'ip'):
        if shutil.which(tool) is None:
            print('matrix.py: skipped: %s not found' % tool)
            return 77
    for f in ('libringfold.so', 'ringfoldrun'):
        if not os.path.exists(os.path.join(BUILD, f)):
            print('matrix.py: skipped: %s not built in %s' % (f, BUILD))
            return 77
    need_sshd = any(c['mode'] != 'hand' and c['placement'] != 'host' for c in cells)
    if need_sshd and not os.path.exists('/usr/sbin/sshd'):
        print('matrix.py: skipped: /usr/sbin/sshd not found (apt-get install openssh-server)')
        return 77

    def venv(req):
        r = subprocess.run([os.path.join(ROOT, 'scripts', 'pyenv.sh'),
                            os.path.join(ROOT, 'bindings', 'python', req)], capture_output=True, text=True)
        return os.path.join(r.stdout.strip(), 'bin', 'python') if r.returncode == 0 else None
    py_plain = venv('requirements-plain.txt')
    py_torch = venv('requirements-test.txt') if any(c['mode'] == 'torch' for c in cells) else None
    if py_plain is None or (py_torch is None and any(c['mode'] == 'torch' for c in cells)):
        print('matrix.py: skipped: the Python venvs of scripts/pyenv.sh are not available')
        return 77
    # One matrix at a time on a machine: every run uses the same namespaces (prefix P) and tears
    # down whatever it finds under them, so a second run would kill the first one's ranks.
    lock = open('/run/rf_fault_matrix_%s.lock' % P, 'a+')
    deadline = time.time() + args.lock_wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.time() > deadline:
                print('matrix.py: another fault matrix has held %s for over %.0f s (namespaces %s*); stop it '
                      'or wait' % (lock.name, args.lock_wait, P))
                return 1
            if deadline - time.time() > args.lock_wait - 1:
                print('matrix.py: waiting for another fault matrix on this machine to finish (it holds %s)'
                      % lock.name, flush=True)
            time.sleep(1)
    os.environ.setdefault('RF_NETDELAY', os.path.join(BUILD, 'tests', 'netns', 'rf_netdelay'))
    os.environ['RF_NETNS_OWNER_PID'] = str(os.getpid())
    os.environ['NETNS_DELAY_DIR'] = '/run/rf_netdelay_%s' % P
    work = tempfile.mkdtemp(prefix='rfm-matrix-')
    keydir = os.path.join(work, 'keys')
    tiny = os.path.join(work, 'tiny')
    os.makedirs(tiny)
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=16k', 'rfm-tiny', tiny], check=True)
    make_keys(keydir)
    # If this driver is killed (ctest's timeout), a reaper tears down what it made.
    reaper = subprocess.Popen(
        ['bash', '-c', 'source "$1/scripts/netns_lib.sh"; while kill -0 "$2" 2>/dev/null; do sleep 0.5; done; '
         'netns_down "$3" "h[0-9]+"; umount "$4" 2>/dev/null; rm -rf -- "$5"', 'reaper', ROOT, str(os.getpid()),
         P, tiny, work], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    ctx = dict(cluster=Cluster(keydir), keydir=keydir, tiny=tiny, port=29700 + os.getpid() % 200,
               py_plain=py_plain, py_torch=py_torch, cap=args.cap)
    results = []
    t0 = time.time()

    def stop(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        for c in cells:
            # the timeline cells' disk: 16 KiB, full at start or 4 KiB free
            fill = {'timeline-full': 16384, 'timeline-fills': 12288}.get(c['fault'], 0)
            subprocess.run(['bash', '-c', 'rm -f %s/*; head -c %d /dev/zero > %s/fill 2>/dev/null; true'
                            % (tiny, fill, tiny)])
            r = run_cell(c, ctx)
            results.append(r)
            if args.json:  # after every cell, so that an interrupted run keeps what it measured
                with open(args.json, 'w') as f:
                    json.dump(results, f, indent=1, default=str)
            if r.get('outcome') in ('not run', 'not reached'):
                print('%3d %-14s %s: %s' % (c['id'], c['fault'], r['outcome'], r['reason']), flush=True)
            else:
                print('%3d %-14s %-6s %-5s %-9s %-7s %-4s %-12s %s hung=%s wrong=%d left=%s %s  %s' % (
                    c['id'], c['fault'], c['placement'], c['mode'], c['op'], human(c['size']), c['backend'],
                    r['outcome'], fmt_times(r), r['hung'] or 0, r['wrong_bits'], len(r['leftovers']),
                    'met' if r['goal_met'] else ('MISSED (known)' if r.get('known') else 'MISSED'),
                    first_message(r)[:160]), flush=True)
    except KeyboardInterrupt:
        print('matrix.py: interrupted after %d cells' % len(results), flush=True)
    finally:
        ctx['cluster'].down()
        subprocess.run(['umount', tiny], check=False)
        shutil.rmtree(work, ignore_errors=True)
        reaper.kill()
        reaper.wait()
    elapsed = time.time() - t0
    text = '%s\n\n%s\n\n%s\n\n%d cells in %.0f s (%s form). Command: `sudo tests/faults/matrix.py%s`.\n' % (
        summary(results), by_fault(results), table(results), len(results), elapsed,
        'reduced' if args.reduced else 'full', ' --reduced' if args.reduced else '')
    print()
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1, default=str)
    ran = [r for r in results if r.get('outcome') not in ('not run', 'not reached')]
    return 0 if ran and all(r['goal_met'] or (r.get('known') and not r['leftovers']) for r in ran) \
        and len(results) == len(cells) else 1


if __name__ == '__main__':
    sys.exit(main())
