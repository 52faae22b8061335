"""The Keras sample of Horovod's guides with one import changed (horovod.tensorflow ->
ringfold.tensorflow), plus what Keras 3 and an offline machine need: a Flatten layer (the
guides' sample fails on Keras 3 without it) and scikit-learn's bundled digits data set
(8x8 images, 10 classes; no download) instead of MNIST.

    python examples/keras_train.py                          # one process
    ringfoldrun -np 2 python examples/keras_train.py        # 2 ranks: each trains on its shard

Prints "final test accuracy: X" on rank 0 (tests/python/run.sh keras-example NP compares the
2- and 4-rank accuracy with one process's).
"""
import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import ringfold.tensorflow as hvd

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=12)
parser.add_argument('--batch-size', type=int, default=32)
args = parser.parse_args()

hvd.init()
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')
tf.keras.utils.set_random_seed(1234 + hvd.rank())   # different on purpose: the callback aligns them

digits = load_digits()
images = (digits.images / 16.0).astype('float32')
train_images, test_images, train_labels, test_labels = train_test_split(
    images, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
# Each rank trains on its own shard, so an epoch covers the training set once in all.
train_images = train_images[hvd.rank()::hvd.size()]
train_labels = train_labels[hvd.rank()::hvd.size()]

model = tf.keras.models.Sequential([
    tf.keras.layers.Input((8, 8)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10, activation='softmax')
])
optimizer = tf.keras.optimizers.Adam(0.001 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer)
model.compile(optimizer=optimizer, loss='sparse_categorical_crossentropy', metrics=['accuracy'])
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
             hvd.callbacks.MetricAverageCallback()]
model.fit(train_images, train_labels, batch_size=args.batch_size, epochs=args.epochs,
          callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
loss, accuracy = model.evaluate(test_images, test_labels, verbose=0)
weights = np.concatenate([w.reshape(-1) for w in model.get_weights()])
same = hvd.allreduce(tf.constant(weights), op=hvd.Max) - hvd.allreduce(tf.constant(weights), op=hvd.Min)
if hvd.rank() == 0:
    print('weights identical on every rank: %s' % bool(np.max(np.abs(same.numpy())) == 0.0))
    print('final test accuracy: %.4f' % accuracy)
