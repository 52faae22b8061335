"""Horovod's DistributedOptimizer (horovod/torch/optimizer.py) over ringfold.

Contract
  * DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
    backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
    groups=None, sparse_as_dense=False, process_set=global_process_set) returns an optimizer of
    a subclass of the user's optimizer class, built over the same param_groups.
  * A hook on every parameter fires when backward has accumulated its gradient; after
    backward_passes_per_step passes it starts an asynchronous in-place allreduce of the
    (compressed) gradient, so communication overlaps the rest of backward. With `groups`
    (an int: that many groups of consecutive parameters; or a list of lists of parameters) a
    group's gradients go as one grouped allreduce once all of them are ready.
  * step() first synchronize()s: gradients whose hooks did not fire (unused parameters) are
    sent too (as zeros when None), so every rank submits the same tensors; then it waits,
    decompresses into p.grad and runs the wrapped optimizer's step. Under
    `with optimizer.skip_synchronize():` step() does not synchronize (call synchronize()
    yourself first, e.g. to clip gradients).
  * With op=Average the gradient is divided by gradient_predivide_factor before the sum and
    multiplied by it after, then averaged (Horovod's prescale/postscale split).
  * Sparse gradients (nn.Embedding(sparse=True)) go through sparse_allreduce_async (allgather
    of indices and values) and p.grad is the sparse result, so torch.optim.SparseAdam works.
    With sparse_as_dense=True a dense copy is allreduced and p.grad gets the result back as a
    sparse tensor, as in Horovod. Sparse gradients cannot be part of `groups` (ValueError).
  * set_backward_passes_per_step(passes) and load_state_dict() (which forgets gradients in
    flight and restarts the pass count) behave as Horovod's.
  * Hooks are installed only when this rank is in the process set and the set has more than
    one rank (or RINGFOLD_ELASTIC/HOROVOD_ELASTIC is 1), as in Horovod.
  * Errors: duplicate or missing parameter names raise ValueError at construction; more
    backward passes than backward_passes_per_step before step() raises AssertionError;
    zero_grad() with allreduces in flight raises AssertionError.
"""
import contextlib
import os
import warnings

import torch

from ringfold.basics import Average, Adasum
from ringfold.process_sets import global_process_set
from ringfold.torch import mpi_ops
from ringfold.torch.compression import Compression


class _DistributedOptimizer:
    """Mixed into the user's optimizer class by DistributedOptimizer()."""

    def _init_distributed(self, named_parameters, compression, backward_passes_per_step, op,
                          gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        all_params = [p for group in self.param_groups for p in group['params']]

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('noname.%d.%d' % (g, i), p)
                                for g, group in enumerate(self.param_groups)
                                for i, p in enumerate(group['params'])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError('named_parameters should be a sequence of (name, parameter) tuples, '
                             'usually model.named_parameters()')
        names = [k for k, _ in named_parameters]
        duplicates = sorted({k for k in names if names.count(k) > 1})
        if duplicates:
            raise ValueError('Parameter names in named_parameters must be unique; repeated: %s'
                             % ', '.join(duplicates))
        named_ids = {id(v) for _, v in named_parameters}
        unnamed = [p for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError('named_parameters was specified, but %d of the optimizer\'s parameters '
                             'are not in it (every parameter must be named)' % len(unnamed))
        self._parameter_names = {id(v): k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}

        self._groups = self._make_groups(groups, all_params)
        self._group_of = {id(p): i for i, g in enumerate(self._groups) for p in g}
        self._group_ready = {}
        self._allreduce_delay = {id(p): backward_passes_per_step for p in all_params}
        self._handles = {}            # id(p) -> (handle or None, ctx, p)
        self._group_handles = {}      # group index -> (grouped handle, [(p, ctx, compressed)])
        self._requires_update = {id(p): p for p in all_params if p.requires_grad}
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        process_set._id()             # an unregistered set fails here, naming itself
        elastic = os.environ.get('RINGFOLD_ELASTIC', os.environ.get('HOROVOD_ELASTIC')) == '1'
        if process_set.included() and (process_set.size() > 1 or elastic):
            self._register_hooks()

    @staticmethod
    def _make_groups(groups, all_params):
        if groups is None or groups == 0:
            return []
        trainable = [p for p in all_params if p.requires_grad]
        if isinstance(groups, int):
            if groups < 0:
                raise ValueError('groups must be a non-negative int or a list of lists of parameters')
            per = max(1, -(-len(trainable) // groups))
            return [trainable[i:i + per] for i in range(0, len(trainable), per)]
        if isinstance(groups, list) and all(isinstance(g, list) for g in groups):
            if any(not isinstance(p, torch.Tensor) for g in groups for p in g):
                raise ValueError('groups must consist of torch.Tensor (lists of parameters)')
            ids = [id(p) for g in groups for p in g]
            if len(ids) != len(set(ids)):
                raise ValueError('groups: a parameter appears in more than one group')
            return [list(g) for g in groups]
        raise ValueError('groups must be an int or a list of lists of parameters')

    def _register_hooks(self):
        for p in self._requires_update.values():
            self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _name(self, p):
        return self._parameter_names.get(id(p))

    def _prepare_grad(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad

    def _allreduce_grad_async(self, p):
        grad = self._prepare_grad(p)
        name = self._name(p)
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return mpi_ops.sparse_allreduce_async(grad, name, self.op, self.process_set), None
            grad = grad.to_dense()       # p.grad stays sparse; the result goes back as sparse
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scale_factors()
        handle = mpi_ops.allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.process_set)
        return handle, (ctx, compressed)

    def _allreduce_group_async(self, index):
        params = self._groups[index]
        entries = []
        for p in params:
            grad = self._prepare_grad(p)
            if grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError('DistributedOptimizer: parameter %s has a sparse gradient and is in '
                                     '`groups`; leave it out of groups or use sparse_as_dense=True'
                                     % self._name(p))
                grad = grad.to_dense()
            compressed, ctx = self._compression.compress(grad)
            entries.append((p, ctx, compressed))
        pre, post = self._scale_factors()
        handle = mpi_ops.grouped_allreduce_async_([c for _, _, c in entries],
                                                  name='group.%s' % self._name(params[0]), op=self.op,
                                                  prescale_factor=pre, postscale_factor=post,
                                                  process_set=self.process_set)
        self._group_handles[index] = (handle, entries)

    def _make_hook(self, p):
        key = id(p)

        def hook(*ignore):
            if key in self._handles and self._handles[key][0] is not None and self._allreduce_delay[key] <= 0:
                raise AssertionError(
                    'Gradients were computed more than backward_passes_per_step times before '
                    'call to step(). Increase backward_passes_per_step to accumulate gradients locally.')
            self._allreduce_delay[key] -= 1
            if self._allreduce_delay[key] > 0:
                self._handles[key] = (None, None, p)
                return
            group = self._group_of.get(key)
            if group is None:
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[key] = (handle, ctx, p)
                return
            self._handles[key] = ('group', group, p)
            ready = self._group_ready.setdefault(group, set())
            ready.add(key)
            if len(ready) == len(self._groups[group]):
                self._allreduce_group_async(group)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (starting the ones not started yet)."""
        if not self._hook_handles:
            self._synchronized = True
            return
        for key, p in self._requires_update.items():
            entry = self._handles.get(key)
            if entry is None or entry[0] is None:
                group = self._group_of.get(key)
                if group is None:
                    handle, ctx = self._allreduce_grad_async(p)
                    self._handles[key] = (handle, ctx, p)
                else:
                    self._handles[key] = ('group', group, p)
        for group in range(len(self._groups)):
            if group not in self._group_handles and any(id(p) in self._handles for p in self._groups[group]):
                self._allreduce_group_async(group)
        error = None
        for key, (handle, ctx, p) in list(self._handles.items()):
            if handle == 'group':
                continue
            try:
                output = mpi_ops.synchronize(handle)
                if ctx is None:          # sparse
                    p.grad = output
                else:
                    self._set_grad(p, ctx[0], ctx[1])
            except Exception as e:       # keep going: leave no handle behind
                error = error or e
        for handle, entries in self._group_handles.values():
            try:
                mpi_ops.synchronize(handle)
                for p, ctx, compressed in entries:
                    self._set_grad(p, ctx, compressed)
            except Exception as e:
                error = error or e
        for key in self._allreduce_delay:
            self._allreduce_delay[key] = self.backward_passes_per_step
        self._handles.clear()
        self._group_handles.clear()
        self._group_ready.clear()
        self._synchronized = True
        if error is not None:
            raise error

    def _set_grad(self, p, ctx, compressed):
        result = self._compression.decompress(compressed, ctx)
        if p.grad.is_sparse:                 # sparse_as_dense: back to sparse for the optimizer
            p.grad = result.to_sparse()
        elif result is not p.grad:
            p.grad.copy_(result)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes are accumulated locally before an allreduce."""
        if passes < 1:
            raise ValueError('backward_passes_per_step must be at least 1, not %r' % (passes,))
        self.backward_passes_per_step = passes
        for key in self._allreduce_delay:
            self._allreduce_delay[key] = passes

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; gradients in flight are forgotten and the
        backward-pass count restarts, as in Horovod."""
        self._handles.clear()
        self._group_handles.clear()
        self._group_ready.clear()
        self._synchronized = False
        self._should_synchronize = True
        for key in self._allreduce_delay:
            self._allreduce_delay[key] = self.backward_passes_per_step
        return self._base_class.load_state_dict(self, *args, **kwargs)

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without optimizer.skip_synchronize() context '
                              'after optimizer.synchronize(). This can cause training slowdown. You may '
                              'want to consider using optimizer.skip_synchronize() context if you use '
                              'optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return self._base_class.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but before '
                                 'optimizer.step() or optimizer.synchronize(). This is prohibited as '
                                 'it can cause a race condition.')
        return self._base_class.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients allreduced over the process set."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op == Adasum:
        raise NotImplementedError('ringfold does not implement Adasum; use Average or Sum')
    if backward_passes_per_step < 1:
        raise ValueError('backward_passes_per_step must be at least 1, not %r' % backward_passes_per_step)
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed',
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    base = optimizer.__class__
    members = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if not k.startswith('__')}
    members['_base_class'] = base
    cls = type(base.__name__, (base,), members)
    instance = cls.__new__(cls)
    base.__init__(instance, optimizer.param_groups, **_defaults(optimizer))
    instance._init_distributed(named_parameters, compression, backward_passes_per_step, op,
                               gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return instance


def _defaults(optimizer):
    """Keyword arguments the optimizer class accepts, from its defaults (param_groups carry the
    per-group values; this only satisfies required constructor arguments such as SGD's lr)."""
    import inspect
    accepted = inspect.signature(optimizer.__class__.__init__).parameters
    return {k: v for k, v in optimizer.defaults.items() if k in accepted and k != 'params'}
