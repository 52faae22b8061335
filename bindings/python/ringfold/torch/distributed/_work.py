"""The c10d Work of the "ringfold" backend, and the thin layer that enqueues engine operations.

Contract
  * Work(group, what, handles, keep, finish, value) stands for engine operations already
    enqueued (their handles). It is a torch.distributed Work subclass, so DDP's C++ reducer and
    distributed_c10d use it as they use gloo's:
      wait(timeout=None)  blocks until every handle completed, runs `finish(handles)` (which
                          copies engine-allocated results into the caller's tensors), releases
                          the handles and returns True; raises the operation's error instead.
                          The wait is bounded by the group's timeout (init_process_group's
                          `timeout`, counted from the enqueue) and by `timeout` if given; past
                          either it raises DistBackendError, the work fails for good and its
                          handles are cancelled (what the engine still uses is kept alive and
                          released once the engine is done with it).
      is_completed()      True once done (successfully or not), without blocking; drives the
                          completion itself when the engine has finished.
      exception(), is_success(), result() (the output tensors), source_rank() (recv).
      get_future()        a torch.futures.Future completed with `value` (for allreduce: the
                          list of tensors, as DDP's default comm hook reads fut.value()[0]) or
                          with the error, by a background thread if nobody waits.
    Whichever thread (the caller's wait, is_completed, or the completer) finds the engine done
    first completes the work; the others see the result. Everything runs exactly once.
  * Errors: ranks that disagree (shapes, dtypes, ops, roots) and a shut-down engine raise
    DistBackendError with the engine's message, the same on every rank; a dead or silent peer
    (status ABORTED) raises DistNetworkError naming it. Both are RuntimeErrors, as gloo's are.
    A bad argument found on this rank at enqueue raises ValueError at once.
  * The completer thread (one per process, started on first use, a daemon) drives only works
    whose future was asked for or that were issued with async_op, so a synchronous collective
    costs no thread switch.
"""
import collections
import ctypes
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ringfold import _lib, _ops
from ringfold.torch.distributed._probe import WorkBase

_CALLER_SLICE = 1.0      # seconds: a waiting caller wakes this often, so Ctrl-C interrupts it
_COMPLETER_SLICE = 0.05  # seconds: the completer's blocking wait on its oldest work


def status_error(status, what):
    """The exception for a failed engine status (see the module contract)."""
    # The engine's message only: it is the same on every rank (what this rank called may differ).
    message = 'ringfold: %s' % (_lib.last_error() or '%s failed with status %d' % (what, status))
    if status == _lib.ABORTED:
        return dist.DistNetworkError(message)
    return dist.DistBackendError(message)


def check_enqueue(status, what):
    if status == _lib.OK:
        return
    if status == _lib.INVALID_ARGUMENT:
        raise ValueError('ringfold: %s: %s' % (what, _lib.last_error()))
    raise status_error(status, what)


def enqueue(what, op_type, name, inp, out=None, reduce_op=0, prescale=1.0, postscale=1.0, root=0,
            splits=None, process_set=0):
    """ringfold_enqueue; returns the handle (errors raise, see check_enqueue)."""
    op = _lib.Op()
    op.type = op_type
    op.name = name
    op.reduce_op = reduce_op
    op.prescale = prescale
    op.postscale = postscale
    op.root = root
    op.process_set = process_set
    if splits is not None:
        op.nsplits = len(splits)
        if splits:
            op.splits = (ctypes.c_int64 * len(splits))(*splits)
    handle = ctypes.c_int64()
    check_enqueue(_lib.lib().ringfold_enqueue(ctypes.byref(op), inp, out, ctypes.byref(handle)), what)
    return handle.value


def enqueue_allreduce(what, name, ptr, code, shape, reduce_op, prescale, postscale, process_set):
    """In-place allreduce of host memory through the flat entry point (the per-gradient path)."""
    handle = ctypes.c_int64()
    check_enqueue(_lib.lib().ringfold_allreduce_async(
        ptr, ptr, code, _ops._shape_array(shape), len(shape), name, reduce_op, prescale, postscale,
        process_set, _lib.CPU_DEVICE, ctypes.byref(handle)), what)
    return handle.value


def enqueue_grouped_allreduce(what, names, tensors, codes, reduce_op, prescale, postscale,
                              process_set, device):
    """In-place grouped allreduce of contiguous tensors; one handle per tensor."""
    count = len(tensors)
    void_array = ctypes.c_void_p * count
    ptrs = void_array(*[t.data_ptr() for t in tensors])
    shapes = [_ops._shape_array(t.shape) for t in tensors]
    handles = (ctypes.c_int64 * count)()
    status = _lib.lib().ringfold_grouped_allreduce_async(
        count, ptrs, ptrs, (ctypes.c_int * count)(*codes),
        (ctypes.POINTER(ctypes.c_int64) * count)(
            *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shapes]),
        (ctypes.c_int * count)(*[t.dim() for t in tensors]), (ctypes.c_char_p * count)(*names),
        reduce_op, prescale, postscale, process_set, device, handles)
    check_enqueue(status, what)
    return list(handles)


def borrow(handle):
    """The engine-allocated result of a completed handle as a flat uint8 tensor that aliases the
    engine's memory (valid until the handle is released: copy out of it before)."""
    lib = _lib.lib()
    nbytes = ctypes.c_size_t()
    _lib.check(lib.ringfold_result_bytes(handle, ctypes.byref(nbytes)))
    if nbytes.value == 0:
        return torch.empty(0, dtype=torch.uint8)
    data = ctypes.c_void_p()
    _lib.check(lib.ringfold_result_data(handle, ctypes.byref(data)))
    return torch.frombuffer((ctypes.c_char * nbytes.value).from_address(data.value), dtype=torch.uint8)


def received_splits(handle, n):
    return _ops.received_splits(handle, n)


def _seconds(timeout):
    """A wait's timeout argument (timedelta, seconds or None) in seconds; None: no limit."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    timeout = float(timeout)
    return timeout if timeout > 0 else None     # c10d's kNoTimeout (0) and kUnsetTimeout (-1)


_done_cv = threading.Condition()     # notified whenever any work completes (few ever wait on it)


class ValueWork(WorkBase):
    """What every ringfold Work shares: it completes with `_value` or `_error`, and a receive
    sets `source` (the rank a message came from)."""
    _value = None
    _error = None
    source = -1

    def _settle(self, fut):
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(self._value)

    def result(self):
        return self._value

    def source_rank(self):
        return self.source

    def _source_rank(self):
        return self.source

    def synchronize(self):
        pass


class Work(ValueWork):
    # Defaults read until a work changes them (fewer attributes to set per call).
    _next = 0                # handles before this index have completed successfully
    _done = False
    _future = None
    _future_set = False

    def __init__(self, group, what, handles, keep, finish, value, devices=None, async_op=False):
        super().__init__()
        self._what = what
        self._all = handles
        self._keep = keep
        self._finish = finish
        self._value = value
        self._devices = devices
        self._timeout = timeout = group.timeout_seconds
        self._deadline = time.monotonic() + timeout
        self._owner = threading.Lock()
        if not handles:
            self._complete(None)
        elif async_op:
            completer().add(self)

    # ---- completion ----------------------------------------------------------------------

    def _drive(self, limit, slice_seconds):
        """Completes the work if the engine finished it within `limit` seconds (None: up to the
        deadline). Returns whether it is done."""
        if self._done:
            return True
        if not self._owner.acquire(blocking=False):      # another thread is completing it
            left = self._deadline - time.monotonic()
            with _done_cv:
                return _done_cv.wait_for(lambda: self._done, max(0.0, left if limit is None else min(limit, left)))
        try:
            return self._done or self._drive_owned(limit, slice_seconds)
        finally:
            self._owner.release()

    def _drive_owned(self, limit, slice_seconds):
        lib = _lib.lib()
        handles = self._all
        end = self._deadline if limit is None else min(self._deadline, time.monotonic() + limit)
        while self._next < len(handles):
            status = lib.ringfold_wait(handles[self._next], max(0.0, min(end - time.monotonic(), slice_seconds)))
            if status == _lib.IN_PROGRESS:
                now = time.monotonic()
                if now >= self._deadline:
                    self._fail(dist.DistBackendError(
                        'ringfold: %s did not complete within the process group\'s timeout of %g s '
                        '(init_process_group(timeout=...)); a rank that never made this call, or a '
                        'peer that stopped responding, holds it up' % (self._what, self._timeout)))
                    return True
                if now >= end:
                    return False
                continue
            if status != _lib.OK:
                self._fail(status_error(status, self._what))
                return True
            self._next += 1
        error = None
        try:
            if self._finish is not None:
                self._finish(handles)
        except Exception as e:         # a local problem copying results out (e.g. wrong sizes)
            error = e
        for h in handles:
            lib.ringfold_release(h)
        self._complete(error)
        return True

    def _fail(self, error):
        """Fails the work: releases what completed, cancels the rest and lets the completer
        release it (with the buffers it uses) once the engine is done with it."""
        lib = _lib.lib()
        for i, h in enumerate(self._all):
            if i >= self._next and lib.ringfold_poll(h) == 0:
                lib.ringfold_cancel(h)
                completer().add_zombie(h, self._keep)
            else:
                lib.ringfold_release(h)
        self._next = len(self._all)
        self._complete(error)

    def _complete(self, error):
        self._error = error
        self._keep = None
        self._finish = None
        with _done_cv:
            self._done = True
            fut = self._future if not self._future_set else None
            self._future_set = self._future is not None
            _done_cv.notify_all()
        if fut is not None:
            self._settle(fut)

    # ---- torch.distributed.Work ----------------------------------------------------------

    def wait(self, timeout=None):
        if not self._done:
            limit = _seconds(timeout)
            if not self._drive(limit, _CALLER_SLICE):
                raise dist.DistBackendError('ringfold: %s did not complete within the %g s given to '
                                            'Work.wait()' % (self._what, limit))
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if self._done:
            return True
        lib = _lib.lib()
        if all(lib.ringfold_poll(h) != 0 for h in self._all[self._next:]) or time.monotonic() >= self._deadline:
            self._drive(0.0, 0.0)
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error if self._done else None

    def get_future(self):
        with _done_cv:
            if self._future is None:
                self._future = torch.futures.Future(devices=self._devices) if self._devices \
                    else torch.futures.Future()
                settle = self._future_set = self._done
            else:
                settle = False
            fut = self._future
        if settle:
            self._settle(fut)
        elif not self._done:
            completer().add(self)
        return fut

    def __repr__(self):
        return 'ringfold.Work(%s, %s)' % (self._what, 'done' if self._done else 'pending')


class MultiWork(WorkBase):
    """Several works as one (coalesced calls, end_coalescing): done when all are; the future's
    value is the concatenation of theirs."""

    def __init__(self, works):
        super().__init__()
        self._works = list(works)
        self._future = None

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def is_success(self):
        return all(w.is_success() for w in self._works)

    def exception(self):
        for w in self._works:
            e = w.exception()
            if e is not None:
                return e
        return None

    def result(self):
        return [t for w in self._works for t in (w.result() or [])]

    def synchronize(self):
        pass

    def get_future(self):
        if self._future is None:
            futures = [w.get_future() for w in self._works]
            if not futures:
                self._future = torch.futures.Future()
                self._future.set_result([])
            else:
                def combine(fut):
                    return [t for f in fut.value() for t in (f.value() or [])]
                self._future = torch.futures.collect_all(futures).then(combine)
        return self._future


class _Completer:
    """The background thread that completes works nobody waits for (see the module contract),
    and releases cancelled handles once the engine lets go of them."""

    def __init__(self):
        self._cv = threading.Condition()
        self._works = collections.deque()
        self._zombies = []
        self._thread = None

    def add(self, work):
        with self._cv:
            if work not in self._works:
                self._works.append(work)
            self._start()
            self._cv.notify()

    def add_zombie(self, handle, keep):
        with self._cv:
            self._zombies.append((handle, keep))
            self._start()
            self._cv.notify()

    def _start(self):
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name='ringfold-c10d-completer', daemon=True)
            self._thread.start()

    def _run(self):
        lib = _lib.lib()
        while True:
            with self._cv:
                while not self._works and not self._zombies:
                    self._cv.wait()
                works = list(self._works)
                zombies = list(self._zombies)
            for i, w in enumerate(works):
                try:
                    w._drive(_COMPLETER_SLICE if i == 0 else 0.0, _COMPLETER_SLICE)
                except Exception:       # never lose the thread; the work keeps its state
                    pass
            done_zombies = []
            for h, keep in zombies:
                if lib.ringfold_poll(h) != 0:
                    lib.ringfold_release(h)
                    done_zombies.append((h, keep))
            with self._cv:
                for w in works:
                    if w._done:
                        try:
                            self._works.remove(w)
                        except ValueError:
                            pass
                for z in done_zombies:
                    self._zombies.remove(z)
                idle_zombies = not self._works and self._zombies
            if idle_zombies:
                time.sleep(_COMPLETER_SLICE)


_completer = None
_completer_lock = threading.Lock()


def completer():
    global _completer
    if _completer is None:
        with _completer_lock:
            if _completer is None:
                _completer = _Completer()
    return _completer
