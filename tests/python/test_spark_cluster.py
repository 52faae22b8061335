"""ringfold.spark on local-cluster[2,1,1024]: two executor JVMs (each with its own Python
workers), as on a real cluster's workers (tests/python/run.sh spark-cluster; slow: ~40 s to
start the session, so it runs once, apart from test_spark.py).
"""
import io
import os

import pytest

from test_spark import make_session, pickle_by_value, topology_fn, pytestmark  # noqa: F401  (same skips)

pickle_by_value(__name__)

pytestmark = [pytestmark, pytest.mark.slow]


def executor_jvm():
    """The pid of the java process this rank descends from (its executor)."""
    pid = os.getpid()
    while pid > 1:
        with open('/proc/%d/stat' % pid) as f:
            stat = f.read()
        if stat[stat.index('(') + 1:stat.rindex(')')] == 'java':
            return pid
        pid = int(stat[stat.rindex(')') + 2:].split()[1])
    return None


# Each worker discovers one (pretend) GPU and gives it to its executor; the script hands out 0, 1, ... in turn, so the two
# executors on this machine get different ones. Spark's local[N] mode schedules no task that asks
# for GPUs, hence here.
GPU_SCRIPT = """#!/bin/sh
i=0
while ! mkdir "%s/$i" 2>/dev/null; do i=$((i + 1)); done
echo '{"name": "gpu", "addresses": ["'$i'"]}'
"""


def gpus_seen():
    import ringfold
    import ringfold.spark.task
    ringfold.init()
    return (os.environ.get('CUDA_VISIBLE_DEVICES'), ringfold.spark.task.get_available_devices(),
            ringfold.local_rank())


def test_local_cluster_two_executors(tmp_path):
    script = tmp_path / 'gpus.sh'
    (tmp_path / 'ids').mkdir()
    script.write_text(GPU_SCRIPT % (tmp_path / 'ids'))
    script.chmod(0o755)
    spark = make_session('local-cluster[2,1,1024]', [
        ('spark.worker.resource.gpu.amount', '1'),          # each standalone worker finds one
        ('spark.worker.resource.gpu.discoveryScript', str(script)),
        ('spark.executor.resource.gpu.amount', '1'),
        ('spark.task.resource.gpu.amount', '1')])
    try:
        import ringfold.spark
        out = io.StringIO()
        # the session returns before the executors register: run() waits for the 2 slots
        results = ringfold.spark.run(topology_fn, args=('cluster',), num_proc=2, stdout=out,
                                     start_timeout=120)
        assert [r['rank'] for r in results] == [0, 1]
        assert all(r['sum'] == [3.0] * 5 for r in results)
        # both executors run on this machine (127.0.0.1): one host, two local ranks
        assert [(r['local_rank'], r['local_size']) for r in results] == [(0, 2), (1, 2)]
        assert '[1]<stdout>:cluster hello from rank 1 of 2' in out.getvalue()
        # the two ranks descend from two different executor JVMs, neither of them the driver's
        jvms = ringfold.spark.run(executor_jvm, num_proc=2, stdout=io.StringIO(), start_timeout=180)
        driver_jvm = spark.sparkContext._gateway.proc.pid if spark.sparkContext._gateway.proc else None
        assert None not in jvms and len(set(jvms)) == 2 and driver_jvm not in jvms, (jvms, driver_jvm)
        # GPUs from ctx.resources(): both ranks see the host's two GPUs in local-rank order, and
        # device local_rank() is each one's own
        seen = ringfold.spark.run(gpus_seen, num_proc=2, stdout=io.StringIO(), start_timeout=180)
        visible = {v for v, _, _ in seen}
        assert len(visible) == 1 and sorted(visible.pop().split(',')) == ['0', '1'], seen
        assert [(devices, local_rank) for _, devices, local_rank in seen] == [(['0'], 0), (['1'], 1)], seen
    finally:
        spark.stop()
