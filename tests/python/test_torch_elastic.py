"""Elastic training with ringfold.torch.elastic (Horovod's hvd.elastic API) under ringfoldrun's
elastic mode, and torchrun's own elastic restarts. Not a rank itself: every test starts its own
jobs of elastic_worker.py and checks what they did (exit codes, the launcher's messages, the
workers' logs, the final weights against a replay). Run by tests/python/run.sh elastic; skipped
when it finds itself inside a launcher's rank.

Wiring: ringfoldrun is $RINGFOLDRUN when set, else $BUILD_DIR/ringfoldrun (the CMake build's,
BUILD_DIR defaulting to <repo>/build); the workers import ringfold from PYTHONPATH (run.sh points
it at the installed wheel) and run under this interpreter. Tests that need the elastic flags
skip when that ringfoldrun lacks --host-discovery-script.

Emulated hosts: discovery lists 127.0.0.1, 127.0.0.2, ... -- ringfoldrun treats each as a host of
its own (all local), so blacklisting the host of a killed worker leaves the others usable.
Every job runs in its own session under a hard deadline (killed, and the test failed, past it).
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

if any(os.environ.get(v) for v in ('RINGFOLD_RANK', 'HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK')) or \
        os.environ.get('TORCHELASTIC_RUN_ID'):
    pytest.skip('starts its own ringfoldrun/torchrun jobs: run it outside a launcher '
                '(tests/python/run.sh elastic)', allow_module_level=True)

pytest.importorskip('torch')

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import elastic_worker  # noqa: E402  (its replays run here: no second torch import per test)
from ports import free_port_pair  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, 'elastic_worker.py')
BUILD = os.environ.get('BUILD_DIR') or os.path.join(ROOT, 'build')
RINGFOLDRUN = os.environ.get('RINGFOLDRUN') or os.path.join(BUILD, 'ringfoldrun')
JOB_DEADLINE = 150          # seconds; a job that takes longer is killed and fails its test
PEER_TIMEOUT = 10           # RINGFOLD_TIMEOUT of the elastic jobs (the SIGSTOP test sets less)


def _has_elastic_flags():
    if not os.access(RINGFOLDRUN, os.X_OK):
        return False
    try:
        out = subprocess.run([RINGFOLDRUN, '--help'], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return '--host-discovery-script' in out.stdout + out.stderr


needs_ringfoldrun = pytest.mark.skipif(not os.access(RINGFOLDRUN, os.X_OK),
                                       reason='no ringfoldrun at %s (set RINGFOLDRUN or BUILD_DIR)' % RINGFOLDRUN)
needs_elastic = pytest.mark.skipif(not _has_elastic_flags(),
                                   reason='%s has no elastic mode (--host-discovery-script)' % RINGFOLDRUN)


class Job:
    def __init__(self, proc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = proc.returncode, out, err, seconds

    def transcript(self):
        return 'exit %s after %.1f s\n--- stdout ---\n%s\n--- stderr ---\n%s' % (
            self.rc, self.seconds, self.out[-6000:], self.err[-6000:])


def run_job(argv, env=None, deadline=JOB_DEADLINE, during=None):
    """Runs argv (in `env`: the test's environment updated, None values removed) in its own
    session; `during(proc)` (optional) runs while it does. Kills the whole
    session past `deadline` and fails the test."""
    start = time.monotonic()
    full_env = dict(os.environ, RINGFOLD_STALL_CHECK_TIME='30')
    for k, v in (env or {}).items():        # None: removed
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full_env, start_new_session=True)
        try:
            if during is not None:
                during(proc)
            proc.wait(timeout=max(1.0, deadline - (time.monotonic() - start)))
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0)
            err.seek(0)
            pytest.fail('job did not finish within %d s: %s\n--- stdout ---\n%s\n--- stderr ---\n%s'
                        % (deadline, ' '.join(argv), out.read()[-6000:], err.read()[-6000:]))
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # strays of a job that ended
            except ProcessLookupError:
                pass
        out.seek(0)
        err.seek(0)
        return Job(proc, out.read(), err.read(), time.monotonic() - start)


def parse_logs(directory):
    """{worker id: [(event, {field: value})]} from the workers' log files."""
    logs = {}
    for name in sorted(os.listdir(directory)):
        if not name.startswith('log.'):
            continue
        events = []
        with open(os.path.join(directory, name)) as f:
            for line in f:
                event, *fields = line.split()
                events.append((event, dict(kv.split('=', 1) for kv in fields)))
        logs[name[len('log.'):]] = events
    return logs


def events(logs, kind, **match):
    """[(worker, fields)] of every `kind` event whose fields equal `match` (as text)."""
    return [(w, f) for w, evs in logs.items() for e, f in evs
            if e == kind and all(f.get(k) == str(v) for k, v in match.items())]


class Elastic:
    """One elastic job: its directory, discovery file and script."""

    def __init__(self, tmp_path, hosts):
        self.dir = str(tmp_path)
        self.hosts_file = os.path.join(self.dir, 'hosts')
        self.set_hosts(hosts)
        self.script = os.path.join(self.dir, 'discover.sh')
        with open(self.script, 'w') as f:
            f.write('#!/bin/sh\ncat %s\n' % self.hosts_file)
        os.chmod(self.script, 0o755)

    def set_hosts(self, hosts):
        with open(self.hosts_file + '.tmp', 'w') as f:
            f.write(''.join(h + '\n' for h in hosts))
        os.replace(self.hosts_file + '.tmp', self.hosts_file)

    def run(self, np_, flags=(), kill='', mark='', timeout=PEER_TIMEOUT, epochs=2, during=None,
            deadline=JOB_DEADLINE):
        argv = [RINGFOLDRUN, '-np', str(np_), '--host-discovery-script', self.script, *flags,
                '-x', 'RINGFOLD_TIMEOUT=%s' % timeout, '-x', 'ELASTIC_KILL=%s' % kill,
                '-x', 'ELASTIC_MARK=%s' % mark, '-x', 'ELASTIC_EPOCHS=%d' % epochs,
                sys.executable, WORKER, 'train', self.dir]
        return run_job(argv, during=during, deadline=deadline)

    def logs(self):
        return parse_logs(self.dir)

    def replay(self):
        """The final weights equal a replay, in this process, from the last incarnation's resume
        point at its size (elastic_worker.replay asserts it)."""
        elastic_worker.replay(self.dir, epochs=2)


def synced(logs, inc):
    """The sync events of incarnation `inc`, by rank (the first sync of each worker there)."""
    by_rank = {}
    for w, f in events(logs, 'sync', inc=inc):
        by_rank.setdefault(int(f['rank']), (w, f))
    return by_rank


def check_resumed(job, logs, inc, size, committed_by=None):
    """Incarnation `inc` synced `size` ranks to one state, the state rank 0 had committed."""
    ranks = synced(logs, inc)
    assert sorted(ranks) == list(range(size)), (ranks, job.transcript())
    hashes = {f['hash'] for _, f in ranks.values()}
    steps = {f['step'] for _, f in ranks.values()}
    assert len(hashes) == 1 and len(steps) == 1, (ranks, job.transcript())
    root, root_fields = ranks[0]
    commits = [f for w, f in events(logs, 'commit', step=root_fields['step']) if w == root]
    assert any(f['hash'] == root_fields['hash'] for f in commits), \
        'rank 0 of incarnation %d resumed from a state it never committed: %s' % (inc, root_fields)
    return ranks


# ---- without ringfoldrun's elastic mode ---------------------------------------------------------

@needs_ringfoldrun
def test_state_sampler_and_run_at_two_ranks(tmp_path):
    job = run_job([RINGFOLDRUN, '-np', '2', sys.executable, WORKER, 'unit', str(tmp_path)], deadline=120)
    assert job.rc == 0, job.transcript()
    assert 'UNIT OK 0' in job.out and 'UNIT OK 1' in job.out, job.transcript()


def test_rejoin_protocol_against_the_store(tmp_path):
    env = {k: None for k in ('RINGFOLD_STORE_ADDR', 'RINGFOLD_STORE_PORT', 'RINGFOLD_INCARNATION',
                           'HOROVOD_CROSS_RANK', 'HOROVOD_LOCAL_RANK')}
    job = run_job([sys.executable, WORKER, 'protocol', str(tmp_path)], env=env, deadline=60)
    assert job.rc == 0, job.transcript()
    assert 'PROTOCOL OK' in job.out, job.transcript()


def test_process_sets_are_refused_in_elastic_mode(tmp_path):
    env = {k: None for k in ('RINGFOLD_DYNAMIC_PROCESS_SETS', 'HOROVOD_DYNAMIC_PROCESS_SETS')}
    env['RINGFOLD_ELASTIC'] = '1'
    job = run_job([sys.executable, WORKER, 'refuse', str(tmp_path)], env=env, deadline=60)
    assert job.rc == 0, job.transcript()
    assert 'REFUSED static' in job.out and 'REFUSED dynamic' in job.out, job.transcript()


# ---- ringfoldrun --host-discovery-script ---------------------------------------------------------

@needs_elastic
def test_killed_worker_survivors_continue_as_a_replay_from_the_last_commit(tmp_path):
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1', '127.0.0.3:1'])
    job = e.run(3, ['--min-np', '2'], kill='1:2:5')
    assert job.rc == 0, job.transcript()
    assert 'blacklisting host 127.0.0.3' in job.err, job.transcript()
    logs = e.logs()
    assert events(logs, 'suicide', inc=1, rank=2), job.transcript()
    ranks = check_resumed(job, logs, 2, 2)
    # The survivors keep their order: ranks 0 and 1 of incarnation 1 are ranks 0 and 1 of 2.
    first = synced(logs, 1)
    assert [ranks[r][0] for r in (0, 1)] == [first[r][0] for r in (0, 1)]
    assert int(ranks[0][1]['step']) <= 5
    assert len(events(logs, 'done', inc=2, size=2)) == 2, job.transcript()
    e.replay()


@needs_elastic
def test_rank_zero_and_all_of_its_host_killed_the_oldest_survivors_take_over(tmp_path):
    """Both workers of host 127.0.0.1 -- ranks 0 and 1 -- die at once: that host is blacklisted
    (not the other), and the survivors, ranks 2 and 3, become ranks 0 and 1 in that order, rank 0
    holding the state they resume from."""
    e = Elastic(tmp_path, ['127.0.0.1:2', '127.0.0.2:2'])
    job = e.run(4, ['--min-np', '2'], kill='1:0:5,1:1:5')
    assert job.rc == 0, job.transcript()
    assert 'blacklisting host 127.0.0.1' in job.err and 'blacklisting host 127.0.0.2' not in job.err, \
        job.transcript()
    logs = e.logs()
    first = synced(logs, 1)
    ranks = check_resumed(job, logs, 2, 2)
    assert ranks[0][0] == first[2][0] and ranks[1][0] == first[3][0], (first, ranks)
    assert all(w.startswith('127.0.0.2_') for w, _ in ranks.values()), ranks
    assert len(events(logs, 'done', inc=2, size=2)) == 2, job.transcript()
    e.replay()


@needs_elastic
def test_scale_up_every_rank_interrupts_at_the_same_commit_and_the_new_worker_gets_the_weights(tmp_path):
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1'])
    mark = os.path.join(e.dir, 'mark.4')

    def add_host(proc):
        deadline = time.monotonic() + 90
        while not os.path.exists(mark) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        e.set_hosts(['127.0.0.1:1', '127.0.0.2:1', '127.0.0.3:1'])

    job = e.run(2, ['--max-np', '3'], mark='1:4', during=add_host)
    assert job.rc == 0, job.transcript()
    logs = e.logs()
    interrupts = events(logs, 'interrupt', inc=1)
    assert len(interrupts) == 2, (interrupts, job.transcript())
    assert len({f['step'] for _, f in interrupts}) == 1, interrupts
    step = interrupts[0][1]['step']
    ranks = check_resumed(job, logs, 2, 3)
    assert {f['step'] for _, f in ranks.values()} == {step}
    newcomers = [w for w, f in events(logs, 'start', inc=2)]
    assert len(newcomers) == 1 and newcomers[0] in {w for w, _ in ranks.values()}, (newcomers, ranks)
    # The newcomer started from other weights (its own seed) and received rank 0's.
    assert ranks[2][0] == newcomers[0]
    assert len(events(logs, 'done', inc=2, size=3)) == 3, job.transcript()
    e.replay()


@needs_elastic
def test_host_removed_its_worker_leaves_with_status_0(tmp_path):
    """Discovery stops listing 127.0.0.3: every rank interrupts at the same commit, the worker of
    that host finds itself out of the next table and exits 0 (no blacklisting), the others go on
    at 2 ranks."""
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1', '127.0.0.3:1'])
    mark = os.path.join(e.dir, 'mark.4')

    def remove_host(proc):
        deadline = time.monotonic() + 90
        while not os.path.exists(mark) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        e.set_hosts(['127.0.0.1:1', '127.0.0.2:1'])

    job = e.run(3, ['--min-np', '2'], mark='1:4', during=remove_host)
    assert job.rc == 0, job.transcript()
    assert 'blacklisting' not in job.err, job.transcript()
    assert 'is not a member of incarnation 2' in job.err, job.transcript()
    logs = e.logs()
    interrupts = events(logs, 'interrupt', inc=1)
    assert len(interrupts) == 3 and len({f['step'] for _, f in interrupts}) == 1, interrupts
    ranks = check_resumed(job, logs, 2, 2)
    assert not any(w.startswith('127.0.0.3_') for w, _ in ranks.values()), ranks
    assert not events(logs, 'done', inc=1), 'the removed worker finished the training'
    e.replay()


@needs_elastic
def test_stopped_worker_is_caught_by_the_timeout(tmp_path):
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1', '127.0.0.3:1'])
    job = e.run(3, ['--min-np', '2'], kill='1:1:5:STOP', timeout=2)
    assert job.rc == 0, job.transcript()
    assert 'blacklisting host 127.0.0.2' in job.err, job.transcript()
    logs = e.logs()
    check_resumed(job, logs, 2, 2)
    e.replay()


@needs_elastic
def test_below_min_np_fails_clearly_after_the_elastic_timeout(tmp_path):
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1'])
    job = e.run(2, ['--min-np', '2', '--elastic-timeout', '3'], kill='1:1:3')
    assert job.rc == 1, job.transcript()
    assert re.search(r'only 1 workers? left, fewer than --min-np 2', job.err), job.transcript()
    # The survivor, waiting for the next incarnation, raised with the launcher's reason (it has
    # --grace-period to read elastic/failed before ringfoldrun stops it).
    assert 'the job cannot go on: only 1 workers left' in job.out + job.err, job.transcript()


@needs_elastic
def test_more_resets_than_reset_limit_fail_the_job(tmp_path):
    e = Elastic(tmp_path, ['127.0.0.1:1', '127.0.0.2:1', '127.0.0.3:1'])
    job = e.run(3, ['--min-np', '1', '--reset-limit', '1'], kill='1:2:3,2:1:7')
    assert job.rc == 1, job.transcript()
    assert '--reset-limit 1' in job.err, job.transcript()
    logs = e.logs()
    assert synced(logs, 2) and not synced(logs, 3), job.transcript()


# ---- torchrun's own elastic mode ----------------------------------------------------------------

def _torchrun():
    path = os.path.join(os.path.dirname(sys.executable), 'torchrun')
    return path if os.access(path, os.X_OK) else None


@pytest.mark.skipif(_torchrun() is None, reason='no torchrun beside %s' % sys.executable)
def test_torchrun_max_restarts_resumes_a_ringfold_job_from_its_checkpoint(tmp_path):
    """torchrun --nnodes 1:2 --max-restarts 2: rank 1 dies in epoch 2 of the first attempt,
    torchrun restarts both workers, which load the checkpoint of epoch 2 and finish with the
    weights of the same training without a failure (replayed in one process)."""
    port = free_port_pair()
    argv = [_torchrun(), '--nnodes', '1:2', '--nproc-per-node', '2', '--max-restarts', '2',
            '--rdzv-backend', 'c10d', '--rdzv-endpoint', '127.0.0.1:%d' % port,
            '--rdzv-id', 'ringfold-elastic', '--rdzv-conf', 'last_call_timeout=1',
            '--monitor-interval', '0.2', WORKER, 'torchrun', str(tmp_path)]
    job = run_job(argv, env={'TORCHRUN_CRASH': '1', 'RINGFOLD_TIMEOUT': '10'}, deadline=180)
    assert job.rc == 0, job.transcript()
    text = job.out + job.err
    assert 'CRASH rank 1 in epoch 2' in text, job.transcript()
    for rank in (0, 1):
        assert 'ATTEMPT 1 rank %d size 2 from epoch 2' % rank in text, job.transcript()
        assert 'TORCHRUN DONE attempt 1 rank %d' % rank in text, job.transcript()
    elastic_worker.torchrun_replay(str(tmp_path))
