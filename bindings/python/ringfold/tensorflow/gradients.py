"""Gradient allreduce for DistributedGradientTape and the Keras DistributedOptimizer
(Horovod's _make_allreduce_grads_fn and _DistributedGradientTape).

Contract
  * allreduce_grads(grads, vars) returns the grads averaged (or summed: `op`) over the process
    set, None entries kept None. Dense gradients travel in ONE py-function call per invocation
    (eager: one direct call): it enqueues one grouped allreduce per group (`groups`: an int n
    splits the gradients into n groups in order, as Horovod's split_list; a list of variable
    lists makes those groups and one group per remaining gradient; None: one group), then waits
    for all. tf.IndexedSlices are allgathered as ringfold.tensorflow.allreduce does, unless
    sparse_as_dense converts them to dense first.
  * Scaling is Horovod's: for op Average, prescale 1/gradient_predivide_factor and postscale
    gradient_predivide_factor, the engine dividing by the set size; compression casts before
    and after (Compression.fp16 / bf16).
  * On a set of one rank, or one this rank is not in, the gradients pass through unchanged
    (Horovod's _allreduce_cond).
  * DistributedGradientTape(tape, ...) returns an object of tape's own class (isinstance holds)
    sharing the recorded tape; register_local_source(var) keeps a gradient local (divided by
    the set size when scale_local_gradients, as Horovod). Keyword defaults are Horovod's.
  * backward_passes_per_step=n > 1 (ringfold's addition; Horovod's tape lacks it, its Keras
    optimizer has it): gradient() adds each call's gradients into local accumulators and
    allreduces only on every n-th call, as Horovod's LocalGradientAggregationHelperEager does
    for the optimizer. Calls 1..n-1 return the local sums so far; call n returns the reduced
    sums (divided by n when average_aggregated_gradients) and clears them. The accumulators
    outlive the tape: they belong to the list of sources (so the usual one-tape-per-step loop
    works) and are created at the first call (under tf.init_scope inside tf.function).
    should_apply_gradients() says whether the last gradient() call communicated: apply the
    gradients only then. IndexedSlices need sparse_as_dense (Horovod's ValueError otherwise).
"""
import warnings

import tensorflow as tf

from ringfold.basics import Average, Adasum
from ringfold.process_sets import global_process_set
from ringfold.tensorflow import mpi_ops
from ringfold.tensorflow.compression import Compression


def _ref(variable):
    """A hashable identity for a variable: tf.Variable.ref(), or the object's id for Keras 3
    variables (keras.Variable has no ref(); model.trainable_variables are those)."""
    ref = getattr(variable, 'ref', None)
    return ref() if callable(ref) else ('object', id(variable))


def _split_list(items, n):
    """Horovod's split_list: n nearly equal consecutive chunks."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def fused_allreduce(tensors, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, groups=None, name=None):
    """Allreduces dense tensors in one py-function call: one grouped allreduce per group (lists
    of indices into `tensors`; None: one group). No gradient is registered."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t in tensors:
        mpi_ops._code(t.dtype, mpi_ops._REDUCIBLE, 'allreduce')
    groups = groups or [list(range(len(tensors)))]
    ps_id = process_set._id()
    base = mpi_ops._graph_name('HorovodAllreduce_' + (name or 'Grads'), tensors, None) \
        if not mpi_ops._executing_eagerly() else None
    prescale, postscale = float(prescale_factor), float(postscale_factor)

    def run(*arrays):
        handles, order = [], []
        try:
            for g, idx in enumerate(groups):
                names = None if base is None else ['%s.%d.%d' % (base, g, j) for j in range(len(idx))]
                handles.extend(mpi_ops._np_allreduce_start([arrays[i] for i in idx], names, op,
                                                           prescale, postscale, ps_id))
                order.extend(idx)
        except BaseException:
            mpi_ops._wait_all(handles)   # let what was enqueued finish before buffers go
            raise
        results = mpi_ops._wait_all(handles)
        out = [None] * len(arrays)
        for i, r in zip(order, results):
            out[i] = r
        return out
    outs = mpi_ops._run('allreduce', run, tensors, [t.dtype for t in tensors], base)
    for o, t in zip(outs, tensors):
        o.set_shape(t.shape)
    return outs


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set=global_process_set):
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if not (process_set.included() and process_set.size() > 1):
            return grads
        out = list(grads)
        dense = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                from ringfold.tensorflow import allreduce
                out[i] = allreduce(g, op=op, process_set=process_set)
            else:
                dense.append(i)
        if not dense:
            return out
        # Groups, as positions in `dense`.
        position = {i: p for p, i in enumerate(dense)}
        if groups is None:
            group_list = None
        elif isinstance(groups, list):
            # Keyed by variable identity (Horovod keys by var.name, which repeats for unnamed
            # tf.Variables).
            key_to_index = {}
            for i in dense:
                key_to_index.setdefault(_ref(vars[i]) if vars is not None else i, i)
            group_list = []
            for group in groups:
                members = []
                for v in group:
                    i = key_to_index.pop(_ref(v), None)
                    if i is not None:
                        members.append(position[i])
                if members:
                    group_list.append(members)
            group_list.extend([position[i]] for i in sorted(key_to_index.values()))
        else:
            group_list = [g for g in _split_list(list(range(len(dense))), groups) if g]
        compressed, ctxs = zip(*[compression.compress(grads[i]) for i in dense])
        reduced = fused_allreduce(list(compressed), op, prescale, postscale, process_set,
                                  group_list, name=name)
        for i, r, ctx in zip(dense, reduced, ctxs):
            out[i] = compression.decompress(r, ctx)
        return out
    return allreduce_grads


def _check_args(op, gradient_predivide_factor, num_groups, groups):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op == Adasum:
        raise NotImplementedError('ringfold has no Adasum (see docs/compatibility.md)')
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` '
                      'and will be removed in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if not (isinstance(groups, list) or groups > 0):
            raise ValueError('groups should be a non-negative integer or '
                             'a list of list of tf.Variable.')
    return groups


class _LocalAggregation:
    """Horovod's local gradient aggregation for one list of sources (see the module contract)."""

    def __init__(self, passes, average, sparse_as_dense):
        self.passes, self.average, self.sparse_as_dense = passes, average, sparse_as_dense
        self.counter = None
        self.sums = {}

    def step(self, grads, reduce):
        """Adds `grads` (None entries stay None) and returns (gradients, communicated)."""
        present = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError('IndexedSlices are not supported when `backward_passes_per_step` '
                                     '> 1 and `sparse_as_dense` is False.')
                g = tf.convert_to_tensor(g)
            present.append((i, g))
        with tf.init_scope():
            if self.counter is None:
                self.counter = tf.Variable(0, dtype=tf.int64, trainable=False)
            for i, g in present:
                if i not in self.sums:
                    self.sums[i] = tf.Variable(tf.zeros(g.shape, g.dtype), trainable=False)
        totals = [self.sums[i].assign_add(g).read_value() for i, g in present] if present else []
        self.counter.assign_add(1)
        communicated = tf.equal(self.counter.read_value(), self.passes)

        def communicate():
            out = list(grads)
            for (i, _), t in zip(present, totals):
                out[i] = t
            out = reduce(out)
            reduced = [out[i] / self.passes if self.average else out[i] for i, _ in present]
            with tf.control_dependencies(reduced):
                self.counter.assign(0)
                for i, _ in present:
                    self.sums[i].assign(tf.zeros_like(self.sums[i]))
            return [tf.identity(r) for r in reduced]

        totals = tf.cond(communicated, communicate, lambda: [tf.identity(t) for t in totals]) \
            if present else []
        result = list(grads)
        for (i, _), t in zip(present, totals):
            result[i] = t
        return result, communicated


# One aggregation per (sources, passes, average): DistributedGradientTape is usually made anew
# every step, while the sums must live across n steps.
_aggregations = {}


class _DistributedGradientTape(tf.GradientTape):
    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False, watch_accessed_variables=True,
                 process_set=global_process_set, scale_local_gradients=True,
                 backward_passes_per_step=1, average_aggregated_gradients=False):
        super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        self._tape = tape
        self._allreduce_grads = _make_allreduce_grads_fn(
            'DistributedGradientTape', device_dense, device_sparse, compression, sparse_as_dense,
            op, gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()
        self._passes = backward_passes_per_step
        self._aggregation_key = (backward_passes_per_step, bool(average_aggregated_gradients),
                                 bool(sparse_as_dense))
        self._communicated = None

    def should_apply_gradients(self):
        """True (a bool tensor) when the last gradient() call allreduced: with
        backward_passes_per_step = n, on every n-th call. Always True when n is 1."""
        if self._passes == 1:
            return tf.constant(True)
        if self._communicated is None:
            raise ValueError('should_apply_gradients() is known only after gradient()')
        return self._communicated

    def register_local_source(self, source):
        """Keeps this source's gradient local (not allreduced)."""
        self._local_sources.add(_ref(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        gradients = super(self.__class__, self).gradient(target, sources, output_gradients)
        single = not isinstance(sources, (list, tuple))
        src_list = [sources] if single else list(tf.nest.flatten(sources))
        grad_list = [gradients] if single else list(tf.nest.flatten(gradients))
        if self._passes == 1:
            grad_list = self._reduce(src_list, grad_list, use_generic_names)
        else:
            key = (tuple(_ref(s) for s in src_list),) + self._aggregation_key
            aggregation = _aggregations.get(key)
            if aggregation is None:
                aggregation = _aggregations[key] = _LocalAggregation(*self._aggregation_key)
            grad_list, self._communicated = aggregation.step(
                grad_list, lambda g: self._reduce(src_list, g, use_generic_names))
        if single:
            return grad_list[0]
        return tf.nest.pack_sequence_as(sources, grad_list)

    def _reduce(self, src_list, grad_list, use_generic_names):
        """Allreduces the gradients of the sources that are not local; scales the local ones."""
        grad_list = list(grad_list)
        rs, rg, idx = [], [], []
        for i, (s, g) in enumerate(zip(src_list, grad_list)):
            if _ref(s) not in self._local_sources:
                rs.append(s)
                rg.append(g)
                idx.append(i)
        rg = self._allreduce_grads(rg, rs, use_generic_names)
        for i, g in zip(idx, rg):
            grad_list[i] = g
        if self.scale_local_gradients and self._local_sources:
            n = float(self.process_set.size())
            for i, s in enumerate(src_list):
                g = grad_list[i]
                if _ref(s) in self._local_sources and g is not None:
                    if isinstance(g, tf.IndexedSlices):
                        grad_list[i] = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
                    else:
                        grad_list[i] = g / n
        return grad_list

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        gradients = self.gradient(target, sources, output_gradients, use_generic_names)
        local, global_ = [], []
        for s, g in zip(sources, gradients):
            (local if _ref(s) in self._local_sources else global_).append((s, g))
        return local, global_


def DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=global_process_set,
                            scale_local_gradients=True, backward_passes_per_step=1,
                            average_aggregated_gradients=False):
    """Horovod's DistributedGradientTape: gradient() allreduces (see the module contract)."""
    groups = _check_args(op, gradient_predivide_factor, num_groups, groups)
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step <= 0:
        raise ValueError('backward_passes_per_step must be > 0, not %r' % (backward_passes_per_step,))
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
               dict(_DistributedGradientTape.__dict__))
    return cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
               gradient_predivide_factor, groups, gradtape._persistent,
               gradtape._watch_accessed_variables, process_set=process_set,
               scale_local_gradients=scale_local_gradients,
               backward_passes_per_step=backward_passes_per_step,
               average_aggregated_gradients=average_aggregated_gradients)


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False, op=Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True, backward_passes_per_step=1,
                                   average_aggregated_gradients=False):
    """Horovod's: DistributedGradientTape whose local_layers' gradients stay local."""
    if local_layers is None:
        local_layers = []
    elif hasattr(local_layers, 'trainable_weights'):
        local_layers = [local_layers]
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients,
                                   backward_passes_per_step, average_aggregated_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape

