"""Horovod's Keras callbacks (horovod/_keras/callbacks.py) for Keras 3, any supported backend.

Contract
  * BroadcastGlobalVariablesCallback(root_rank, device='', local_variables=None): broadcasts
    the model's variables from root_rank when training begins (so the first step already runs
    on identical weights; Horovod waits for the end of the first batch) and, after the first
    batch, the model's and the optimizer's variables (slot variables exist only after a step),
    so model and optimizer state are identical on every rank after step 1. Variables in
    local_variables are never broadcast. It also turns XLA off (model.jit_compile = False,
    with a warning) when the model would compile with it: ringfold's ops are py-functions.
  * MetricAverageCallback(device=''): at the end of every epoch, replaces each metric in
    `logs` by its average over the ranks, as Horovod: every value as float32 (Horovod makes a
    floatx constant), averaged in one allreduce, in sorted-name order.
  * LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0, end_epoch=None,
    staircase=True, momentum_correction=True, steps_per_epoch=None) and
    LearningRateWarmupCallback(initial_lr, warmup_epochs=5, momentum_correction=True,
    steps_per_epoch=None, verbose=0): Horovod's formulas and defaults. The learning rate is
    Keras 3's optimizer.learning_rate variable (a LearningRateSchedule cannot be overridden:
    ValueError). Momentum correction scales optimizer.momentum for the batch and restores it;
    Keras 3's SGD keeps momentum as a Python float that a compiled train function reads when
    it is traced, so the correction only takes effect when the model runs eagerly
    (run_eagerly=True, or the torch backend); the learning rate always does. steps_per_epoch
    defaults to Keras's params['steps'].
"""
import warnings

import numpy as np
import keras

from ringfold import basics
from ringfold.basics import Average
from ringfold.keras import _impl


def _optimizer_variables(optimizer):
    variables = optimizer.variables
    return variables() if callable(variables) else variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_vars = set()
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """This variable is never broadcast."""
        self._local_vars.add(id(var))

    def set_model(self, model):
        super().set_model(model)
        if getattr(model, 'jit_compile', False):
            warnings.warn('ringfold: turning XLA off for this model (jit_compile=False): '
                          'ringfold\'s collectives are py-functions, which XLA cannot compile')
            model.jit_compile = False

    def _broadcast(self, with_optimizer):
        variables = [v for v in self.model.variables if id(v) not in self._local_vars]
        if with_optimizer and self.model.optimizer is not None:
            variables += [v for v in _optimizer_variables(self.model.optimizer)
                          if id(v) not in self._local_vars]
        _impl.broadcast_variables(variables, self.root_rank)

    def on_train_begin(self, logs=None):
        if self.model.built:
            self._broadcast(with_optimizer=False)

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        self._broadcast(with_optimizer=True)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs:
            return
        names = sorted(logs)
        values = np.array([np.asarray(logs[n], dtype=np.float32).reshape(()) for n in names],
                          dtype=np.float32)
        averaged = _impl.np_allreduce(values, None, Average)
        for n, v in zip(names, averaged):
            logs[n] = v

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


def _get_lr(optimizer):
    lr = optimizer.learning_rate
    return float(keras.ops.convert_to_numpy(lr))


def _set_lr(optimizer, value):
    if isinstance(optimizer._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        raise ValueError('ringfold.keras learning-rate callbacks cannot override a '
                         'LearningRateSchedule; use a float learning rate')
    optimizer.learning_rate = value


class LearningRateScheduleCallback(keras.callbacks.Callback):
    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.initial_lr = initial_lr
        self.restore_momentum = None
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if not callable(multiplier):
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)
        else:
            self.multiplier = multiplier
        if self.initial_lr is None:
            raise ValueError('Parameter `initial_lr` is required')

    def _autodetect_steps_per_epoch(self):
        if self.params.get('steps'):
            return self.params['steps']
        if self.params.get('samples') and self.params.get('batch_size'):
            return self.params['samples'] // self.params['batch_size']
        raise ValueError('Could not autodetect the number of steps per epoch. Please specify the '
                         'steps_per_epoch parameter to the %s()' % self.__class__.__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _get_lr(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        _set_lr(optimizer, new_lr)
        momentum = getattr(optimizer, 'momentum', None)
        if momentum is not None and self.momentum_correction and old_lr:
            if hasattr(momentum, 'assign'):
                self.restore_momentum = float(keras.ops.convert_to_numpy(momentum))
                momentum.assign(self.restore_momentum * new_lr / old_lr)
            else:
                self.restore_momentum = float(momentum)
                optimizer.momentum = self.restore_momentum * new_lr / old_lr

    def _restore_momentum_if_needed(self):
        if self.restore_momentum:
            optimizer = self.model.optimizer
            if hasattr(optimizer.momentum, 'assign'):
                optimizer.momentum.assign(self.restore_momentum)
            else:
                optimizer.momentum = self.restore_momentum
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch or
                (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            epoch = self.current_epoch + float(batch) / self.steps_per_epoch
            self._adjust_learning_rate(epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs['lr'] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        def multiplier(epoch):
            # Horovod: epoch counts from the end of the first batch.
            epoch += 1. / self.steps_per_epoch
            return 1. / basics.size() * (epoch * (basics.size() - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and basics.rank() == 0:
            print('\nEpoch %d: finished gradual learning rate warmup to %g.'
                  % (epoch + 1, _get_lr(self.model.optimizer)))
