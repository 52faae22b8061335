"""TF_CONFIG bootstrap (tests/python/run.sh tf-config): ranks started by hand with only
TensorFlow's TF_CONFIG (as Azure ML's TensorFlow jobs get it) find each other: the chief is
rank 0, the workers follow. Skipped unless run that way (RINGFOLD_TEST_TF_CONFIG=1)."""
import json
import os

import pytest

if not os.environ.get('RINGFOLD_TEST_TF_CONFIG'):
    pytest.skip('run by tests/python/run.sh tf-config', allow_module_level=True)
tf = pytest.importorskip('tensorflow')
import ringfold.tensorflow as hvd  # noqa: E402


def test_ranks_come_from_tf_config():
    config = json.loads(os.environ['TF_CONFIG'])
    task = config['task']
    chiefs = len(config['cluster'].get('chief', []))
    expect_rank = 0 if task['type'] == 'chief' else chiefs + task['index']
    assert hvd.rank() == expect_rank
    assert hvd.size() == chiefs + len(config['cluster']['worker'])
    assert hvd.local_size() == hvd.size() and hvd.cross_size() == 1
    total = hvd.allreduce(tf.constant([float(hvd.rank())]), op=hvd.Sum)
    assert total.numpy().tolist() == [float(sum(range(hvd.size())))]
