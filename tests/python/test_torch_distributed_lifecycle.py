"""Lifetimes of the "ringfold" torch.distributed backend: the process group's timeout bounds a
wait, destroy_process_group() then init_process_group() again in the same process, "ringfold"
as a group of a gloo world, and an engine that ringfold.torch started first. Run with
test_torch_distributed.py by tests/python/run.sh c10d* NP; skipped elsewhere."""
import os
import time
from datetime import timedelta

import pytest

if os.environ.get('RINGFOLD_TEST_C10D') != '1':
    pytest.skip('torch.distributed backend tests: run by tests/python/run.sh c10d NP', allow_module_level=True)

torch = pytest.importorskip('torch')
import torch.distributed as dist  # noqa: E402

import ringfold.torch.distributed as rfd  # noqa: E402
from ringfold import _lib  # noqa: E402


@pytest.fixture(scope='session', autouse=True)
def engine():
    """Replaces conftest's: these tests start and stop everything themselves."""
    yield


def engine_running():
    return bool(_lib.lib().horovod_is_initialized())


def check_sum(group=None):
    x = torch.full((5,), float(dist.get_rank() + 1))
    dist.all_reduce(x, group=group)
    n = dist.get_world_size(group)
    return torch.equal(x, torch.full((5,), n * (n + 1) / 2))


def test_timeout_bounds_every_wait():
    dist.init_process_group('ringfold', timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    short = dist.new_group(timeout=timedelta(seconds=2))        # all ranks: the engine's global set
    other = dist.new_group(timeout=timedelta(seconds=2))
    elapsed = elapsed_future = None
    if rank == 0:
        # rank 0 alone calls these: its waits must give up after the group's 2 s
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError, match='timeout of 2 s'):
            dist.all_reduce(torch.ones(3), group=short)
        elapsed = time.monotonic() - start
        start = time.monotonic()
        fut = dist.all_reduce(torch.ones(3), group=other, async_op=True).get_future()
        with pytest.raises(dist.DistBackendError, match='timeout'):
            fut.wait()
        elapsed_future = time.monotonic() - start
    dist.barrier()                         # the world group is unaffected
    ok = check_sum()
    dist.destroy_process_group()
    assert ok
    if rank == 0:
        assert 1.5 < elapsed < 8 and 1.5 < elapsed_future < 8, (elapsed, elapsed_future)


def test_destroy_then_init_again():
    for round_ in range(2):
        dist.init_process_group('ringfold', timeout=timedelta(seconds=60))
        sub = dist.new_group([0, 1])
        ok = check_sum() and (dist.get_rank() > 1 or check_sum(sub))
        assert engine_running() and ok, 'round %d' % round_
        dist.destroy_process_group()
        assert not engine_running(), 'destroy_process_group left the engine running'


def test_local_synchronization_is_refused():
    dist.init_process_group('ringfold', timeout=timedelta(seconds=60))
    size, rank = dist.get_world_size(), dist.get_rank()
    if size > 2 and rank in (0, 1):        # only members would call it: refused, not hung
        with pytest.raises(ValueError, match='use_local_synchronization'):
            dist.new_group([0, 1], use_local_synchronization=True)
    whole = dist.new_group(list(range(size)), use_local_synchronization=True)   # the global set
    ok = check_sum(whole)
    dist.destroy_process_group()           # (also resets torch's group counter, which the
    assert ok                              # refused call advanced on ranks 0 and 1 only)


def test_ringfold_group_in_a_gloo_world():
    dist.init_process_group('gloo', timeout=timedelta(seconds=60))
    rf = dist.new_group(backend='ringfold')
    ok = check_sum(rf)
    outs = [torch.empty(2) for _ in range(dist.get_world_size())]
    dist.all_gather(outs, torch.full((2,), float(dist.get_rank())), group=rf)
    if dist.get_rank() == 0:      # a strict subset of a gloo world cannot be a ringfold group
        with pytest.raises(NotImplementedError, match='span'):
            dist.new_group([0], backend='ringfold', use_local_synchronization=True)
    assert isinstance(rf, rfd.ProcessGroupRingfold) and ok
    assert [o[0].item() for o in outs] == [float(r) for r in range(dist.get_world_size())]
    dist.destroy_process_group()
    assert not engine_running()


def test_engine_started_by_ringfold_torch_is_shared():
    import ringfold.torch as hvd
    env = os.environ
    plain = env.get('RINGFOLD_STORE_SERVER') != 'external' and env.get('TORCHELASTIC_USE_AGENT_STORE') != 'True'
    added = {}
    if plain:
        # hvd.init() under bare env:// variables hosts ringfold's store on MASTER_PORT, where
        # torch's store of the earlier tests still listens, and needs LOCAL_RANK (one host here)
        for name, value in (('RINGFOLD_STORE_PORT', str(int(env['MASTER_PORT']) + 2)),
                            ('LOCAL_RANK', env['RANK']), ('LOCAL_WORLD_SIZE', env['WORLD_SIZE'])):
            if not env.get(name):
                env[name] = added[name] = value
    try:
        hvd.init(process_sets='dynamic')
    finally:
        for name in added:
            env.pop(name, None)
    dist.init_process_group('ringfold', timeout=timedelta(seconds=60))
    ok = check_sum()
    sub = dist.new_group([0, 1])
    ok = ok and (dist.get_rank() > 1 or check_sum(sub))
    n = dist.get_world_size()
    dist.destroy_process_group()
    still = engine_running()
    total = hvd.allreduce(torch.ones(2), op=hvd.Sum, name='after_c10d')
    hvd.shutdown()
    assert ok and still and torch.equal(total, torch.full((2,), float(n)))


def test_naming_the_backend_is_enough():
    """The wheel's torch.distributed.backends entry point: a fresh process that never imports
    ringfold gets the backend by naming it (one rank of its own, on a port of its own)."""
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    # Only what locates Python and the package: a launcher's variables (torchrun's agent store,
    # ringfoldrun's rank) would make this process a member of the surrounding job.
    keep = ('PATH', 'PYTHONPATH', 'HOME', 'LD_LIBRARY_PATH', 'TMPDIR', 'LANG')
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0', LOCAL_WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(port))
    code = ("import sys, torch, torch.distributed as dist\n"
            "dist.init_process_group('ringfold')\n"
            "t = torch.ones(3); dist.all_reduce(t)\n"
            "print(dist.get_backend(), t.tolist())\n"
            "dist.destroy_process_group()\n")
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ['ringfold', '[1.0,', '1.0,', '1.0]'], out.stdout
