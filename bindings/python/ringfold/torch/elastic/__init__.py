"""ringfold.torch.elastic: Horovod's horovod.torch.elastic over ringfold (docs/elastic.md).

    import ringfold.torch as hvd                 # was: import horovod.torch as hvd

    hvd.init()
    model, optimizer = ..., hvd.DistributedOptimizer(...)
    sampler = hvd.elastic.ElasticSampler(dataset)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, state.batch): ...
                state.commit()                   # every few batches
            state.sampler.set_epoch(state.epoch + 1); state.batch = 0

    train(state)

Contract
  * run(func): ringfold.elastic.loop.run_fn with ringfold.torch's shutdown and init as the
    reset (so the torch module's handle tables are cleared with the engine's).
  * TorchState, ElasticSampler: Horovod's (ringfold.torch.elastic.state / .sampler).
  * ObjectState (ringfold: also here, with ringfold.torch's broadcast_object and rank as its
    defaults), State, HostsUpdatedInterrupt, HorovodInternalError: the framework-neutral ones.
"""

from ringfold.elastic import State, run_fn
from ringfold.elastic.state import ObjectState as _ObjectState
from ringfold.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from ringfold.torch.elastic.sampler import ElasticSampler
from ringfold.torch.elastic.state import TorchState


def _shutdown():
    from ringfold import torch as hvd
    hvd.shutdown()


def _init():
    from ringfold import torch as hvd
    hvd.init()


def run(func):
    """Decorator used to run the elastic training process: state.sync() before func, and on a
    worker's failure or a host change, a reset (state restored or committed, new membership,
    synced again from the new rank 0) and func again. func's first argument is the State.
    Collective operations must not be the first thing func does before using the state (new
    workers would run them while the others sync)."""
    return run_fn(func, _shutdown, _init)


class ObjectState(_ObjectState):
    """ObjectState whose defaults are ringfold.torch's broadcast_object and rank (Horovod's
    signature: ObjectState(bcast_object, get_rank, **kwargs))."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        from ringfold.torch.functions import broadcast_object
        from ringfold.basics import rank
        super().__init__(bcast_object or broadcast_object, get_rank or rank, **kwargs)


__all__ = ['TorchState', 'ObjectState', 'State', 'ElasticSampler', 'run', 'HorovodInternalError',
           'HostsUpdatedInterrupt']
