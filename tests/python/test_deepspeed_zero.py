"""DeepSpeed ZeRO on CPU over torch.distributed backend "ringfold", against the same run on "gloo".

Run by `tests/python/run.sh deepspeed` (ctest python_deepspeed) in the venv of
bindings/python/requirements-deepspeed.txt, as ONE pytest process that starts its own 2-rank
jobs of deepspeed_train.py (so it skips when it finds itself inside a ringfoldrun/torchrun rank,
as in run.sh's other modes, and when deepspeed is not installed):

  * gloo under torchrun: every run of deepspeed_train.CONFIGS (ZeRO 1; 2; 2 reducing to
    partition owners with overlap_comm; 2 in bf16; 3), the reference;
  * ringfold under torchrun, under ringfoldrun (with no MASTER_ADDR/MASTER_PORT:
    `import ringfold.torch.distributed` provides torch's variables there) and under DeepSpeed's
    own launcher, the same runs; skipped with the import error while
    `ringfold.torch.distributed` does not import.

Every job runs on 127.0.0.1 only (--master_addr 127.0.0.1, GLOO_SOCKET_IFNAME=lo; ringfold
listens on loopback when its store address is loopback, and ringfoldrun's jobs on one host use
127.0.0.1) and under a timeout that kills the launcher and its ranks; each collective inside is
bounded by the process group's timeout (60 s).

What is compared, per rank and step: the micro-batch loss, bitwise, and a hash of the final fp32
parameters. Bitwise is the right bar at 2 ranks: every reduction DeepSpeed asks for (all_reduce,
reduce_scatter_tensor, reduce) combines exactly two values per element, and a + b rounds the
same in either order (in bf16 too: one rounding of the exact sum), so any correct backend gives
gloo's bits; all-gathers and broadcasts copy. Any other result is a wrong reduction: a bf16
sum rounded twice, an element off by one ulp, a bucket at a wrong offset. (At 3 ranks the sum's
order matters and the bits may differ: docs/deepspeed.md gives the figures.)
"""
import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, 'deepspeed_train.py')
STEPS = 20
RANKS = 2
JOB_TIMEOUT = 120        # one job: 2 ranks, every config; ~20 s on 2 idle cores
BUILD_TIMEOUT = 300      # DeepSpeed's one JIT op on CPU, compiled once per machine (83 s cold here)

if 'RINGFOLD_RANK' in os.environ or 'LOCAL_RANK' in os.environ:
    pytest.skip('starts its own DeepSpeed jobs: run it outside a launcher '
                '(tests/python/run.sh deepspeed)', allow_module_level=True)
if importlib.util.find_spec('deepspeed') is None:
    pytest.skip('deepspeed is not installed here: it lives in the venv of '
                'bindings/python/requirements-deepspeed.txt (tests/python/run.sh deepspeed)',
                allow_module_level=True)

import psutil  # noqa: E402  (a dependency of deepspeed)

from deepspeed_train import CONFIGS  # noqa: E402
from ports import free_port_pair  # noqa: E402


def _env(**extra):
    env = dict(os.environ)
    env.update(DS_ACCELERATOR='cpu', GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PYTHONUNBUFFERED='1')
    env.update(extra)
    return env


@pytest.fixture(scope='module')
def shm_op():
    """DeepSpeed's TorchBackend JIT-builds its shared-memory op (used only by inference
    all_reduce) in every process on CPU; build it once here, in one process, so that the jobs'
    timeouts measure training, not g++."""
    code = ('from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder\n'
            'ShareMemCommBuilder().load(verbose=False)\n')
    r = subprocess.run([sys.executable, '-c', code], env=_env(), capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT)
    assert r.returncode == 0, 'building deepspeed_shm_comm failed:\n' + r.stdout + r.stderr


DS_SHM_GLOB = '/dev/shm/deepspeed_allreduce_buffer_*'


def _run_job(launcher, backend, tmp_path_factory):
    out = tmp_path_factory.mktemp('%s-%s' % (launcher, backend))
    driver = [DRIVER, '--backend', backend, '--configs', ','.join(CONFIGS),
              '--steps', str(STEPS), '--out', str(out)]
    if launcher == 'torchrun':
        port = free_port_pair()
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1',
               '--nproc_per_node', str(RANKS), '--master_addr', '127.0.0.1',
               '--master_port', str(port), '--max_restarts', '0', *driver]
        env = _env()
    elif launcher == 'deepspeed':
        # DeepSpeed's own launcher (the `deepspeed` command) on this host, which sets torch's
        # variables itself; --no_local_rank: the driver takes LOCAL_RANK from the environment.
        port = free_port_pair()
        cmd = [sys.executable, '-m', 'deepspeed.launcher.runner', '--num_gpus', str(RANKS),
               '--no_local_rank', '--master_addr', '127.0.0.1', '--master_port', str(port),
               *driver]
        env = _env()
    else:
        # Unchanged user code under ringfoldrun: the backend finds torch's variables itself.
        cmd = [sys.executable, '-m', 'ringfold._run', '-np', str(RANKS), sys.executable, *driver]
        env = {k: v for k, v in _env().items() if k not in ('MASTER_ADDR', 'MASTER_PORT')}
    shm_before = set(glob.glob(DS_SHM_GLOB))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        log, _ = proc.communicate(timeout=JOB_TIMEOUT)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # The launcher and every process under it (torchrun starts its ranks in new sessions,
        # so a process-group kill would miss them), then what they had written.
        tree = psutil.Process(proc.pid)
        for p in [tree] + tree.children(recursive=True):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        log, _ = proc.communicate(timeout=30)
        log, rc = '%s\nTIMEOUT: killed after %d s' % (log, JOB_TIMEOUT), None
    finally:
        # DeepSpeed's shared-memory op maps a 66 MiB segment per rank and never unlinks it:
        # remove this job's, or every run leaves them in /dev/shm (that is, in memory).
        for path in set(glob.glob(DS_SHM_GLOB)) - shm_before:
            try:
                os.unlink(path)
            except OSError:
                pass
    ranks = []
    for rank in range(RANKS):
        path = os.path.join(out, 'rank%d.json' % rank)
        ranks.append(json.load(open(path)) if os.path.exists(path) else None)
    return {'rc': rc, 'log': log, 'ranks': ranks, 'what': '%s under %s' % (backend, launcher)}


def _record(job, rank, config):
    """The rank's record of a config's run, failing with the job's own words if it has none."""
    data = job['ranks'][rank]
    rec = data and data['configs'].get(config)
    if rec is None or 'error' in rec:
        why = rec['error'] if rec else 'no result (rc %s)' % job['rc']
        pytest.fail('%s, config %s, rank %d: %s\n--- job log tail ---\n%s'
                    % (job['what'], config, rank, why, job['log'][-6000:]))
    return rec


@pytest.fixture(scope='module')
def gloo(shm_op, tmp_path_factory):
    return _run_job('torchrun', 'gloo', tmp_path_factory)


@pytest.fixture(scope='module', params=['torchrun', 'ringfoldrun', 'deepspeed'])
def ringfold(request, shm_op, tmp_path_factory):
    r = subprocess.run([sys.executable, '-c', 'import ringfold.torch.distributed'], env=_env(),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip('backend "ringfold" unavailable: `import ringfold.torch.distributed` fails: '
                    + (r.stderr.strip().splitlines() or ['?'])[-1])
    return _run_job(request.param, 'ringfold', tmp_path_factory)


def _losses(rec):
    return [float.fromhex(h) for h in rec['loss']]


@pytest.mark.parametrize('config', CONFIGS)
def test_gloo_reference_trains(gloo, config):
    """The reference itself must be sound, or matching it proves nothing: it ran on gloo, both
    ranks end with the same parameters, and the loss falls (the targets are a fixed function of
    the inputs plus 1% noise, so 20 Adam steps cut it by far more than half)."""
    assert gloo['ranks'][0] and gloo['ranks'][0]['backend'] == 'gloo', gloo['log'][-3000:]
    recs = [_record(gloo, r, config) for r in range(RANKS)]
    assert len({rec['params_sha256'] for rec in recs}) == 1, 'ranks ended with different params'
    for rec in recs:
        loss = _losses(rec)
        assert len(loss) == STEPS
        assert sum(loss[-5:]) < 0.5 * sum(loss[:5]), loss


@pytest.mark.parametrize('config', CONFIGS)
def test_ringfold_matches_gloo_bitwise(gloo, ringfold, config):
    head = ringfold['ranks'][0]
    assert head and head['backend'] == 'ringfold', ringfold['log'][-3000:]
    assert head['process_group'] == 'ProcessGroupRingfold', head['process_group']
    for rank in range(RANKS):
        ref, got = _record(gloo, rank, config), _record(ringfold, rank, config)
        diff = [(t, float.fromhex(a), float.fromhex(b))
                for t, (a, b) in enumerate(zip(ref['loss'], got['loss'])) if a != b]
        assert not diff and len(got['loss']) == STEPS, \
            'rank %d: loss differs from gloo at (step, gloo, ringfold) %s' % (rank, diff[:5])
        assert got['params_sha256'] == ref['params_sha256'], \
            'rank %d: final parameters differ from gloo' % rank
