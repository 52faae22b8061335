"""The job's store from Python: libringfold's ringfold_store_set/get/check (ringfold.h, "the job's
store") over ctypes.

Contract
  * set(key, value), get(key, timeout), check(key) reach the store the engine's init would use,
    chosen from the environment at each call (ringfoldrun's store in elastic mode, whose keys
    outlive every incarnation); they work whether or not the engine is initialized.
  * Keys are str, values bytes (str is encoded as UTF-8). get() returns the value, or None when
    `timeout` seconds passed first (timeout None: no limit).
  * A store that cannot be reached, or closed the connection, raises HorovodInternalError with
    the library's message; bad arguments raise InvalidArgumentError (a ValueError).
  * The functions' ctypes types are declared here, on first use, for the three entry points
    only (ringfold._lib declares the rest of the C ABI).
"""
import ctypes

from ringfold import _lib

_declared = None


def _functions():
    global _declared
    if _declared is None:
        lib = _lib.lib()
        size_p = ctypes.POINTER(ctypes.c_size_t)
        for name, restype, argtypes in (
                ('ringfold_store_set', ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]),
                ('ringfold_store_get', ctypes.c_int,
                 [ctypes.c_char_p, ctypes.c_double, ctypes.c_void_p, ctypes.c_size_t, size_p]),
                ('ringfold_store_check', ctypes.c_int, [ctypes.c_char_p])):
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _declared = lib
    return _declared


def _key(key):
    if not isinstance(key, str):
        raise ValueError('store keys are str, not %r' % type(key).__name__)
    return key.encode('utf-8')


def set(key, value):  # noqa: A001 - the store's own verb
    """Sets `key` to `value` (bytes, or str as UTF-8)."""
    if isinstance(value, str):
        value = value.encode('utf-8')
    value = bytes(value)
    buf = ctypes.create_string_buffer(value, len(value)) if value else None
    _lib.check(_functions().ringfold_store_set(_key(key), buf, len(value)), 'store set %r' % key)


def get(key, timeout=None):
    """The value of `key` (bytes) once it exists; None if `timeout` seconds pass first."""
    lib = _functions()
    k = _key(key)
    length = ctypes.c_size_t(0)
    capacity = 256
    wait = -1.0 if timeout is None else max(0.0, float(timeout))
    while True:
        buf = ctypes.create_string_buffer(capacity)
        rc = lib.ringfold_store_get(k, wait, buf, capacity, ctypes.byref(length))
        if rc == _lib.IN_PROGRESS:
            return None
        if rc == _lib.INVALID_ARGUMENT and length.value > capacity:
            capacity = length.value        # the key exists now: the next call returns at once
            continue
        _lib.check(rc, 'store get %r' % key)
        return buf.raw[:length.value]


def check(key):
    """Whether `key` exists, without waiting."""
    rc = _functions().ringfold_store_check(_key(key))
    if rc < 0:
        _lib.check(-rc, 'store check %r' % key)
    return rc == 1
