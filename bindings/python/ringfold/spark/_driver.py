"""The driver's side of a ringfold.spark job: the service the tasks report to, and the wait.

Contract
  * DriverService listens on (bind_host, 0) and accepts only connections that prove the job
    secret (_protocol). It prints every forwarded line at once as
    `[rank]<stdout>:line` (Horovod's format; `time.asctime()` first with
    prefix_output_with_timestamp) to the stdout or stderr stream given (log_to_driver lines go
    to stdout), and records each rank's RESULT or FAILURE.
    Lines arriving after close() (ranks still dying after the job failed) are dropped.
  * Job.wait(done) blocks until every rank has a result (returns them in rank order), or a rank
    failed (raises JobFailedError for it: the first failure that is not a mere consequence of
    another's, i.e. not a HorovodInternalError or a cancellation, waiting up to FAILURE_GRACE_S
    for it), or `done` (the Spark job or local tasks ended) is set without every result (raises
    JobFailedError with what is known, e.g. Spark's own exception), or start_timeout passes
    before every task has connected (raises TimeoutError). The caller cancels the Spark job or
    local ranks on any exception, KeyboardInterrupt included.
"""
import json
import pickle
import socket
import sys
import threading
import time

from ringfold.spark import _protocol

FAILURE_GRACE_S = 1.0
TAIL_SHOWN = 40


class JobFailedError(RuntimeError):
    """A rank of a ringfold.spark job failed (or the Spark job failed before it could run).

    Attributes: rank (None when no rank reported), host, exit_code, output_tail (list of
    (stream, line)), remote_traceback (str). `__cause__` is the rank's own exception when it
    could be unpickled on the driver."""

    def __init__(self, message, rank=None, host=None, exit_code=None, output_tail=(),
                 remote_traceback=''):
        super().__init__(message)
        self.rank = rank
        self.host = host
        self.exit_code = exit_code
        self.output_tail = list(output_tail)
        self.remote_traceback = remote_traceback


def _is_consequence(info):
    return info['type'] in ('HorovodInternalError', 'Cancelled')


class DriverService:
    def __init__(self, secret, bind_host, num_proc, stdout=None, stderr=None, timestamps=False):
        self._secret = secret
        self._num_proc = num_proc
        self._stdout = stdout
        self._stderr = stderr
        self._timestamps = timestamps
        self._cond = threading.Condition()
        self._out_lock = threading.Lock()
        self.connected = set()        # partitions
        self.ranks = {}               # rank -> host
        self.results = {}             # rank -> bytes
        self.failures = []            # (time, rank, info)
        self.first_connect = None
        self.all_connected_at = None
        self._server = socket.create_server((bind_host, 0), backlog=max(16, num_proc))
        self.address = self._server.getsockname()[:2]
        self._closed = False
        self._threads = []
        self._accepter = threading.Thread(target=self._accept, name='ringfold.spark.accept', daemon=True)
        self._accepter.start()

    def close(self):
        self._closed = True
        try:
            self._server.close()
        except OSError:
            pass

    def wait_event(self, timeout):
        with self._cond:
            self._cond.wait(timeout)

    def notify(self):
        with self._cond:
            self._cond.notify_all()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn):
        with conn:
            try:
                conn.settimeout(30)
                nonce = _protocol.new_nonce()
                conn.sendall(nonce)
                got = _protocol.recv_exact(conn, 32)
                if got is None or not _protocol.check_answer(self._secret, nonce, got):
                    return  # not this job's task: nothing it sent is read
                conn.settimeout(None)
                while True:
                    frame = _protocol.recv_frame(conn)
                    if frame is None:
                        return
                    self._handle(*frame)
            except OSError:
                return

    def _handle(self, kind, rank, payload):
        if kind == _protocol.LINE:
            stream = _protocol.STREAMS.get(payload[:1], 'stdout')
            self._print(rank, stream, payload[1:].decode('utf-8', 'replace'))
            return
        with self._cond:
            if kind == _protocol.HELLO:
                hello = json.loads(payload)
                if rank < 0:
                    self.connected.add(hello['partition'])
                    now = time.monotonic()
                    self.first_connect = self.first_connect or now
                    if len(self.connected) == self._num_proc:
                        self.all_connected_at = now
                else:
                    self.ranks[rank] = hello.get('host')
            elif kind == _protocol.RESULT:
                self.results[rank] = payload
            elif kind == _protocol.FAILURE:
                self.failures.append((time.monotonic(), rank, pickle.loads(payload)))
            self._cond.notify_all()

    def _print(self, rank, stream, line):
        if self._closed:
            return  # the job is over for the caller: nothing printed after run() returned or raised
        out = self._stderr if stream == 'stderr' else self._stdout
        out = out if out is not None else (sys.stderr if stream == 'stderr' else sys.stdout)
        prefix = time.asctime() if self._timestamps else ''
        with self._out_lock:
            out.write('%s[%d]<%s>:%s\n' % (prefix, rank, 'stdout' if stream == 'log' else stream, line))
            try:
                out.flush()
            except (AttributeError, OSError, ValueError):
                pass


def rank_error(rank, info, others=()):
    tail = info.get('tail') or []
    lines = ['ringfold.spark: rank %d%s failed: %s: %s' % (
        rank, ' on %s' % info['host'] if info.get('host') else '', info['type'], info['message'])]
    if info.get('what') and info['what'] not in ('the function raised',):
        lines[0] += ' (%s)' % info['what']
    if others:
        lines.append('(then rank%s %s failed too)' % ('s' if len(others) > 1 else '', ', '.join(str(r) for r in others)))
    if tail:
        shown = tail[-TAIL_SHOWN:]
        lines.append('last %d lines of rank %d\'s output:' % (len(shown), rank))
        lines.extend('  [%d]<%s>:%s' % (rank, s, line) for s, line in shown)
    err = JobFailedError('\n'.join(lines), rank=rank, host=info.get('host'),
                         exit_code=info.get('exit_code'), output_tail=tail,
                         remote_traceback=info.get('traceback', ''))
    if info.get('exception'):
        try:
            err.__cause__ = pickle.loads(info['exception'])
        except Exception:
            pass
    return err


class Job:
    """One attempt of a job: its service and the wait (see the module contract)."""

    def __init__(self, service, num_proc, start_timeout):
        self.service = service
        self.num_proc = num_proc
        self.start_timeout = start_timeout
        self.started = time.monotonic()

    def _pick_failure(self):
        failures = self.service.failures
        first_time = failures[0][0]
        root = next((f for f in failures if not _is_consequence(f[2])), None)
        if root is None and time.monotonic() - first_time < FAILURE_GRACE_S:
            return None
        root = root or failures[0]
        others = sorted(r for _, r, _ in failures if r != root[1])
        return root, others

    def wait(self, done, done_error):
        """done: an Event; done_error(): the exception that ended the Spark job, if any."""
        svc = self.service
        while True:
            svc.wait_event(0.2)
            with svc._cond:
                if svc.failures:
                    picked = self._pick_failure()
                    if picked is not None:
                        (_, rank, info), others = picked
                        err = rank_error(rank, info, others)
                        err.store_port_taken = bool(info.get('store_port_taken'))
                        raise err
                    continue
                if len(svc.results) == self.num_proc:
                    return [pickle.loads(svc.results[r]) for r in range(self.num_proc)]
                connected = len(svc.connected)
            if done.is_set():
                time.sleep(FAILURE_GRACE_S)  # a failure report may still be in flight
                with svc._cond:
                    if svc.failures or len(svc.results) == self.num_proc:
                        continue
                cause = done_error()
                err = JobFailedError('ringfold.spark: the job ended with %d of %d results and no '
                                     'rank reporting a failure%s' % (
                                         len(svc.results), self.num_proc,
                                         ': %s' % _short(cause) if cause else ''))
                err.__cause__ = cause
                err.store_port_taken = False
                raise err
            if connected < self.num_proc and time.monotonic() - self.started > self.start_timeout:
                raise TimeoutError(
                    'ringfold.spark: only %d of %d tasks started within start_timeout=%g s. Each '
                    'rank runs in a Spark task of one barrier stage, which starts only when the '
                    'cluster has a free slot for every task at once: check the cluster\'s '
                    'resources, or raise start_timeout (or HOROVOD_SPARK_START_TIMEOUT) if '
                    'executors are allocated on demand.' % (connected, self.num_proc, self.start_timeout))


def _short(exc):
    text = str(exc)
    for marker in ('PythonException:', 'Exception:'):
        if marker in text:
            text = text[text.index(marker):]
            break
    lines = [line for line in text.splitlines() if line.strip()]
    return '\n'.join(lines[:12])
