"""A rank of a "ringfold" torch.distributed job is killed: every Work pending on the other ranks
(synchronous and asynchronous calls, futures, world group and subgroup) fails within the
process group's timeout instead of hanging, and destroy_process_group() still returns. Run by
tests/python/run.sh c10d-death (3 ranks with plain env:// variables; the last rank SIGKILLs
itself, which run.sh expects); skipped elsewhere."""
import os
import signal
import time
from datetime import timedelta

import pytest

if os.environ.get('RINGFOLD_TEST_C10D_DEATH') != '1':
    pytest.skip('killed-rank test: run by tests/python/run.sh c10d-death', allow_module_level=True)

torch = pytest.importorskip('torch')
import torch.distributed as dist  # noqa: E402

import ringfold.torch.distributed  # noqa: E402,F401

TIMEOUT = 20.0


@pytest.fixture(scope='session', autouse=True)
def engine():
    """Replaces conftest's: the backend starts ringfold's engine itself."""
    yield


def test_killed_rank_fails_every_pending_work():
    dist.init_process_group('ringfold', timeout=timedelta(seconds=TIMEOUT))
    rank, size = dist.get_rank(), dist.get_world_size()
    victim = size - 1
    others = dist.new_group(list(range(size - 1)))
    x = torch.ones(4)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((4,), float(size)))
    dist.barrier()
    if rank == victim:
        time.sleep(1.0)                 # the others' work below is pending by now
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    failures = []

    def fails(call, finish):
        """The call raises, or its work (or future) does: an engine that already knows of the
        death refuses new work at once, pending work fails when the death is found."""
        try:
            finish(call())
        except RuntimeError as e:
            failures.append(e)
            return True
        return False
    pending = []
    for _ in range(3):              # pending together: enqueued before any is waited for
        try:
            pending.append(dist.all_reduce(torch.ones(1 << 16), async_op=True))
        except RuntimeError as e:
            failures.append(e)
    fut = dist.all_gather_into_tensor(torch.empty(2 * size), torch.ones(2), async_op=True).get_future()
    assert not fut.done()
    for w in pending:
        fails(lambda: w, lambda work: work.wait())
    fails(lambda: fut, lambda f: f.wait())
    fails(lambda: dist.barrier(), lambda _: None)
    elapsed = time.monotonic() - start
    try:                            # without the victim: may have run before the death was known
        dist.all_reduce(torch.ones(8), group=others)
    except RuntimeError:
        pass
    dist.destroy_process_group()
    assert len(failures) == 5, failures
    assert elapsed < TIMEOUT + 5, 'the failures took %.1f s' % elapsed
    assert any(str(victim) in str(e) for e in failures), [str(e) for e in failures]
