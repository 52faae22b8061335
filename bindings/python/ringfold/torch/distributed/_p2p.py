"""Point-to-point send/recv of the "ringfold" backend, through torch's store.

ringfold's engine negotiates every operation among all ranks of a process set, so it has no
two-rank operation; send and recv therefore travel through the key-value store torch gave the
process group (the TCPStore on MASTER_PORT, or torchrun's): correct, ordered and bounded by the
group's timeout, but every byte passes through the store's host. Use them for control messages
and pipeline stages of modest size, not for bulk traffic.

Contract
  * send(tensor, dst, tag) copies the tensor's bytes into the store under
    "<src>><dst>/<tag>/<n>", n counting this pair's sends with that tag; it is complete when
    the store holds them (gloo's send also completes before the receiver reads).
  * recv(tensor, src, tag) waits for the matching key (the n-th receive from src with that tag
    reads the n-th send), copies the bytes into the tensor, deletes the key. A message whose
    size differs from the tensor's raises ValueError naming both. recv_anysource(tensor, tag)
    takes the first message that arrives from any rank of the group (lowest rank first when
    several are there) and reports its rank as the work's source_rank().
  * Ranks are group ranks; receives run on a thread of their own each, so isend/irecv may be
    issued in any order without deadlock. Waits are bounded by the group's timeout.
  * CUDA tensors are staged through host memory.
"""
import ctypes
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ringfold.torch.distributed._work import ValueWork


def _payload(t):
    src = t.detach().to('cpu') if t.is_cuda else t.detach().contiguous()
    return ctypes.string_at(src.data_ptr(), src.numel() * src.element_size())


def _fill(t, data, what):
    nbytes = t.numel() * t.element_size()
    if len(data) != nbytes:
        raise ValueError('ringfold: %s: the message has %d bytes but the tensor (%s, %s) holds %d'
                         % (what, len(data), tuple(t.shape), t.dtype, nbytes))
    if t.is_cuda or not t.is_contiguous():
        buf = torch.empty(t.shape, dtype=t.dtype)
        ctypes.memmove(buf.data_ptr(), data, nbytes)
        t.copy_(buf)
    elif nbytes:
        ctypes.memmove(t.data_ptr(), data, nbytes)


class ThreadWork(ValueWork):
    """A Work whose body runs on its own thread (or is already done: body None)."""

    def __init__(self, body, value, timeout_seconds, what):
        super().__init__()
        self._value = value
        self._what = what
        self._timeout = timeout_seconds
        self._done = threading.Event()
        self._error = None
        self._future = None
        self._lock = threading.Lock()
        if body is None:
            self._done.set()
        else:
            threading.Thread(target=self._run, args=(body,), daemon=True,
                             name='ringfold-c10d-p2p').start()

    def _run(self, body):
        try:
            body(self)
        except Exception as e:
            self._error = e if isinstance(e, (ValueError, dist.DistError)) else \
                dist.DistBackendError('ringfold: %s: %s' % (self._what, e))
        with self._lock:
            self._done.set()
            fut = self._future
        if fut is not None:
            self._settle(fut)

    def wait(self, timeout=None):
        limit = self._timeout
        if isinstance(timeout, timedelta) and timeout.total_seconds() > 0:
            limit = min(limit, timeout.total_seconds())
        if not self._done.wait(limit):
            raise dist.DistBackendError('ringfold: %s did not complete within %g s' % (self._what, limit))
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                settle = self._done.is_set()
            else:
                settle = False
        if settle:
            self._settle(self._future)
        return self._future


class PointToPoint:
    def __init__(self, store, rank, size, timeout_seconds):
        self._store = dist.PrefixStore('ringfold-p2p/', store)
        self._rank = rank
        self._size = size
        self._timeout = timeout_seconds
        self._counts = {}
        self._lock = threading.Lock()

    def _next(self, src, dst, tag):
        with self._lock:
            key = (src, dst, tag)
            n = self._counts.get(key, 0)
            self._counts[key] = n + 1
        return '%d>%d/%d/%d' % (src, dst, tag, n)

    def _check_peer(self, peer, what):
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError('ringfold: %s: invalid peer rank %d (group of %d ranks, this is rank %d)'
                             % (what, peer, self._size, self._rank))

    def send(self, tensors, dst, tag):
        self._check_peer(dst, 'send')
        t, = tensors
        self._store.set(self._next(self._rank, dst, tag), _payload(t))
        return ThreadWork(None, tensors, self._timeout, 'send to %d' % dst)

    def recv(self, tensors, src, tag):
        self._check_peer(src, 'recv')
        t, = tensors
        key = self._next(src, self._rank, tag)
        store = self._store

        def body(work):
            work.source = src
            _fill(t, store.get(key), 'recv from %d' % src)
            store.delete_key(key)
        return ThreadWork(body, tensors, self._timeout, 'recv from %d' % src)

    def recv_anysource(self, tensors, tag):
        t, = tensors
        store = self._store
        deadline = time.monotonic() + self._timeout
        peers = [r for r in range(self._size) if r != self._rank]
        claim = threading.Lock()

        def body(work):
            pause = 0.0005
            while True:
                with claim, self._lock:
                    for src in peers:
                        n = self._counts.get((src, self._rank, tag), 0)
                        key = '%d>%d/%d/%d' % (src, self._rank, tag, n)
                        if store.check([key]):
                            self._counts[(src, self._rank, tag)] = n + 1
                            break
                    else:
                        key = None
                if key is not None:
                    work.source = src
                    _fill(t, store.get(key), 'recv from %d' % src)
                    store.delete_key(key)
                    return
                if time.monotonic() > deadline:
                    raise dist.DistBackendError('ringfold: recv from any source: nothing arrived within '
                                                'the process group\'s timeout of %g s' % self._timeout)
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        return ThreadWork(body, tensors, self._timeout, 'recv from any source')

