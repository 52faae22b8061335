"""ringfold.tensorflow jobs whose ranks this test starts itself, with only TF_CONFIG (so a rank
can die without a launcher stopping the others): tests/python/run.sh tensorflow-jobs, in the
TensorFlow venv; not a rank itself. Each rank runs tensorflow_job_rank.py (see its contract).

  * A killed rank: at 3 ranks the last one SIGKILLs itself mid-training, in a tf.function step
    with DistributedGradientTape and inside Keras model.fit with DistributedOptimizer. The two
    survivors must get tf.errors.UnknownError carrying HorovodInternalError and the Horovod op
    name (what Horovod's TF ops raise there) within RINGFOLD_TIMEOUT, then HorovodInternalError
    eagerly, and exit cleanly; never hang.
  * Collective order under a small inter-op pool (the bucket-ordering deadlock): a py-function
    collective that waits holds one of TensorFlow's inter-op threads, so ranks that start
    independent collectives in different orders deadlock once the pool is exhausted. This
    guards ringfold.tensorflow's chaining of a graph's collectives in trace order
    (mpi_ops._run), which matters in graphs without TensorFlow's automatic control
    dependencies (tf.compat.v1.wrap_function, TF1-style graphs; inside tf.function TensorFlow
    already runs stateful ops in program order). With 1 and 2 inter-op threads the ranks must
    finish; with the chaining turned off (the driver's --unchained) the same job must NOT
    finish (both ranks stuck, the engine reporting stalled collectives, until the test's
    bound), which shows the test can fail.
Every wait is bounded: a job that does not end in time is killed and reported.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from ports import free_port_pair

pytest.importorskip('tensorflow')

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, 'tensorflow_job_rank.py')
RINGFOLD_TIMEOUT = 5
STARTUP_BOUND = 120


@pytest.fixture(scope='session', autouse=True)
def engine():
    """Replaces conftest's: this process is not a rank; the ranks start their own engines."""
    yield


def run_job(tmp_path, nranks, args, timeout, env=None, started=None):
    """Starts nranks ranks with TF_CONFIG (chief = rank 0); returns ([exit status or None when
    it did not end within `timeout`], [output]). With `started` (a marker the ranks print when
    they begin the part under test), `timeout` counts from when every rank printed it, after at
    most STARTUP_BOUND seconds of start-up (importing TensorFlow takes 5 to 25 s on 2 busy
    cores). Ranks still running at the bound are killed."""
    port = free_port_pair()
    cluster = {'chief': ['127.0.0.1:%d' % port],
               'worker': ['127.0.0.1:%d' % (port + 2 * i) for i in range(1, nranks)]}
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(('RINGFOLD_', 'OMPI_', 'PMI_', 'SLURM_', 'TF_CONFIG'))}
    base.update(RINGFOLD_TIMEOUT=str(RINGFOLD_TIMEOUT), TF_CPP_MIN_LOG_LEVEL='2',
                KERAS_BACKEND='tensorflow', PYTHONDONTWRITEBYTECODE='1', **(env or {}))
    procs, logs = [], []
    for r in range(nranks):
        task = {'type': 'chief', 'index': 0} if r == 0 else {'type': 'worker', 'index': r - 1}
        log = open(tmp_path / ('rank%d.log' % r), 'w+')
        procs.append(subprocess.Popen(
            [sys.executable, DRIVER] + list(args),
            env=dict(base, TF_CONFIG=json.dumps({'cluster': cluster, 'task': task})),
            stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
    if started is not None:
        limit = time.monotonic() + STARTUP_BOUND
        while time.monotonic() < limit and any(p.poll() is None for p in procs):
            if all(started in (tmp_path / ('rank%d.log' % r)).read_text() for r in range(nranks)):
                break
            time.sleep(0.2)
    deadline = time.monotonic() + timeout
    status = []
    for p in procs:
        try:
            status.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            status.append(None)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    return status, outputs


def _report(status, outputs):
    return '\n'.join('--- rank %d (status %s)\n%s' % (r, s, o[-3000:])
                     for r, (s, o) in enumerate(zip(status, outputs)))


@pytest.mark.parametrize('scenario', ['death-tape', 'death-fit'])
def test_killed_rank_raises_horovod_internal_error_on_the_others(tmp_path, scenario):
    status, outputs = run_job(tmp_path, 3, [scenario], timeout=60, started='STARTED')
    report = _report(status, outputs)
    assert status[2] == -9, 'the victim was to die of SIGKILL\n' + report
    for r in (0, 1):
        assert status[r] == 0, report
        assert 'RESULT ok' in outputs[r], report
        print(outputs[r].strip().splitlines()[-1])


@pytest.mark.parametrize('kind,threads', [('wrap', 1), ('wrap', 2), ('function', 1)])
def test_collectives_in_different_readiness_order_do_not_deadlock(tmp_path, kind, threads):
    """wrap: a tf.compat.v1.wrap_function graph, where only ringfold's trace-order chaining
    orders the collectives. function: a tf.function, where TensorFlow's automatic control
    dependencies between stateful ops also do."""
    status, outputs = run_job(tmp_path, 2, ['order', str(threads), kind], timeout=45,
                              started='STARTED')
    report = _report(status, outputs)
    assert status == [0, 0], report
    assert all('RESULT ok' in o for o in outputs), report


def test_without_trace_order_chaining_the_order_case_deadlocks(tmp_path):
    """The negative control: the wrap_function job with the chaining turned off must not
    finish: each rank's only inter-op thread waits in a collective the other rank cannot
    start (the engine reports them stalled), so the test above can fail."""
    status, outputs = run_job(tmp_path, 2, ['order', '1', 'wrap', '--unchained'], timeout=15,
                              env={'RINGFOLD_STALL_CHECK_TIME': '2',
                                   'RINGFOLD_STALL_SHUTDOWN_TIME': '4'}, started='STARTED')
    report = _report(status, outputs)
    assert not any('RESULT ok' in o for o in outputs), \
        'the unchained job finished: the order test cannot fail\n' + report
    assert any('stalled' in o for o in outputs), 'no rank reported a stalled collective\n' + report
