"""Horovod's TorchState (horovod/torch/elastic/state.py) over ringfold.

Contract (Horovod's)
  * TorchState(model=None, optimizer=None, **kwargs): every keyword becomes an attribute. Values
    with a handler -- a torch.nn.Module, a torch.optim.Optimizer, an ElasticSampler (the
    registry: get_handler_registry()/set_handler_registry()) -- are saved as deep copies of
    their state_dict() and restored with load_state_dict(); sync() broadcasts them from rank 0
    (broadcast_parameters, broadcast_optimizer_state, broadcast_object of the sampler's state).
    Other values are handled as ObjectState handles them (saved by reference, restored,
    broadcast as one pickled dictionary).
  * Assigning a new value to a handled attribute (state.model = other) replaces the handler's
    value and saves it at once.
  * save() / restore() / sync() act on every handler, then on the plain attributes.
"""
import copy

import torch

from ringfold.elastic.state import ObjectState
from ringfold.torch.elastic.sampler import ElasticSampler
from ringfold.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from ringfold.basics import rank


class TorchState(ObjectState):
    """State of a PyTorch training process: models, optimizers, samplers and plain values.

    Args:
        model: optional PyTorch model.
        optimizer: optional PyTorch optimizer.
        kwargs: further attributes to sync; a value with a handler (see the module contract) is
            synced by it, any other as an ordinary Python object.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super(TorchState, self).sync()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)


class StateHandler(object):
    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def __init__(self, model):
        super().__init__(model)
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_model_state)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, optimizer):
        super().__init__(optimizer)
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_optimizer_state)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_sampler_state)

    def sync(self):
        # Broadcast and load, so every rank repartitions with the same count.
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(v):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(v, handler_type):
            return handler_cls(v)
    return None


def _get_handlers(kwargs):
    handlers = {}
    remainder = {}
    for k, v in kwargs.items():
        handler = _get_handler(v)
        if handler:
            handlers[k] = handler
        else:
            remainder[k] = v
    return handlers, remainder
