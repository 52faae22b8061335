"""ringfold.spark: run a ringfold job as one Spark barrier stage (horovod.spark.run's and
Databricks' HorovodRunner's APIs). docs/spark.md is the user's guide.

    import ringfold.spark
    results = ringfold.spark.run(train, args=(lr,), num_proc=4)   # one value per rank, rank order
    hr = ringfold.spark.HorovodRunner(np=4)                        # Databricks' API
    model = hr.run(train, lr=0.1)                                  # rank 0's return value
    ringfold.spark.HorovodRunner(np=-2).run(train, lr=0.1)         # 2 ranks on the driver, no Spark

Contract
  * run(fn, args, kwargs, num_proc, start_timeout, use_mpi, use_gloo, extra_mpi_args, env,
    stdout, stderr, verbose, nics, prefix_output_with_timestamp, executable): horovod.spark.run's
    signature and positional order. Runs fn(*args, **kwargs) on num_proc ranks (default: the
    SparkContext's defaultParallelism) and returns their return values in rank order. Needs an
    active SparkContext. use_mpi, use_gloo and extra_mpi_args are accepted and ignored with a
    warning (ringfold has its own transport). env: variables added to each task's environment
    (a None value removes one). stdout/stderr: where the ranks' forwarded output goes (default
    sys.stdout/sys.stderr), each line prefixed `[rank]<stdout>:` (with `time.asctime()` first
    when prefix_output_with_timestamp). nics: the interfaces ranks use (RINGFOLD_SOCKET_IFNAME).
    executable: the Python that runs each rank on the executors (default: the executor's own,
    sys.executable of its Python worker). start_timeout (default HOROVOD_SPARK_START_TIMEOUT
    or 600 s): how long to wait for enough slots and for every task to start.
  * The job is one barrier stage of num_proc tasks in its own job group (cancelled, tasks
    interrupted, when the driver gets KeyboardInterrupt or any error); each task runs its rank
    in a subprocess (_task, _worker). Before anything starts, num_proc is checked against the
    slots the cluster has (local masters: at once; others: waiting up to start_timeout for
    executors) and a shortfall is a ValueError naming both numbers.
  * A rank that raises (or exits, or is killed) fails the whole job at once: the driver raises
    JobFailedError naming the rank, its host, its exception (also as __cause__ when it can be
    unpickled) and the last lines of its output; ranks that then fail only because a peer died
    (HorovodInternalError) are listed, not reported instead of it.
  * Each job gets a fresh 256-bit secret (the store's and the driver service's) made on the
    driver; it reaches the tasks inside Spark's task closure, so it is as secret as Spark's RPC
    (docs/spark.md).
  * HorovodRunner(*, np, driver_log_verbosity='log_callback_only'): np > 0 runs np ranks as
    Spark tasks; np == 0 one per slot of the cluster; np < 0 runs -np ranks as subprocesses of
    the driver, without Spark or Java (importing this module never imports pyspark). run(main,
    **kwargs) returns rank 0's return value. driver_log_verbosity='all' forwards every line of
    output to the driver; 'log_callback_only' only what ranks send with log_to_driver(), the
    rest going to the executor logs.
"""
import itertools
import os
import secrets
import threading
import time
import warnings

from ringfold.spark._driver import DriverService, Job, JobFailedError
from ringfold.spark._local import LocalContext, LocalGroup
from ringfold.spark import _task
from ringfold.spark.task import get_available_devices, log_to_driver

__all__ = ['run', 'HorovodRunner', 'JobFailedError', 'log_to_driver', 'get_available_devices']

STORE_PORT_ATTEMPTS = 3
_job_ids = itertools.count(1)


def _pickler(prefer_pyspark):
    """(module, name): the cloudpickle the payload is made with (see _worker._dumps)."""
    if prefer_pyspark:
        from pyspark import cloudpickle
        return cloudpickle, 'pyspark'
    try:
        import cloudpickle
        return cloudpickle, 'cloudpickle'
    except ImportError:
        try:
            from pyspark import cloudpickle
        except ImportError:
            raise ImportError('ringfold.spark needs cloudpickle (pip install cloudpickle) to ship '
                              'the function to its ranks') from None
        return cloudpickle, 'pyspark'


def _start_timeout(start_timeout):
    if start_timeout is None:
        start_timeout = float(os.environ.get('HOROVOD_SPARK_START_TIMEOUT', '600'))
    if start_timeout <= 0:
        raise ValueError('start_timeout must be positive, not %r' % (start_timeout,))
    return float(start_timeout)


def _spec(fn, args, kwargs, num_proc, env, nics, executable, forward, prefer_pyspark):
    pickler, name = _pickler(prefer_pyspark)
    return {'payload': pickler.dumps((fn, tuple(args), dict(kwargs))), 'pickler': name,
            'secret': secrets.token_hex(32), 'num_proc': num_proc, 'env': dict(env or {}),
            'nics': sorted(nics) if nics else None, 'executable': executable,
            'forward': forward.split(':')[0], 'rank0_result_only': forward.endswith(':rank0'),
            'connect_timeout': 60}


def _attempts(one_attempt, verbose):
    """Runs one_attempt() again (a new port, a new secret) when rank 0's store port was taken."""
    for attempt in range(1, STORE_PORT_ATTEMPTS + 1):
        try:
            return one_attempt()
        except JobFailedError as e:
            if not getattr(e, 'store_port_taken', False) or attempt == STORE_PORT_ATTEMPTS:
                raise
            if verbose >= 1:
                warnings.warn('ringfold.spark: another process took rank 0\'s store port; '
                              'starting the job again with a new one (%s)' % str(e).splitlines()[0])


# --- Spark ---------------------------------------------------------------------------------------

def _active_context():
    try:
        from pyspark import SparkContext
    except ImportError:
        raise ImportError('ringfold.spark.run needs pyspark (bindings/python/requirements-spark.txt); '
                          'HorovodRunner(np=-N) runs N local ranks without it') from None
    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError('ringfold.spark: there is no active SparkContext; create a SparkSession '
                           'first (SparkSession.builder...getOrCreate())')
    return sc


def _slots(sc):
    """How many tasks the cluster can run at once: what Spark's barrier scheduler checks."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # an API Spark may rename: fall back to its public estimate
        return int(sc.defaultParallelism)


def _check_slots(sc, num_proc, start_timeout, verbose):
    slots = _slots(sc)
    if slots >= num_proc:
        return
    fixed = sc.master.startswith('local') and not sc.master.startswith('local-cluster')
    deadline = time.monotonic() + start_timeout
    if not fixed and verbose >= 1:
        print('ringfold.spark: waiting up to %g s for %d task slots (the cluster has %d now)'
              % (start_timeout, num_proc, slots), flush=True)
    while not fixed and time.monotonic() < deadline:
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        slots = _slots(sc)
        if slots >= num_proc:
            return
    raise ValueError(
        'ringfold.spark: %d ranks need %d task slots at once (one barrier stage), but this Spark '
        'cluster (master %s) has %d%s. Use num_proc <= %d, or give the cluster more executors or '
        'cores per executor (spark.executor.cores, spark.task.cpus).'
        % (num_proc, num_proc, sc.master, slots,
           '' if fixed else ' after waiting start_timeout=%g s' % start_timeout, slots))


def _bind_host(sc):
    conf = sc.getConf()
    advertised = conf.get('spark.driver.host') or '127.0.0.1'
    return conf.get('spark.driver.bindAddress') or advertised, advertised


def _spark_attempt(sc, spec_args, start_timeout, stdout, stderr, timestamps, verbose):
    spec = _spec(*spec_args, prefer_pyspark=True)
    num_proc = spec['num_proc']
    bind, advertised = _bind_host(sc)
    service = DriverService(spec['secret'], bind, num_proc, stdout, stderr, timestamps)
    spec['driver'] = (advertised, service.address[1])
    group = 'ringfold.spark.run.%d.%s' % (next(_job_ids), secrets.token_hex(4))
    done = threading.Event()
    error = []

    def task(_):
        from pyspark import BarrierTaskContext
        from ringfold.spark import _task as task_module
        task_module.run_task(BarrierTaskContext.get(), spec)
        return iter(())

    def collect():
        try:
            sc.setJobGroup(group, 'ringfold.spark.run: %d ranks' % num_proc, interruptOnCancel=True)
            sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task).collect()
        except BaseException as e:  # reported through wait()
            error.append(e)
        finally:
            done.set()
            service.notify()

    thread = threading.Thread(target=collect, name=group, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        results = Job(service, num_proc, start_timeout).wait(done, lambda: error[0] if error else None)
        thread.join(30)
        if verbose >= 2:
            print('ringfold.spark: all %d tasks started %.2f s after the job was submitted; its '
                  'results came %.2f s after' % (num_proc, service.all_connected_at - started,
                                                 time.monotonic() - started), flush=True)
        return results
    except BaseException:
        sc.cancelJobGroup(group)
        thread.join(30)
        raise
    finally:
        service.close()


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None,
        use_mpi=None, use_gloo=None, extra_mpi_args=None,
        env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None, _forward='all'):
    """Runs fn(*args, **kwargs) on num_proc ranks, one Spark barrier task each; returns the
    ranks' return values in rank order (see the module contract)."""
    for name, value in (('use_mpi', use_mpi), ('use_gloo', use_gloo), ('extra_mpi_args', extra_mpi_args)):
        if value is not None:
            warnings.warn('ringfold.spark.run(%s=...) is ignored: ringfold uses neither MPI nor Gloo'
                          % name, stacklevel=2)
    start_timeout = _start_timeout(start_timeout)
    sc = _active_context()
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError('ringfold.spark.run: num_proc must be a positive int, not %r' % (num_proc,))
    if nics and isinstance(nics, str):
        nics = [nics]
    _check_slots(sc, num_proc, start_timeout, verbose)
    spec_args = (fn, args, kwargs, num_proc, env, nics, executable, _forward)
    return _attempts(lambda: _spark_attempt(sc, spec_args, start_timeout, stdout, stderr,
                                            prefix_output_with_timestamp, verbose), verbose)


# --- local ranks (HorovodRunner(np<0)) -------------------------------------------------------------

def _local_attempt(spec_args, start_timeout, stdout, stderr):
    spec = _spec(*spec_args, prefer_pyspark=False)
    num_proc = spec['num_proc']
    service = DriverService(spec['secret'], '127.0.0.1', num_proc, stdout, stderr)
    spec['driver'] = service.address
    cancelled = threading.Event()
    group = LocalGroup(num_proc, cancelled, start_timeout)
    left = [num_proc]
    lock = threading.Lock()
    done = threading.Event()

    def task(partition):
        try:
            _task.run_task(LocalContext(partition, group), spec, cancelled)
        except Exception:
            pass  # reported to the service (or, before that, seen as a missing result)
        finally:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()
                    service.notify()

    threads = [threading.Thread(target=task, args=(p,), daemon=True, name='ringfold.spark.local.%d' % p)
               for p in range(num_proc)]
    for t in threads:
        t.start()
    try:
        return Job(service, num_proc, start_timeout).wait(done, lambda: None)
    finally:
        cancelled.set()
        for t in threads:
            t.join(30)
        service.close()


def _run_local(fn, kwargs, num_proc, start_timeout=None, stdout=None, stderr=None, verbose=1):
    spec_args = (fn, (), kwargs, num_proc, None, None, None, 'all:rank0')
    timeout = _start_timeout(start_timeout)
    return _attempts(lambda: _local_attempt(spec_args, timeout, stdout, stderr), verbose)


# --- HorovodRunner ---------------------------------------------------------------------------------

class HorovodRunner:
    """Databricks' HorovodRunner API over ringfold.spark (see the module contract)."""

    _VERBOSITY = ('all', 'log_callback_only')

    def __init__(self, *, np, driver_log_verbosity='log_callback_only'):
        if isinstance(np, bool) or not isinstance(np, int):
            raise TypeError('HorovodRunner(np=...) takes an int, not %r' % (np,))
        if driver_log_verbosity not in self._VERBOSITY:
            raise ValueError('HorovodRunner(driver_log_verbosity=%r): use one of %s'
                             % (driver_log_verbosity, ', '.join(self._VERBOSITY)))
        self.num_processor = np
        self.driver_log_verbosity = driver_log_verbosity

    def run(self, main, **kwargs):
        """Runs main(**kwargs) on every rank; returns rank 0's return value."""
        np = self.num_processor
        if np < 0:
            return _run_local(main, kwargs, -np)[0]
        num_proc = np if np > 0 else _slots(_active_context())
        if num_proc < 1:
            raise ValueError('HorovodRunner(np=0) runs one rank per task slot, and the cluster has '
                             'none yet (no executor has registered): pass np > 0 to wait for them')
        forward = 'all' if self.driver_log_verbosity == 'all' else 'log'
        return run(main, kwargs=kwargs, num_proc=num_proc, _forward=forward + ':rank0')[0]
