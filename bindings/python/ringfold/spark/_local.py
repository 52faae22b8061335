"""Stand-ins for Spark's barrier task context, for HorovodRunner(np<0): ranks on the driver alone.

Contract
  * LocalContext(partition, group) has the four methods _task.run_task uses: partitionId(),
    getTaskInfos() (every task at 127.0.0.1), allGather(message) (blocks until every task of
    the group has posted; raises RuntimeError if the group is cancelled or `timeout` passes)
    and resources() (none).
  * Nothing here imports pyspark or needs Java.
"""
import threading
import time


class _Info:
    def __init__(self, address):
        self.address = address


class LocalGroup:
    def __init__(self, num_proc, cancelled, timeout):
        self.num_proc = num_proc
        self.cancelled = cancelled
        self.timeout = timeout
        self._cond = threading.Condition()
        self._messages = {}

    def all_gather(self, partition, message):
        deadline = time.monotonic() + self.timeout
        with self._cond:
            self._messages[partition] = message
            self._cond.notify_all()
            while len(self._messages) < self.num_proc:
                if self.cancelled.is_set() or time.monotonic() > deadline:
                    raise RuntimeError('ringfold.spark: local task %d: allGather cancelled' % partition)
                self._cond.wait(0.2)
            return [self._messages[p] for p in range(self.num_proc)]


class LocalContext:
    def __init__(self, partition, group):
        self._partition = partition
        self._group = group

    def partitionId(self):
        return self._partition

    def getTaskInfos(self):
        return [_Info('127.0.0.1:0') for _ in range(self._group.num_proc)]

    def allGather(self, message=''):
        return self._group.all_gather(self._partition, message)

    def resources(self):
        return {}
