"""ringfold.keras (Keras 3) under ringfoldrun, on the backend KERAS_BACKEND names: tensorflow
(tests/python/run.sh tensorflow NP) or torch (tests/python/run.sh keras-torch NP). model.fit
with DistributedOptimizer against one process training on the concatenated batch, gradient
accumulation, the broadcast callback on ranks seeded differently, metric averaging, warm-up,
load_model and the XLA switch-off. Skipped where Keras 3 is not installed."""
import os

import numpy as np
import pytest

keras = pytest.importorskip('keras')
if int(keras.__version__.split('.')[0]) < 3:
    pytest.skip('Keras 3 is needed', allow_module_level=True)
if keras.backend.backend() not in ('tensorflow', 'torch'):
    pytest.skip('backend %s' % keras.backend.backend(), allow_module_level=True)

import ringfold  # noqa: E402
import ringfold.keras as hvd  # noqa: E402


def _same_on_every_rank(arrays):
    flat = np.concatenate([np.asarray(a, np.float64).reshape(-1) for a in arrays])
    spread = ringfold.allreduce(flat, op=ringfold.Max) - ringfold.allreduce(flat, op=ringfold.Min)
    return float(np.max(np.abs(spread))) if spread.size else 0.0


def _data(n_per_rank, steps, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(hvd.size(), steps, n_per_rank, 6)).astype(np.float32)
    y = rng.normal(size=(hvd.size(), steps, n_per_rank, 1)).astype(np.float32)
    return x, y


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.layers.Input((6,)), keras.layers.Dense(4, activation='tanh'),
                             keras.layers.Dense(1)])


@pytest.mark.parametrize('opt', ['sgd', 'adam'])
def test_fit_matches_one_process_on_concatenated_batch(opt):
    n, steps = 8, 3
    x, y = _data(n, steps)
    make = (lambda: keras.optimizers.SGD(0.1, momentum=0.5)) if opt == 'sgd' else \
        (lambda: keras.optimizers.Adam(0.01))
    model = _model()
    dist = hvd.DistributedOptimizer(make())
    assert type(dist).__name__ == type(make()).__name__ and isinstance(dist, type(make()))
    model.compile(optimizer=dist, loss='mse', jit_compile=False)
    r = hvd.rank()
    model.fit(x[r].reshape(-1, 6), y[r].reshape(-1, 1), batch_size=n, epochs=1, shuffle=False, verbose=0)
    ref = _model()
    ref.compile(optimizer=make(), loss='mse', jit_compile=False)
    # Step k of the reference sees every rank's k-th batch.
    rx = x.transpose(1, 0, 2, 3).reshape(-1, 6)
    ry = y.transpose(1, 0, 2, 3).reshape(-1, 1)
    ref.fit(rx, ry, batch_size=n * hvd.size(), epochs=1, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert int(keras.ops.convert_to_numpy(dist.iterations)) == steps


@pytest.mark.parametrize('average', [False, True])
def test_backward_passes_per_step(average):
    n, micro = 4, 2
    x, y = _data(n, micro, seed=5)
    lr = 0.05
    model = _model(1)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=micro,
                                                     average_aggregated_gradients=average),
                  loss='mse', jit_compile=False)
    r = hvd.rank()
    model.fit(x[r].reshape(-1, 6), y[r].reshape(-1, 1), batch_size=n, epochs=1, shuffle=False, verbose=0)
    # The sum (or mean) of the micro-steps' rank-averaged gradients, applied once: one SGD
    # step on the whole concatenated batch with lr * micro (or lr).
    ref = _model(1)
    ref.compile(optimizer=keras.optimizers.SGD(lr if average else lr * micro), loss='mse', jit_compile=False)
    ref.fit(x.reshape(-1, 6), y.reshape(-1, 1), batch_size=n * micro * hvd.size(), epochs=1,
            shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_broadcast_callback_makes_model_and_optimizer_identical():
    model = _model(seed=100 + hvd.rank())          # different initial weights on every rank
    assert hvd.size() == 1 or _same_on_every_rank(model.get_weights()) > 0
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss='mse',
                  jit_compile=False)
    rng = np.random.default_rng(hvd.rank())         # different data too
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.normal(size=(16, 1)).astype(np.float32)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert _same_on_every_rank(model.get_weights()) < 1e-6
    opt_vars = [keras.ops.convert_to_numpy(v) for v in model.optimizer.variables]
    assert len(opt_vars) > 2 and _same_on_every_rank(opt_vars) < 1e-6


def test_metric_average_callback():
    seen = {}

    class Record(keras.callbacks.Callback):
        def __init__(self, key):
            super().__init__()
            self.key = key

        def on_epoch_end(self, epoch, logs=None):
            seen[self.key] = dict(logs)
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss='mse',
                  metrics=['mae'], jit_compile=False)
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(8, 6)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32) * (hvd.rank() + 1)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[Record('local'), hvd.callbacks.MetricAverageCallback(), Record('avg')])
    for name in ('loss', 'mae'):
        local = np.float32(seen['local'][name])
        expect = ringfold.allreduce(np.array([local], np.float32))[0]
        assert seen['avg'][name] == pytest.approx(float(expect), rel=1e-6)
        assert _same_on_every_rank([seen['avg'][name]]) == 0.0


def test_learning_rate_warmup_follows_horovods_formula():
    lrs = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  loss='mse', jit_compile=False)
    x = np.ones((8, 6), np.float32)
    y = np.ones((8, 1), np.float32)
    warm = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2)
    history = model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[warm, Record()])
    size, steps = hvd.size(), 4
    expect = []
    for epoch in range(3):
        for batch in range(steps):
            if epoch < 2:
                e = epoch + batch / steps + 1.0 / steps
                expect.append(0.1 / size * (e * (size - 1) / 2 + 1))
            else:
                expect.append(expect[-1])
    np.testing.assert_allclose(lrs, expect, rtol=1e-6)
    assert history.history['lr'][-1] == pytest.approx(expect[-1], rel=1e-6)
    assert model.optimizer.momentum == pytest.approx(0.9)      # restored after every batch


def test_schedule_callback_staircase():
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(1.0)), loss='mse',
                  jit_compile=False)
    sched = hvd.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=0.5, start_epoch=1)
    history = model.fit(np.ones((4, 6), np.float32), np.ones((4, 1), np.float32), batch_size=2,
                        epochs=3, verbose=0, callbacks=[sched])
    np.testing.assert_allclose(history.history['lr'], [1.0, 1.0, 0.5])


def test_load_model_wraps_the_optimizer(tmp_path):
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss='mse',
                  jit_compile=False)
    model.fit(np.ones((4, 6), np.float32), np.ones((4, 1), np.float32), batch_size=2, verbose=0)
    path = os.path.join(str(tmp_path), 'rank%d.keras' % hvd.rank())
    model.save(path)
    loaded = hvd.load_model(path)
    assert getattr(type(loaded.optimizer), '_rf_distributed', False)
    assert type(loaded.optimizer).__name__ == 'Adam'
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == 2
    plain = keras.models.load_model(path)              # loads without ringfold too
    assert not getattr(type(plain.optimizer), '_rf_distributed', False)
    loaded.fit(np.ones((4, 6), np.float32), np.ones((4, 1), np.float32), batch_size=2, verbose=0)


def test_jit_compile_turned_off_by_the_callback():
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss='mse',
                  jit_compile=True)
    with pytest.warns(UserWarning, match='XLA'):
        model.fit(np.ones((4, 6), np.float32), np.ones((4, 1), np.float32), batch_size=2, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert model.jit_compile is False


def test_argument_errors_and_helpers():
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
    with pytest.raises(RuntimeError):
        hvd.broadcast_global_variables(0)
    assert hvd.allreduce(float(hvd.rank()), op=hvd.Sum) == pytest.approx(sum(range(hvd.size())))
    assert hvd.allgather([hvd.rank()]).tolist() == list(range(hvd.size()))
    assert hvd.broadcast(np.array([hvd.rank()]), 0).tolist() == [0]
