"""ringfold.tensorflow.keras: Horovod's horovod.tensorflow.keras import path for tf.keras
(Keras 3, TensorFlow >= 2.16). The implementation is ringfold.keras (see its contract); this
module checks that tf.keras is Keras 3 on the TensorFlow backend and adds Horovod's names.

    import ringfold.tensorflow.keras as hvd     # was: import horovod.tensorflow.keras as hvd
"""
import tensorflow as tf

if int(tf.keras.__version__.split('.')[0]) < 3:
    raise ImportError(
        'ringfold.tensorflow.keras needs tf.keras to be Keras 3 (found %s: tf-keras, Keras 2, is '
        'selected by TF_USE_LEGACY_KERAS=1). Unset TF_USE_LEGACY_KERAS, or use '
        'ringfold.tensorflow.DistributedGradientTape in a custom training loop.'
        % tf.keras.__version__)

import keras as _keras  # noqa: E402

if _keras.backend.backend() != 'tensorflow':
    raise ImportError('ringfold.tensorflow.keras: the Keras backend is %r (KERAS_BACKEND); use '
                      'ringfold.keras for other backends' % _keras.backend.backend())

from ringfold.keras import *  # noqa: E402,F401,F403
from ringfold.keras import (DistributedOptimizer, broadcast_variables, broadcast_global_variables,  # noqa: E402,F401
                            Compression, load_model, allreduce, allgather, broadcast,
                            reducescatter, init, shutdown, Average, Sum, Adasum)
from ringfold.tensorflow.keras import callbacks  # noqa: E402,F401
