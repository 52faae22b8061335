"""Horovod's TensorFlow helpers (horovod/tensorflow/functions.py): broadcast of variables and
Python objects, allgather of Python objects.

Contract
  * broadcast_variables(variables, root_rank, process_set, inplace=False): every variable is
    assigned the root's value; all of them travel in one call (enqueued together, then waited
    for), eagerly or inside tf.function. Returns None eagerly, the grouped assign op in a
    graph. `inplace` is accepted for Horovod's signature (the result is the same).
  * broadcast_(variables, root_rank, name=None, process_set): Horovod's in-place broadcast;
    returns the variables' new values.
  * broadcast_object(obj, root_rank=0, session=None, name=None, process_set) and
    allgather_object(obj, session=None, name=None, process_set): cloudpickle when installed,
    pickle otherwise; `name` defaults to the object's type name, as in Horovod. Eager only
    (as Horovod in TensorFlow 2).
"""
import io
import pickle

import numpy as np
import tensorflow as tf

from ringfold import _lib
from ringfold.basics import rank
from ringfold.process_sets import _root_in_set, global_process_set
from ringfold.tensorflow import mpi_ops

try:
    import cloudpickle as _pickler
except ImportError:       # pragma: no cover - cloudpickle is optional
    _pickler = pickle


def _broadcast_values(values, root_rank, process_set, what):
    values = [tf.convert_to_tensor(v) for v in values]
    for v in values:
        mpi_ops._code(v.dtype, mpi_ops._COPYABLE, what)
    root = _root_in_set(process_set, root_rank, what)
    ps_id = process_set._id()
    names = None
    if not mpi_ops._executing_eagerly():
        names = ['HorovodBroadcast_%s' % mpi_ops._normalize_name(v.name) for v in values]
    outs = mpi_ops._run('broadcast', lambda *a: mpi_ops._np_broadcast_many(a, root, names, ps_id),
                        values, [v.dtype for v in values])
    for o, v in zip(outs, values):
        o.set_shape(v.shape)
    return outs


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    variables = list(variables)
    if not variables:
        return None
    outs = _broadcast_values([v.read_value() if hasattr(v, 'read_value') else v for v in variables],
                             root_rank, process_set, 'broadcast_variables')
    assigns = [v.assign(o) for v, o in zip(variables, outs)]
    if mpi_ops._executing_eagerly():
        return None
    return tf.group(*assigns)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    variables = list(variables)
    outs = _broadcast_values([v.read_value() for v in variables], root_rank, process_set, 'broadcast_')
    for v, o in zip(variables, outs):
        v.assign(o)
    return [v.read_value() for v in variables]


def _dumps(obj):
    buffer = io.BytesIO()
    _pickler.dump(obj, buffer)
    return buffer.getvalue()


def _bcast_np(array, root, name, ps_id):
    return mpi_ops._wait(mpi_ops._np_simple_start(_lib.BROADCAST, array, name, ps_id, root=root))


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """The root's `obj` on every rank of the set."""
    if name is None:
        name = type(obj).__name__
    root = _root_in_set(process_set, root_rank, 'broadcast_object')
    ps_id = process_set._id()
    if rank() == root_rank:
        payload = np.frombuffer(_dumps(obj), dtype=np.uint8)
        _bcast_np(np.array([payload.size], dtype=np.int64), root, name + '.sz', ps_id)
        _bcast_np(payload, root, name + '.t', ps_id)
        return obj
    length = _bcast_np(np.zeros(1, dtype=np.int64), root, name + '.sz', ps_id)
    payload = _bcast_np(np.zeros(int(length[0]), dtype=np.uint8), root, name + '.t', ps_id)
    return pickle.loads(payload.tobytes())


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's `obj`, in rank order."""
    if name is None:
        name = type(obj).__name__
    ps_id = process_set._id()
    payload = np.frombuffer(_dumps(obj), dtype=np.uint8)
    sizes = mpi_ops._wait(mpi_ops._np_simple_start(_lib.ALLGATHER, np.array([payload.size], np.int64),
                                                   name + '.sz', ps_id))
    gathered = mpi_ops._wait(mpi_ops._np_simple_start(_lib.ALLGATHER, payload, name + '.t', ps_id))
    objects, offset = [], 0
    for size in sizes.tolist():
        objects.append(pickle.loads(gathered[offset:offset + size].tobytes()))
        offset += size
    return objects
