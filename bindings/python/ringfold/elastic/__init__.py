"""ringfold.elastic: Horovod's elastic training API (horovod.common.elastic), framework-neutral,
over ringfold's engine and ringfoldrun's elastic mode (docs/elastic.md).

    import ringfold
    import ringfold.elastic

    ringfold.init()
    state = ringfold.elastic.ObjectState(epoch=0, weights=w)

    @ringfold.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                                  # ringfold collectives on numpy arrays
            state.commit()

    train(state)

Contract
  * run(func): the elastic loop (ringfold.elastic.loop.run_fn) with ringfold.shutdown and
    ringfold.init as the reset; framework modules wrap their own (ringfold.torch.elastic.run).
  * State, ObjectState: ringfold.elastic.state. HorovodInternalError, HostsUpdatedInterrupt:
    ringfold.exceptions (the same classes everywhere).
  * membership: the worker side of ringfoldrun's protocol (which incarnation, pending updates,
    rejoining); nothing in it runs outside elastic mode.
"""
from ringfold import basics as _basics
from ringfold.elastic import membership
from ringfold.elastic.loop import run_fn
from ringfold.elastic.state import State, ObjectState, broadcast_object
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt


def run(func):
    """Decorator running func(state, ...) elastically: state.sync() before it, and a reset (new
    membership, state restored or committed, synced again) whenever a worker fails or hosts
    change. Collective operations must not be called by the wrapped function before its
    first state use (new workers would run them while the others sync)."""
    return run_fn(func, _basics.shutdown, _basics.init)


__all__ = ['run', 'run_fn', 'State', 'ObjectState', 'broadcast_object', 'membership',
           'HorovodInternalError', 'HostsUpdatedInterrupt']
