"""ctypes binding of libringfold's C ABI (bindings/c/ringfold.h).

Contract
  * `lib()` loads the library once per process and declares every function's argument and
    result types, so a wrong call fails in ctypes instead of corrupting memory.
  * Where the library comes from, first match wins:
      1. $RINGFOLD_LIBRARY, the path of a libringfold.so (a build tree, for development);
      2. the copy shipped inside this package (ringfold/lib/libringfold.so.0, put there by
         `pip install .`).
    Neither existing raises ImportError naming both places.
  * `check(status)` turns a non-zero status into an exception carrying the library's
    message for this thread (ringfold_last_error), as Horovod's torch module raises them:
    INVALID_ARGUMENT (a bad argument on this rank) is an InvalidArgumentError, a ValueError;
    every other engine failure is a HorovodInternalError, a RuntimeError.
  * Nothing here imports numpy or a deep-learning framework.
"""
import ctypes
import os

from ringfold.exceptions import HorovodInternalError, InvalidArgumentError

# The codes below are ringfold.h's, copied by hand (ctypes cannot read a header);
# tests/bindings/python_codes_test.py (ctest BindingsPython.CodesMatchRingfoldH) holds them to it.

# Status codes (ringfold.h).
OK = 0
UNKNOWN_ERROR = 1
PRECONDITION_ERROR = 2
ABORTED = 3
INVALID_ARGUMENT = 4
IN_PROGRESS = 5

# Data types (ringfold.h: NCCL's numbering, bool, then NCCL's two 8-bit floats). No framework
# binding maps a tensor type to the 8-bit floats (Horovod has none).
(INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16, BOOL, FLOAT8_E4M3,
 FLOAT8_E5M2) = range(13)
DTYPE_NAMES = ('int8', 'uint8', 'int32', 'uint32', 'int64', 'uint64', 'float16', 'float32',
               'float64', 'bfloat16', 'bool', 'float8_e4m3', 'float8_e5m2')
DTYPE_SIZES = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1, 1)

# Operation types (ringfold_op_t.type: Horovod's request types, and ringfold's own REDUCE).
ALLREDUCE, ALLGATHER, BROADCAST, JOIN, ALLTOALL, BARRIER, REDUCESCATTER, REDUCE = 0, 1, 2, 3, 5, 6, 7, 8

CPU_DEVICE = -1

# Process-set results (ringfold.h: Horovod's HOROVOD_PROCESS_SET_ERROR_*, then ringfold's INVALID).
PROCESS_SET_ERROR_INIT, PROCESS_SET_ERROR_DYNAMIC, PROCESS_SET_ERROR_UNKNOWN_SET = -1, -2, -3
PROCESS_SET_ERROR_FOREIGN_SET, PROCESS_SET_ERROR_SHUTDOWN, PROCESS_SET_ERROR_EXISTING_SET = -4, -5, -6
PROCESS_SET_ERROR_INVALID = -7

_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_c_int_p = ctypes.POINTER(ctypes.c_int)


class Tensor(ctypes.Structure):
    """ringfold_tensor_t."""
    _fields_ = [('data', ctypes.c_void_p), ('dtype', ctypes.c_int), ('shape', _c_int64_p),
                ('ndim', ctypes.c_int), ('device', ctypes.c_int), ('stream', ctypes.c_void_p)]


class Op(ctypes.Structure):
    """ringfold_op_t."""
    _fields_ = [('type', ctypes.c_int), ('name', ctypes.c_char_p), ('reduce_op', ctypes.c_int),
                ('prescale', ctypes.c_double), ('postscale', ctypes.c_double),
                ('root', ctypes.c_int), ('splits', _c_int64_p), ('nsplits', ctypes.c_int),
                ('process_set', ctypes.c_int)]


_Tensor_p = ctypes.POINTER(Tensor)

# name: (result type, argument types)
_SIGNATURES = {
    'horovod_init': (ctypes.c_bool, [_c_int_p, ctypes.c_int, _c_int_p, _c_int_p, ctypes.c_int]),
    'ringfold_init': (ctypes.c_int, [_c_int_p, ctypes.c_int, _c_int_p, _c_int_p, ctypes.c_int]),
    'ringfold_shutdown': (ctypes.c_int, []),
    'horovod_is_initialized': (ctypes.c_int, []),
    'horovod_rank': (ctypes.c_int, []),
    'horovod_local_rank': (ctypes.c_int, []),
    'horovod_size': (ctypes.c_int, []),
    'horovod_local_size': (ctypes.c_int, []),
    'horovod_cross_rank': (ctypes.c_int, []),
    'horovod_cross_size': (ctypes.c_int, []),
    'horovod_is_homogeneous': (ctypes.c_bool, []),
    'horovod_mpi_threads_supported': (ctypes.c_int, []),
    'horovod_mpi_enabled': (ctypes.c_bool, []),
    'horovod_mpi_built': (ctypes.c_bool, []),
    'horovod_gloo_enabled': (ctypes.c_bool, []),
    'horovod_gloo_built': (ctypes.c_bool, []),
    'horovod_nccl_built': (ctypes.c_int, []),
    'horovod_ddl_built': (ctypes.c_bool, []),
    'horovod_ccl_built': (ctypes.c_bool, []),
    'horovod_cuda_built': (ctypes.c_bool, []),
    'horovod_rocm_built': (ctypes.c_bool, []),
    'horovod_add_process_set': (ctypes.c_int, [_c_int_p, ctypes.c_int]),
    'horovod_remove_process_set': (ctypes.c_int, [ctypes.c_int]),
    'horovod_process_set_rank': (ctypes.c_int, [ctypes.c_int]),
    'horovod_process_set_size': (ctypes.c_int, [ctypes.c_int]),
    'horovod_process_set_included': (ctypes.c_int, [ctypes.c_int]),
    'horovod_number_of_process_sets': (ctypes.c_int, []),
    'horovod_process_set_ids': (None, [_c_int_p]),
    'horovod_process_set_ranks': (ctypes.c_int, [ctypes.c_int, _c_int_p]),
    'horovod_start_timeline': (ctypes.c_int, [ctypes.c_char_p, ctypes.c_bool]),
    'horovod_stop_timeline': (ctypes.c_int, []),
    'ringfold_last_error': (ctypes.c_char_p, []),
    'ringfold_version': (ctypes.c_char_p, []),
    'ringfold_enqueue': (ctypes.c_int, [ctypes.POINTER(Op), _Tensor_p, _Tensor_p, _c_int64_p]),
    'ringfold_allreduce_async': (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, _c_int64_p, ctypes.c_int, ctypes.c_char_p,
        ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int, _c_int64_p]),
    'ringfold_grouped_allreduce_async': (ctypes.c_int, [
        ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p), _c_int_p,
        ctypes.POINTER(_c_int64_p), _c_int_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
        ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int, _c_int64_p]),
    'ringfold_cancel': (ctypes.c_int, [ctypes.c_int64]),
    'ringfold_poll': (ctypes.c_int, [ctypes.c_int64]),
    'ringfold_wait': (ctypes.c_int, [ctypes.c_int64, ctypes.c_double]),
    'ringfold_release': (ctypes.c_int, [ctypes.c_int64]),
    'ringfold_result_ndim': (ctypes.c_int, [ctypes.c_int64, _c_int_p]),
    'ringfold_result_shape': (ctypes.c_int, [ctypes.c_int64, _c_int64_p, ctypes.c_int]),
    'ringfold_result_bytes': (ctypes.c_int, [ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]),
    'ringfold_result_copy': (ctypes.c_int, [ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t]),
    'ringfold_result_data': (ctypes.c_int, [ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]),
    'ringfold_result_received_splits': (ctypes.c_int, [ctypes.c_int64, _c_int64_p, ctypes.c_int]),
    'ringfold_join_last_rank': (ctypes.c_int, [ctypes.c_int64, _c_int_p]),
}

_lib = None


def library_path():
    """The path `lib()` loads (see the module's contract)."""
    env = os.environ.get('RINGFOLD_LIBRARY')
    if env:
        if not os.path.isfile(env):
            raise ImportError('RINGFOLD_LIBRARY=%s: no such file' % env)
        return env
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'lib', 'libringfold.so.0')
    if os.path.isfile(shipped):
        return shipped
    raise ImportError('libringfold not found: neither RINGFOLD_LIBRARY is set nor %s exists '
                      '(install the package with `pip install .`, or point RINGFOLD_LIBRARY at '
                      'a build tree\'s libringfold.so)' % shipped)


def lib():
    global _lib
    if _lib is None:
        handle = ctypes.CDLL(library_path())
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = handle
    return _lib


def last_error():
    return lib().ringfold_last_error().decode('utf-8', 'replace')


def check(status, what=None):
    """Raises InvalidArgumentError (INVALID_ARGUMENT) or HorovodInternalError (any other
    failure) for a non-OK status, with the library's message."""
    if status != OK:
        message = last_error() or ('status %d' % status)
        error = InvalidArgumentError if status == INVALID_ARGUMENT else HorovodInternalError
        raise error('%s: %s' % (what, message) if what else message)


def int_array(values):
    """A (ctypes int array, length) pair for a C `const int*` argument, (None, 0) if empty."""
    values = [int(v) for v in values]
    if not values:
        return None, 0
    return (ctypes.c_int * len(values))(*values), len(values)
