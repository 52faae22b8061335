"""The process that runs one rank of a ringfold.spark job: `python -m ringfold.spark._worker PAYLOAD RESULT`.

Contract
  * Started by _task.run_rank with the rank's RINGFOLD_* environment. It dies with the process
    that started it (PR_SET_PDEATHSIG, SIGKILL): Spark kills a cancelled or failed barrier
    task's Python worker, and the rank must not outlive it. If that parent is already gone
    when it starts (RINGFOLD_SPARK_PARENT_PID no longer its parent), it exits at once.
  * PAYLOAD is a cloudpickle of (fn, args, kwargs). It calls fn(*args, **kwargs) and writes to
    RESULT a pickle of ('ok', cloudpickled return value) and exits 0, or of ('error', info)
    (info: failure_info's dict) and exits 1. SystemExit(0 or None) counts as returning
    None; any other SystemExit is a failure.
  * stdout and stderr are the pipes the task forwards, line by line; the log channel
    (ringfold.spark.log_to_driver) is the file descriptor in RINGFOLD_SPARK_LOG_FD.
"""
import ctypes
import os
import pickle
import signal
import sys
import traceback


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the task still kills us on its way out
        return
    parent = os.environ.get('RINGFOLD_SPARK_PARENT_PID')
    if parent and os.getppid() != int(parent):
        os._exit(1)


def _dumps(value):
    """cloudpickle, the same module the driver used (RINGFOLD_SPARK_PICKLER), so that the driver
    can load what it makes."""
    if os.environ.get('RINGFOLD_SPARK_PICKLER') == 'pyspark':
        from pyspark import cloudpickle
    else:
        import cloudpickle
    return cloudpickle.dumps(value)


def failure_info(exc, what):
    """A picklable description of exc (the exception itself when it pickles)."""
    info = {'type': type(exc).__name__, 'message': str(exc), 'what': what,
            'traceback': ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            'exception': None}
    try:
        info['exception'] = _dumps(exc)
        pickle.loads(info['exception'])
    except Exception:
        info['exception'] = None
    return info


def main(argv):
    _die_with_parent()
    payload_path, result_path = argv[1], argv[2]
    try:
        with open(payload_path, 'rb') as f:
            fn, args, kwargs = pickle.load(f)
    except BaseException as e:
        what = 'could not load the function'
        if isinstance(e, ImportError):
            what += ('; a module it refers to cannot be imported here: install it on the executors, '
                     'ship it with SparkContext.addPyFile, or pickle it by value with '
                     'cloudpickle.register_pickle_by_value(module)')
        outcome = ('error', failure_info(e, what))
    else:
        try:
            value = fn(*args, **kwargs)
            outcome = None
        except SystemExit as e:
            if e.code in (None, 0):
                value, outcome = None, None
            else:
                outcome = ('error', failure_info(e, 'the function called sys.exit(%r)' % (e.code,)))
        except BaseException as e:
            outcome = ('error', failure_info(e, 'the function raised'))
        if outcome is None:
            try:
                outcome = ('ok', _dumps(value))
            except Exception as e:
                outcome = ('error', failure_info(e, 'its return value could not be pickled'))
    if outcome[0] == 'error':
        sys.stderr.write(outcome[1]['traceback'])
    sys.stdout.flush()
    sys.stderr.flush()
    with open(result_path + '.tmp', 'wb') as f:
        pickle.dump(outcome, f)
    os.replace(result_path + '.tmp', result_path)
    return 0 if outcome[0] == 'ok' else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
