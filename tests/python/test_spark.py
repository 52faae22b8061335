"""ringfold.spark on a local[4] Spark session (tests/python/run.sh spark; not a rank: it is the
driver, and starts its jobs itself).

One session for the module (~15-20 s to start); each job is one barrier stage whose tasks run
their ranks as subprocesses. Spark binds 127.0.0.1 only (spark.driver.host/bindAddress) with the
UI off. Skipped without java or pyspark (bindings/python/requirements-spark.txt). Every wait is
bounded: a job that hangs fails on start_timeout, RINGFOLD_TIMEOUT or a polling deadline.
"""
import importlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import _thread

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, 'examples', 'pytorch_train.py')


def pickle_by_value(module_name):
    """The executors cannot import this test module: its functions travel by value, as a
    notebook's do (docs/spark.md)."""
    for pickler in ('cloudpickle', 'pyspark.cloudpickle'):
        try:
            importlib.import_module(pickler).register_pickle_by_value(sys.modules[module_name])
        except ImportError:
            pass


pickle_by_value(__name__)

pytestmark = pytest.mark.skipif(shutil.which('java') is None and not os.environ.get('JAVA_HOME'),
                                reason='no java (scripts/install_deps.sh installs openjdk-17-jre-headless)')
LAUNCHER_IDENTITY = ('RINGFOLD_RANK', 'HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'TORCHELASTIC_RUN_ID')
if any(os.environ.get(v) for v in LAUNCHER_IDENTITY):
    pytest.skip('the Spark driver starts its own jobs: run it outside a launcher (tests/python/run.sh spark)',
                allow_module_level=True)


def make_session(master, conf=()):
    pyspark = pytest.importorskip('pyspark', reason='pyspark not installed (requirements-spark.txt)')
    from pyspark.sql import SparkSession
    os.environ['PYSPARK_PYTHON'] = sys.executable      # the executors' Python: this venv's
    os.environ['SPARK_LOCAL_IP'] = '127.0.0.1'          # local-cluster's master, workers, executors too
    os.environ.setdefault('RINGFOLD_TIMEOUT', '20')     # a stalled collective fails, not hangs
    spark = (SparkSession.builder.master(master).appName('ringfold-test')
             .config('spark.driver.host', '127.0.0.1')
             .config('spark.driver.bindAddress', '127.0.0.1')
             .config('spark.ui.enabled', 'false')
             .config('spark.ui.showConsoleProgress', 'false')
             .config('spark.task.maxFailures', '1'))
    for key, value in conf:
        spark = spark.config(key, value)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel('ERROR')
    assert pyspark
    return spark


@pytest.fixture(scope='module')
def spark():
    session = make_session('local[4]')
    yield session
    session.stop()


def topology_fn(tag):
    import numpy as np
    import ringfold
    ringfold.init()
    r, n = ringfold.rank(), ringfold.size()
    print('%s hello from rank %d of %d' % (tag, r, n), flush=True)
    total = ringfold.allreduce(np.full(5, r + 1, dtype=np.float64), op=ringfold.Sum, name='x')
    gathered = ringfold.allgather(np.array([r], dtype=np.int32), name='g')
    return {'rank': r, 'size': n, 'local_rank': ringfold.local_rank(),
            'local_size': ringfold.local_size(), 'cross_rank': ringfold.cross_rank(),
            'cross_size': ringfold.cross_size(), 'sum': total.tolist(),
            'gathered': gathered.tolist(), 'pid': os.getpid()}


@pytest.mark.parametrize('n', [2, 3])
def test_run_rank_order_allreduce_topology(spark, n):
    import ringfold.spark
    out = io.StringIO()
    results = ringfold.spark.run(topology_fn, args=('t%d' % n,), num_proc=n, stdout=out,
                                 start_timeout=120)
    assert [r['rank'] for r in results] == list(range(n))
    expected = float(n * (n + 1) // 2)
    for r in results:
        assert r['size'] == n
        assert r['sum'] == [expected] * 5
        assert r['gathered'] == list(range(n))
        # local[4]: every task on 127.0.0.1, one host
        assert (r['local_rank'], r['local_size'], r['cross_rank'], r['cross_size']) == (r['rank'], n, 0, 1)
    assert len({r['pid'] for r in results}) == n
    text = out.getvalue()
    for r in range(n):
        assert '[%d]<stdout>:t%d hello from rank %d of %d' % (r, n, r, n) in text, text


def test_mpi_arguments_warn(spark):
    import ringfold.spark
    with pytest.warns(UserWarning, match='use_gloo'):
        results = ringfold.spark.run(lambda a, b=0: a + b, args=(1,), kwargs={'b': 2}, num_proc=2,
                                     use_gloo=True, stdout=io.StringIO(), start_timeout=120)
    assert results == [3, 3]


def runner_main(base, scale=1):
    import ringfold
    import ringfold.spark
    ringfold.init()
    print('plain line from rank %d' % ringfold.rank(), flush=True)
    ringfold.spark.log_to_driver('logged line from rank %d' % ringfold.rank())
    return {'rank': ringfold.rank(), 'value': base * scale + ringfold.rank()}


def test_horovod_runner_np2_returns_rank0(spark, capsys):
    import ringfold.spark
    hr = ringfold.spark.HorovodRunner(np=2)
    assert hr.run(runner_main, base=10, scale=3) == {'rank': 0, 'value': 30}
    out = capsys.readouterr().out
    # driver_log_verbosity='log_callback_only' (the default): only log_to_driver reaches the driver
    assert '[0]<stdout>:logged line from rank 0' in out and '[1]<stdout>:logged line from rank 1' in out
    assert 'plain line' not in out
    hr_all = ringfold.spark.HorovodRunner(np=2, driver_log_verbosity='all')
    assert hr_all.run(runner_main, base=1)['value'] == 1
    assert '[1]<stdout>:plain line from rank 1' in capsys.readouterr().out


def size_fn():
    import ringfold
    ringfold.init()
    return ringfold.size()


def test_horovod_runner_np0_uses_every_slot(spark):
    import ringfold.spark
    assert ringfold.spark.HorovodRunner(np=0).run(size_fn) == 4  # local[4]


def test_horovod_runner_arguments():
    import ringfold.spark
    with pytest.raises(TypeError):
        ringfold.spark.HorovodRunner(2)  # np is keyword-only, as in Databricks' API
    with pytest.raises(ValueError, match='driver_log_verbosity'):
        ringfold.spark.HorovodRunner(np=2, driver_log_verbosity='some')


LOCAL_NO_SPARK = r'''
import sys
sys.modules['pyspark'] = None          # any import of pyspark fails
import ringfold.spark

def main(offset):
    import numpy as np
    import ringfold
    ringfold.init()
    s = ringfold.allreduce(np.array([ringfold.rank() + 1.0]), op=ringfold.Sum, name='s')
    return (ringfold.rank(), ringfold.size(), float(s[0]) + offset)

print('RESULT', ringfold.spark.HorovodRunner(np=-2).run(main, offset=100))
print('PYSPARK', [m for m in sys.modules if m.startswith('pyspark') and sys.modules[m] is not None])
'''


@pytest.mark.parametrize('inherited', [{}, {'HOROVOD_RANK': '1', 'HOROVOD_SIZE': '3', 'RINGFOLD_INCARNATION': '4'}],
                         ids=['clean', 'under-a-launcher'])
def test_np_negative_runs_without_spark(inherited):
    """HorovodRunner(np=-2): two subprocess ranks on the driver; pyspark cannot even be imported.
    A driver that itself runs under a launcher (its rank variables inherited: the CI run that
    found this) passes none of them on to its ranks."""
    env = dict(os.environ, JAVA_HOME='/nonexistent', PATH='%s:/usr/bin:/bin' % os.path.dirname(sys.executable),
               **inherited)
    proc = subprocess.run([sys.executable, '-c', LOCAL_NO_SPARK], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'RESULT (0, 2, 103.0)' in proc.stdout, proc.stdout + proc.stderr
    assert 'PYSPARK []' in proc.stdout


def failing_fn():
    import numpy as np
    import ringfold
    ringfold.init()
    print('rank %d is working' % ringfold.rank(), flush=True)
    if ringfold.rank() == 1:
        print('rank 1 is about to fail', flush=True)
        raise ValueError('boom on purpose')
    # the others wait in a collective that rank 1 never joins
    ringfold.allreduce(np.ones(4), name='never_matched')
    return 'unreachable'


def test_raising_rank_is_named_with_its_output(spark):
    import ringfold.spark
    started = time.monotonic()
    with pytest.raises(ringfold.spark.JobFailedError) as info:
        ringfold.spark.run(failing_fn, num_proc=3, stdout=io.StringIO(), stderr=io.StringIO(),
                           start_timeout=120)
    err = info.value
    print('failed after %.1f s:\n%s' % (time.monotonic() - started, err))
    assert err.rank == 1
    text = str(err)
    assert 'rank 1' in text and 'ValueError: boom on purpose' in text
    assert 'rank 1 is about to fail' in text           # its output tail
    assert isinstance(err.__cause__, ValueError)
    assert 'boom on purpose' in err.remote_traceback
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()


def test_the_next_job_runs_after_a_failure(spark):
    import ringfold.spark
    assert ringfold.spark.run(lambda: 7, num_proc=2, stdout=io.StringIO(), start_timeout=120) == [7, 7]


def test_too_few_slots_fails_before_anything_starts(spark, tmp_path):
    import ringfold.spark
    marker = tmp_path / 'ran'

    def fn():
        marker.write_text('ran')

    with pytest.raises(ValueError, match=r'5 ranks need 5 task slots.*has 4'):
        ringfold.spark.run(fn, num_proc=5, start_timeout=120)
    assert not marker.exists()


def sleeper(pid_dir):
    import ringfold
    ringfold.init()
    with open(os.path.join(pid_dir, str(ringfold.rank())), 'w') as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open('/proc/%d/stat' % pid) as f:
        return f.read().split(')')[-1].split()[0] != 'Z'


def test_keyboard_interrupt_cancels_the_spark_job(spark, tmp_path):
    import ringfold.spark
    pids = []

    def interrupt_when_running():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(os.listdir(tmp_path)) < 2:
            time.sleep(0.1)
        pids.extend(int((tmp_path / f).read_text()) for f in os.listdir(tmp_path))
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        ringfold.spark.run(sleeper, args=(str(tmp_path),), num_proc=2, stdout=io.StringIO(),
                           start_timeout=120)
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(_alive(p) for p in pids)
                                           or spark.sparkContext.statusTracker().getActiveJobsIds()):
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)], 'ranks outlived the cancelled job'
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()


def train_example(argv):
    import runpy
    sys.argv = [EXAMPLE] + argv
    runpy.run_path(EXAMPLE, run_name='__main__')


def _accuracy(text):
    found = re.findall(r'final test accuracy: ([0-9.]+)', text)
    assert found, text
    return float(found[-1])


def test_pytorch_example_reaches_one_process_accuracy(spark, tmp_path):
    pytest.importorskip('torch')
    pytest.importorskip('sklearn')
    import ringfold.spark
    epochs = ['--epochs', '8']  # both runs alike; shorter than the example's default 15
    # the one-process reference runs meanwhile, in a plain subprocess
    single = subprocess.Popen([sys.executable, EXAMPLE, '--checkpoint-dir', str(tmp_path / '1')] + epochs,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = io.StringIO()
        ringfold.spark.run(train_example, args=(['--checkpoint-dir', str(tmp_path / '2')] + epochs,),
                           num_proc=2, stdout=out, start_timeout=120)
        single_out, _ = single.communicate(timeout=300)
    finally:
        single.kill()
    assert single.returncode == 0, single_out
    one, two = _accuracy(single_out), _accuracy(out.getvalue())
    print('one process: %.4f, 2 ranks through ringfold.spark.run: %.4f' % (one, two))
    assert two >= one - 0.02
    assert list((tmp_path / '2').glob('checkpoint-*.pt'))


def test_store_port_taken_is_retried(monkeypatch, recwarn):
    """Rank 0's reserved store port taken by a listener anyway: the job starts again elsewhere
    (exercised through the local path, which shares the attempt logic with Spark's)."""
    import ringfold.spark
    from ringfold.spark import _task
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    real = _task.reserve_port
    calls = []

    def reserve_taken():
        s = real()
        if not calls:
            squatter.bind(('127.0.0.1', s.getsockname()[1]))
            squatter.listen()
        calls.append(s.getsockname()[1])
        return s

    monkeypatch.setattr(_task, 'reserve_port', reserve_taken)
    try:
        result = ringfold.spark.HorovodRunner(np=-2).run(runner_main, base=5)
    finally:
        squatter.close()
    assert result == {'rank': 0, 'value': 5}
    assert len(calls) == 2 and calls[0] != calls[1]
    assert any('took rank 0\'s store port' in str(w.message) for w in recwarn)


def test_placement_and_gpus():
    from ringfold.spark._task import gpu_env, host_of, place
    assert host_of('10.0.0.1:4040') == '10.0.0.1' and host_of('[fe80::1]:7') == 'fe80::1'
    # partitions on hosts A B A C B: ranks contiguous per host, partition 0 first
    p = place(['A', 'B', 'A', 'C', 'B'])
    assert [x['rank'] for x in p] == [0, 2, 1, 4, 3]
    assert [(x['local_rank'], x['local_size']) for x in p] == [(0, 2), (0, 2), (1, 2), (0, 1), (1, 2)]
    # cross rank: the host's index among the hosts having that local rank
    assert [(x['cross_rank'], x['cross_size']) for x in p] == [(0, 3), (1, 3), (0, 2), (2, 3), (1, 2)]
    gpus = [['3'], ['0'], ['1'], [], ['5']]
    assert gpu_env(p, gpus, 0) == ('3,1', '0')
    assert gpu_env(p, gpus, 2) == ('3,1', '1')
    assert gpu_env(p, gpus, 4) == ('0,5', '1')
    assert gpu_env(p, gpus, 3) is None
