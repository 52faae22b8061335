"""Helpers for code running as a rank of a ringfold.spark job (horovod.spark.task's names).

Contract
  * get_available_devices(): the GPUs Spark assigned to this rank's task, as strings that index
    CUDA_VISIBLE_DEVICES as ringfold.spark set it (e.g. ['1'] for local rank 1 when each task
    has one GPU); [] when Spark assigned none or outside a ringfold.spark job.
  * log_to_driver(message): sends message to the driver's output even when
    HorovodRunner(driver_log_verbosity='log_callback_only') keeps the rest in the executor logs;
    outside a ringfold.spark job it prints to stdout.
"""
import os
import sys


def get_available_devices():
    gpus = os.environ.get('RINGFOLD_SPARK_GPUS', '')
    return [g for g in gpus.split(',') if g]


def log_to_driver(message):
    text = str(message)
    fd = os.environ.get('RINGFOLD_SPARK_LOG_FD')
    if fd is None:
        print(text)
        return
    sys.stdout.flush()
    data = (text if text.endswith('\n') else text + '\n').encode('utf-8', 'replace')
    while data:
        data = data[os.write(int(fd), data):]
