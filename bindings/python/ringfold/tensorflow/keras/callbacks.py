"""Horovod's horovod.tensorflow.keras.callbacks: ringfold.keras.callbacks (Keras 3)."""
from ringfold.keras.callbacks import (BroadcastGlobalVariablesCallback, MetricAverageCallback,  # noqa: F401
                                      LearningRateScheduleCallback, LearningRateWarmupCallback)
