"""The elastic training loop: Horovod's run_fn (horovod/common/elastic.py) over ringfold, with the
membership change of ringfoldrun's elastic protocol between shutdown and init.

Contract
  * run_fn(func, shutdown, init) returns wrapper(state, *args, **kwargs), which loops:
        state.sync(); return func(state, *args, **kwargs)
    and on
      - HorovodInternalError (a peer died or went silent, or init/sync failed):
        state.restore(); reason "failed";
      - HostsUpdatedInterrupt (raised by state.commit() on every rank at the same commit, just
        after the state was saved): reason "interrupted";
    then resets: shutdown(); in elastic mode membership.rejoin(reason) (this worker tells the
    launcher it is ready, waits for the next incarnation's table, exits with status 0 when it
    is not in it, else takes its new rank variables); init(); state.on_reset() (reset() and
    the reset callbacks); and loops again, so the state is broadcast from the new rank 0 (the
    oldest survivor) before func runs again. An init that fails (a member of the new
    incarnation died during it) is one more "failed" reset.
  * ringfold: the sync is never skipped (HostsUpdatedInterrupt.skip_sync is honoured only when a
    caller raises it with True outside elastic mode): new workers, which always sync, never
    wait for survivors that skip it (Horovod #3494).
  * Outside elastic mode (RINGFOLD_ELASTIC unset) nobody can hand out a new membership: a
    HorovodInternalError is raised again after state.restore(), as Horovod does without its
    driver; a HostsUpdatedInterrupt raised by the caller's code resets the engine in place
    (shutdown, init with the same ranks) and runs func again.
  * Errors other than these two propagate at once (the process exits, and ringfoldrun counts the
    worker as failed).
"""
import functools
import sys

from ringfold.elastic import membership
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt


def _reset(reason, shutdown, init, elastic):
    """shutdown(); rejoin (elastic); init(). Returns the reason of a failed init, or None."""
    while True:
        shutdown()
        if elastic:
            membership.rejoin(reason)
        try:
            init()
            return
        except HorovodInternalError as e:
            if not elastic:
                raise
            print('ringfold.elastic: init of incarnation %d failed (%s); waiting for the next'
                  % (membership.incarnation(), e), file=sys.stderr, flush=True)
            reason = 'failed'


def run_fn(func, shutdown, init):
    """Wraps func(state, *args, **kwargs) in the elastic loop (see the module contract)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        elastic = membership.enabled()
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                if not elastic:
                    raise
                reason, skip_sync = 'failed', False
            except HostsUpdatedInterrupt as e:
                reason, skip_sync = 'interrupted', bool(e.skip_sync) and not elastic
            _reset(reason, shutdown, init, elastic)
            state.on_reset()
    return wrapper
