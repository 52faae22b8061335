"""The worker side of ringfoldrun's elastic protocol (docs/elastic.md, "Protocol"): which
incarnation this worker is in, whether the launcher found a host change, and leaving one
incarnation for the next.

Contract
  * enabled(): elastic mode, i.e. RINGFOLD_ELASTIC (or HOROVOD_ELASTIC) is 1 -- ringfoldrun sets
    it, with RINGFOLD_ELASTIC_WORKER_ID and RINGFOLD_INCARNATION, for every worker it starts
    with --host-discovery-script. Outside elastic mode nothing here touches the store.
  * update_pending(): whether `elastic/inc<N>/update` is set for this worker's incarnation N
    (one store round trip, no waiting).
  * rejoin(reason): called with the engine shut down. Sets `elastic/inc<N>/ready/<worker id>` to
    `reason` ("failed" or "interrupted"), then waits for `elastic/current` to name a later
    incarnation M, polling `elastic/failed` too: a reason there raises RuntimeError with it. It
    then reads `elastic/inc<M>/table`: a worker that is not in it exits the process with status 0
    (sys.exit(0): the launcher removed its host); otherwise the rank variables (RINGFOLD_RANK,
    _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE, the HOROVOD_* twins the launcher
    set, HOROVOD_HOSTNAME) and RINGFOLD_INCARNATION=M are set in os.environ for the next init,
    and the table row is returned. The wait is bounded: RINGFOLD_ELASTIC_TIMEOUT (the
    launcher's --elastic-timeout, 600 s by default) plus the launcher's own wait for silent
    workers (RINGFOLD_TIMEOUT + 5 s) plus 10 s, so that the launcher's verdict (`elastic/failed`)
    arrives first; past it, TimeoutError names the keys waited for.
  * Poll interval: 20 ms (a store round trip on the launcher's host; the figure in
    bench/results/python_elastic.md includes it).
"""
import os
import sys
import time

from ringfold.elastic import _store

POLL_SECONDS = 0.02

# Table columns after the worker id, and the variables they set (RINGFOLD_ names, and HOROVOD_
# twins where the launcher gave them).
_COLUMNS = ('RANK', 'SIZE', 'LOCAL_RANK', 'LOCAL_SIZE', 'CROSS_RANK', 'CROSS_SIZE')


def enabled():
    value = os.environ.get('RINGFOLD_ELASTIC') or os.environ.get('HOROVOD_ELASTIC') or '0'
    return value.strip().lower() in ('1', 'true', 'yes', 'on')


def worker_id():
    wid = os.environ.get('RINGFOLD_ELASTIC_WORKER_ID')
    if not wid:
        raise RuntimeError('ringfold.elastic: RINGFOLD_ELASTIC=1 but RINGFOLD_ELASTIC_WORKER_ID is not set; '
                           'elastic workers are started by ringfoldrun --host-discovery-script')
    return wid


def incarnation():
    text = os.environ.get('RINGFOLD_INCARNATION')
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise RuntimeError('ringfold.elastic: RINGFOLD_INCARNATION=%r is not an incarnation number; '
                           'elastic workers are started by ringfoldrun --host-discovery-script' % (text,)) from None
    if n < 1:
        raise RuntimeError('ringfold.elastic: RINGFOLD_INCARNATION=%d must be at least 1' % n)
    return n


def _seconds(names, default):
    for name in names:
        text = os.environ.get(name)
        if text:
            try:
                return float(text)
            except ValueError:
                raise RuntimeError('ringfold.elastic: %s=%r is not a number of seconds' % (name, text)) from None
    return default


def wait_budget():
    """Seconds rejoin() waits for the next incarnation (see the module contract)."""
    elastic_timeout = _seconds(('RINGFOLD_ELASTIC_TIMEOUT', 'HOROVOD_ELASTIC_TIMEOUT'), 600.0)
    peer_timeout = _seconds(('RINGFOLD_TIMEOUT', 'HOROVOD_GLOO_TIMEOUT_SECONDS'), 60.0)
    return elastic_timeout + peer_timeout + 5.0 + 10.0


def update_pending():
    return _store.check('elastic/inc%d/update' % incarnation())


class Row:
    """One line of an incarnation's table."""

    def __init__(self, line):
        fields = line.split()
        if len(fields) != 8:
            raise RuntimeError('ringfold.elastic: malformed table line %r (expected: worker id, rank, size, '
                               'local rank, local size, cross rank, cross size, host)' % line)
        self.worker_id = fields[0]
        try:
            self.values = dict(zip(_COLUMNS, (int(f) for f in fields[1:7])))
        except ValueError:
            raise RuntimeError('ringfold.elastic: malformed table line %r' % line) from None
        self.host = fields[7]

    def __getattr__(self, name):
        try:
            return self.__dict__['values'][name.upper()]
        except KeyError:
            raise AttributeError(name) from None


def read_table(n):
    """The rows of incarnation n's table, in rank order (it exists once elastic/current >= n)."""
    value = _store.get('elastic/inc%d/table' % n, timeout=30.0)
    if value is None:
        raise RuntimeError('ringfold.elastic: elastic/current names incarnation %d but its table '
                           'elastic/inc%d/table is not in the store' % (n, n))
    return [Row(line) for line in value.decode('utf-8').splitlines() if line.strip()]


def _failure():
    if _store.check('elastic/failed'):
        reason = (_store.get('elastic/failed', timeout=5.0) or b'').decode('utf-8', 'replace').strip()
        raise RuntimeError('ringfold.elastic: the job cannot go on: %s' % (reason or 'ringfoldrun set elastic/failed'))


def wait_for_next(n, budget=None):
    """Waits until elastic/current names an incarnation after n; returns it (see rejoin)."""
    budget = wait_budget() if budget is None else budget
    deadline = time.monotonic() + budget
    while True:
        _failure()
        current = _store.get('elastic/current', timeout=0.0)
        if current is not None:
            try:
                m = int(current.decode('ascii').strip())
            except ValueError:
                raise RuntimeError('ringfold.elastic: elastic/current holds %r, not an incarnation' % current) from None
            if m > n:
                return m
        if time.monotonic() >= deadline:
            raise TimeoutError('ringfold.elastic: no incarnation after %d within %.0f s (waited for '
                               'elastic/current > %d and watched elastic/failed; RINGFOLD_ELASTIC_TIMEOUT '
                               'bounds this wait)' % (n, budget, n))
        time.sleep(POLL_SECONDS)


def _apply(row, m):
    env = os.environ
    for column, value in row.values.items():
        env['RINGFOLD_' + column] = str(value)
        if 'HOROVOD_' + column in env:       # the launcher set both names; they must agree
            env['HOROVOD_' + column] = str(value)
    if 'HOROVOD_HOSTNAME' in env:
        env['HOROVOD_HOSTNAME'] = row.host
    env['RINGFOLD_INCARNATION'] = str(m)


def rejoin(reason):
    """Leaves this incarnation with `reason` and prepares the environment for the next init
    (see the module contract). Returns the table row of this worker."""
    if reason not in ('failed', 'interrupted'):
        raise ValueError('rejoin(reason): "failed" or "interrupted", not %r' % (reason,))
    me, n = worker_id(), incarnation()
    _store.set('elastic/inc%d/ready/%s' % (n, me), reason)
    m = wait_for_next(n)
    rows = read_table(m)
    mine = [r for r in rows if r.worker_id == me]
    if not mine:
        print('ringfold.elastic: worker %s is not a member of incarnation %d (its host was removed); '
              'exiting' % (me, m), file=sys.stderr, flush=True)
        sys.exit(0)
    _apply(mine[0], m)
    return mine[0]
