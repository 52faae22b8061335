"""ProcessGroupRingfold: a torch.distributed ProcessGroup written in Python over ringfold's engine.

Contract
  * One instance per c10d group: the world group (process set 0) and each subgroup made by
    new_group() (a ringfold process set with the same ranks, or set 0 when it spans the world).
    Every collective of torch.distributed that torch hands to a ProcessGroup is here, under its
    current name and its older one (see _probe.METHODS); each enqueues engine operations and
    returns a _work.Work at once.
  * Matching: every engine operation of a group is named "c10d.<tag>.<n>", n counting that
    group's operations and <tag> naming the group ("w" for the world group, "s<k>" for the k-th
    subgroup new_group() made on every rank; torch's own group names may differ between ranks
    after a use_local_synchronization group), so ranks that make the same calls in the same
    order (what c10d requires) agree, and a rank whose call differs (another collective, shape, dtype, op, root)
    gets the engine's "Mismatched ..." error, the same on every rank. Groups never share names,
    so world and subgroup collectives may interleave freely.
  * How each call maps onto the engine (n = group size, r = this rank):
      allreduce / allreduce_coalesced  allreduce (grouped), in place; SUM, AVG, MIN, MAX,
                 PRODUCT, PREMUL_SUM natively on uint8/int8/int32/int64/f16/bf16/f32/f64;
                 BAND/BOR/BXOR and other dtypes (bool, int16, complex) by an allgather then a
                 fold in rank order (_tensors.fold)
      broadcast  broadcast, in place
      allgather, all_gather_single (_allgather_base) and their coalesced forms: allgather of
                 (1, *shape) rows (outputs of unequal sizes: of flat rows)
      reduce_scatter (list), reduce_scatter_single (_reduce_scatter_base), coalesced forms:
                 reducescatter of an (n, numel) view; unequal input sizes: allreduce + slice
      all_to_all_single (alltoall_base) with or without splits, alltoall (lists): alltoall
      reduce     reduce (ringfold's chain to the root: half an allreduce's traffic), the root's
                 tensor in place; the others' tensors are left as they were, where gloo leaves
                 partial sums in them. CUDA tensors and the ops and dtypes allreduce folds
                 itself: an allreduce of the root's tensor (of a copy on the others)
      gather, gather_single: alltoall in which every rank sends one row to the root
      scatter    alltoall in which the root sends row i to rank i
      barrier, monitored_barrier: barrier
      send, recv, recv_anysource: through torch's store (_p2p)
      start_coalescing / end_coalescing: the works issued in between, as one MultiWork
  * CUDA tensors: allreduce and broadcast run on the GPU through the engine's CUDA path, on the
    current stream; every other collective stages them through host memory.
  * new_group() (called on the world group on every rank, by torch versions that delegate it)
    creates the process set collectively; shutdown() of the group that started the engine
    stops it (destroy_process_group()), after which init_process_group may be called again.
"""
import ctypes
import itertools
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ringfold import _lib
from ringfold.torch.distributed import _bootstrap, _tensors as T
from ringfold.torch.distributed._p2p import PointToPoint
from ringfold.torch.distributed._probe import FEATURES
from ringfold.torch.distributed._work import (MultiWork, Work, borrow, completer, enqueue,
                                              enqueue_allreduce, enqueue_grouped_allreduce,
                                              received_splits)

BACKEND_NAME = 'ringfold'
_C = torch._C._distributed_c10d


_STRIDED = torch.strided
_FAST_DTYPES = {d: T.reducible(d) for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                           torch.int32, torch.int64, torch.uint8, torch.int8)}
_FAST_OPS = {k: T.native(k, None)[0] for k in (T.RedOpType.SUM, T.RedOpType.AVG, T.RedOpType.MIN,
                                               T.RedOpType.MAX, T.RedOpType.PRODUCT)}


class _Part:
    """Engine handles enqueued for one piece of a call, what they need alive, and the function
    that copies their results out (given those handles)."""
    __slots__ = ('handles', 'keep', 'finish')

    def __init__(self, handles, keep=None, finish=None):
        self.handles = handles
        self.keep = keep
        self.finish = finish


def _opts(opts, cls):
    return opts if opts is not None else getattr(_C, cls)()


def _dtype_error(what, got, want):
    raise ValueError('ringfold: %s: output dtype %s differs from the input\'s %s' % (what, got, want))


def _timedelta_seconds(timeout):
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


class ProcessGroupRingfold(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout, process_set=0, ranks=None, tag='w'):
        if FEATURES['pg_store_ctor'] and store is not None:
            super().__init__(store, rank, size)
        else:
            super().__init__(rank, size)
        self._store = store
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self.timeout_seconds = _timedelta_seconds(timeout)
        self._set = process_set
        self._ranks = list(ranks) if ranks is not None else list(range(size))
        self._tag = tag
        self._prefix = ('c10d.%s.' % tag).encode()
        self._seq = itertools.count()
        self._subgroups = itertools.count()   # new_group() calls (made on every rank)
        self._coalescing = None
        self._owns_engine = False
        self._closed = False
        self._p2p = PointToPoint(store, rank, size, self.timeout_seconds) if store is not None else None

    # ---- identity --------------------------------------------------------------------------

    def getBackendName(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def _get_backend(self, device=None):
        return self          # one backend for every device: this group

    def get_backend(self, device=None):
        return self

    @property
    def supports_coalescing(self):
        return True

    @property
    def supports_splitting(self):         # no communicator splits (init_process_group(device_id=))
        return False

    def supports_tensor_alloc(self, device):
        return False

    @property
    def process_set_id(self):
        """The ringfold process set this group's collectives run in (0: all ranks)."""
        return self._set

    def __repr__(self):
        return 'ProcessGroupRingfold(tag=%r, rank=%d, size=%d, process_set=%d)' % (
            self._tag, self._rank, self._size, self._set)

    # ---- plumbing ---------------------------------------------------------------------------

    def _name(self):
        return b'%s%d' % (self._prefix, next(self._seq))

    def _submit(self, what, parts, value, opts, devices=None):
        if len(parts) == 1:
            part = parts[0]
            handles, keep, finish = part.handles, part.keep, part.finish
        else:
            handles = [h for p in parts for h in p.handles]
            keep = [p.keep for p in parts]

            def finish(all_handles):
                i = 0
                for p in parts:
                    n = len(p.handles)
                    if p.finish is not None:
                        p.finish(all_handles[i:i + n])
                    i += n
        work = Work(self, what, handles, keep, finish, value, devices, async_op=opts.asyncOp)
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def _build(self, what, builders):
        """Runs the part builders; if one raises, the parts already enqueued still complete on
        every rank, so their handles are handed to the completer to be released."""
        parts = []
        try:
            for b in builders:
                parts.append(b())
        except BaseException:
            for p in parts:
                for h in p.handles:
                    completer().add_zombie(h, p.keep)
            raise
        return parts

    def _check_open(self, what):
        if self._closed:
            raise ValueError('ringfold: %s on a process group that was destroyed' % what)

    @staticmethod
    def _devices(tensors):
        """The CUDA devices of `tensors` (for the Work's future), None for CPU tensors."""
        devs = None
        for t in tensors:
            if t.is_cuda:
                devs = devs or []
                if t.device not in devs:
                    devs.append(t.device)
        return devs

    # ---- engine pieces ----------------------------------------------------------------------

    def _allreduce_part(self, what, t, kind, factor):
        """Allreduce of t, in place."""
        code = T.reducible(t.dtype)
        spec = T.native(kind, factor)
        if code is None or spec is None:
            return self._fold_part(what, t, kind, factor, t)
        op_code, prescale, postscale = spec
        buf = t if t.is_contiguous() else t.contiguous()
        if t.is_cuda:
            desc = T.describe(buf, code, tuple(buf.shape))
            h = enqueue(what, _lib.ALLREDUCE, self._name(), desc, desc, op_code, prescale, postscale,
                        process_set=self._set)
        else:
            h = enqueue_allreduce(what, self._name(), buf.data_ptr(), code, tuple(buf.shape),
                                  op_code, prescale, postscale, self._set)
        return _Part([h], buf, None if buf is t else (lambda hs: t.copy_(buf)))

    def _fold_part(self, what, t, kind, factor, out):
        T.fold(torch.zeros(1, dtype=t.dtype), kind, factor)      # refuse bad op/dtype pairs here
        buf, code, shape = T.rows(t, 1)
        h = enqueue(what, _lib.ALLGATHER, self._name(), T.describe(buf, code, shape), process_set=self._set)

        def finish(hs):
            stacked = T.decode(borrow(hs[0]), t.dtype, (self._size,) + tuple(t.shape))
            out.copy_(T.fold(stacked, kind, factor))
        return _Part([h], buf, finish)

    def _allgather_part(self, what, t, store_result):
        """Allgather of t as one row per rank; store_result(stacked) gets an (n, *shape) view."""
        buf, code, shape = T.rows(t, 1)
        h = enqueue(what, _lib.ALLGATHER, self._name(), T.describe(buf, code, shape), process_set=self._set)

        def finish(hs):
            store_result(T.decode(borrow(hs[0]), t.dtype, (self._size,) + tuple(t.shape)))
        return _Part([h], buf, finish)

    def _alltoall_part(self, what, send, splits, store_result):
        """Alltoall of `send` (rows along dim 0, 2-D or more) with `splits` rows to each rank;
        store_result(received (rows, ...) view, received splits)."""
        buf, code, shape = T.rows(send, send.shape[0])
        h = enqueue(what, _lib.ALLTOALL, self._name(), T.describe(buf, code, shape), splits=list(splits),
                    process_set=self._set)
        trailing = tuple(send.shape[1:])

        def finish(hs):
            got = received_splits(hs[0], self._size)
            raw = borrow(hs[0])
            store_result(T.decode(raw, send.dtype, (sum(got),) + trailing), got)
        return _Part([h], buf, finish)

    def _reducescatter_part(self, what, matrix, kind, factor, out):
        """Reduces an (n, m) matrix over ranks; row r of the result goes into out (m elements)."""
        code = T.reducible(matrix.dtype)
        spec = T.native(kind, factor)
        if code is None or spec is None:
            full = matrix.detach().clone()
            part = self._fold_part(what, full, kind, factor, full)
            inner = part.finish

            def finish(hs):
                inner(hs)
                out.copy_(full[self._rank].view(out.shape))
            return _Part(part.handles, part.keep, finish)
        op_code, prescale, postscale = spec
        buf = T.host(matrix)
        h = enqueue(what, _lib.REDUCESCATTER, self._name(), T.describe(buf, code, tuple(buf.shape)), None,
                    op_code, prescale, postscale, process_set=self._set)

        def finish(hs):
            out.copy_(T.decode(borrow(hs[0]), matrix.dtype, tuple(out.shape)))
        return _Part([h], buf, finish)

    # ---- allreduce ----------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = _opts(opts, 'AllreduceOptions')
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts)
        t = tensors[0]
        # The common case, with nothing to convert: a dense contiguous CPU tensor, an op the engine has.
        code = _FAST_DTYPES.get(t.dtype) if type(t) is torch.Tensor else None
        if code is not None and not self._closed and t.layout is _STRIDED and not t.is_cuda and t.is_contiguous():
            op_code = _FAST_OPS.get(getattr(opts.reduceOp, 'op', None))
            if op_code is not None:
                h = enqueue_allreduce('allreduce', self._name(), t.data_ptr(), code, t.shape, op_code, 1.0, 1.0,
                                      self._set)
                work = Work(self, 'allreduce', [h], t, None, tensors, None, opts.asyncOp)
                if self._coalescing is not None:
                    self._coalescing.append(work)
                return work
        self._check_open('allreduce')
        T.check_device(t, 'allreduce')
        kind, factor = T.reduce_op(opts.reduceOp)
        part = self._allreduce_part('allreduce', t, kind, factor)
        return self._submit('allreduce', [part], tensors, opts, self._devices(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = _opts(opts, 'AllreduceCoalescedOptions')
        self._check_open('allreduce_coalesced')
        kind, factor = T.reduce_op(opts.reduceOp)
        for t in tensors:
            T.check_device(t, 'allreduce_coalesced')
        spec = T.native(kind, factor)
        grouped = spec is not None and tensors and all(
            T.reducible(t.dtype) is not None and not t.is_cuda for t in tensors)
        if not grouped:
            parts = self._build('allreduce_coalesced', [
                (lambda t=t: self._allreduce_part('allreduce_coalesced', t, kind, factor)) for t in tensors])
            return self._submit('allreduce_coalesced', parts, tensors, opts, self._devices(tensors))
        op_code, prescale, postscale = spec
        bufs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        names = [self._name() for _ in bufs]
        handles = enqueue_grouped_allreduce('allreduce_coalesced', names, bufs,
                                            [T.reducible(b.dtype) for b in bufs], op_code, prescale,
                                            postscale, self._set, _lib.CPU_DEVICE)

        def finish(hs):
            for t, b in zip(tensors, bufs):
                if b is not t:
                    t.copy_(b)
        return self._submit('allreduce_coalesced', [_Part(handles, bufs, finish)], tensors, opts)

    # ---- broadcast ----------------------------------------------------------------------------

    def _broadcast_part(self, what, t, root):
        T.check_device(t, what)
        code = T.copyable(t.dtype)
        if t.is_cuda and code is not None:          # the engine's GPU path
            buf = t if t.is_contiguous() else t.contiguous()
            send, shape = buf, tuple(buf.shape)
        else:
            buf = T.host(t)                         # t itself for a contiguous CPU tensor
            send, code, shape = T.rows(buf, 1)      # a view of buf
        desc = T.describe(send, code, shape)
        h = enqueue(what, _lib.BROADCAST, self._name(), desc, desc, root=root, process_set=self._set)
        return _Part([h], buf, None if buf is t else (lambda hs: t.copy_(buf)))

    def broadcast(self, tensors, opts=None):
        opts = _opts(opts, 'BroadcastOptions')
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        self._check_open('broadcast')
        root = opts.rootRank
        if not 0 <= root < self._size:
            raise ValueError('ringfold: broadcast: root rank %d is not in the group (size %d)' % (root, self._size))
        parts = self._build('broadcast', [(lambda t=t: self._broadcast_part('broadcast', t, root)) for t in tensors])
        return self._submit('broadcast', parts, tensors, opts, self._devices(tensors))

    # ---- allgather ----------------------------------------------------------------------------

    def _gather_into_list(self, what, outs, t):
        T.check_device(t, what)
        if len(outs) != self._size:
            raise ValueError('ringfold: %s: the output list has %d tensors, the group %d ranks'
                             % (what, len(outs), self._size))
        for o in outs:
            if o.dtype != t.dtype:
                _dtype_error(what, o.dtype, t.dtype)
        if all(o.numel() == t.numel() for o in outs):
            def store(stacked):
                for r, o in enumerate(outs):
                    o.copy_(stacked[r].reshape(o.shape))
            return self._allgather_part(what, t, store)
        # unequal sizes: every rank's tensor as flat rows (the engine concatenates them)
        flat = t.reshape(-1)
        buf, code, shape = T.rows(flat, flat.numel())
        h = enqueue(what, _lib.ALLGATHER, self._name(), T.describe(buf, code, shape), process_set=self._set)

        def finish(hs):
            total = sum(o.numel() for o in outs)
            data = T.decode(borrow(hs[0]), t.dtype, (-1,))
            if data.numel() != total:
                raise ValueError('ringfold: %s: the ranks sent %d elements in all, the outputs hold %d'
                                 % (what, data.numel(), total))
            offset = 0
            for o in outs:
                o.copy_(data[offset:offset + o.numel()].view(o.shape))
                offset += o.numel()
        return _Part([h], buf, finish)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = _opts(opts, 'AllgatherOptions')
        self._check_open('allgather')
        if len(output_tensors) != len(input_tensors):
            raise ValueError('ringfold: allgather: %d output lists for %d inputs'
                             % (len(output_tensors), len(input_tensors)))
        parts = self._build('allgather', [(lambda o=o, t=t: self._gather_into_list('allgather', o, t))
                                          for o, t in zip(output_tensors, input_tensors)])
        return self._submit('allgather', parts, output_tensors, opts,
                            self._devices([t for o in output_tensors for t in o]))

    allgather_coalesced = allgather

    def _gather_into_tensor(self, what, output, t):
        T.check_device(t, what)
        if output.numel() != t.numel() * self._size:
            raise ValueError('ringfold: %s: the output has %d elements, it must have the group size (%d) '
                             'times the input\'s %d' % (what, output.numel(), self._size, t.numel()))
        if output.dtype != t.dtype:
            _dtype_error(what, output.dtype, t.dtype)
        return self._allgather_part(what, t, lambda stacked: output.copy_(stacked.reshape(output.shape)))

    def all_gather_single(self, output, input, opts=None):
        opts = _opts(opts, 'AllgatherOptions')
        self._check_open('all_gather_into_tensor')
        part = self._gather_into_tensor('all_gather_into_tensor', output, input)
        return self._submit('all_gather_into_tensor', [part], [output], opts, self._devices([output]))

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = _opts(opts, 'AllgatherOptions')
        self._check_open('all_gather_into_tensor_coalesced')
        parts = self._build('all_gather_into_tensor_coalesced', [
            (lambda o=o, t=t: self._gather_into_tensor('all_gather_into_tensor_coalesced', o, t))
            for o, t in zip(outputs, inputs)])
        return self._submit('all_gather_into_tensor_coalesced', parts, list(outputs), opts, self._devices(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ---- reduce_scatter -------------------------------------------------------------------------

    def _scatter_reduced(self, what, output, inputs, kind, factor):
        T.check_device(output, what)
        if len(inputs) != self._size:
            raise ValueError('ringfold: %s: %d inputs for a group of %d ranks' % (what, len(inputs), self._size))
        if all(x.numel() == output.numel() for x in inputs):
            matrix = torch.stack([T.host(x).reshape(-1) for x in inputs])
            return self._reducescatter_part(what, matrix, kind, factor, output)
        # unequal sizes: reduce the concatenation, keep this rank's piece
        flat = torch.cat([T.host(x).reshape(-1) for x in inputs])
        if inputs[self._rank].numel() != output.numel():
            raise ValueError('ringfold: %s: this rank\'s input has %d elements, the output %d'
                             % (what, inputs[self._rank].numel(), output.numel()))
        start = sum(x.numel() for x in inputs[:self._rank])
        part = self._allreduce_part(what, flat, kind, factor)
        inner = part.finish

        def finish(hs):
            if inner is not None:
                inner(hs)
            output.copy_(flat[start:start + output.numel()].view(output.shape))
        return _Part(part.handles, part.keep, finish)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = _opts(opts, 'ReduceScatterOptions')
        self._check_open('reduce_scatter')
        kind, factor = T.reduce_op(opts.reduceOp)
        parts = self._build('reduce_scatter', [
            (lambda o=o, i=i: self._scatter_reduced('reduce_scatter', o, i, kind, factor))
            for o, i in zip(output_tensors, input_tensors)])
        return self._submit('reduce_scatter', parts, output_tensors, opts, self._devices(output_tensors))

    def _scatter_reduced_tensor(self, what, output, t, kind, factor):
        T.check_device(t, what)
        if t.numel() != output.numel() * self._size:
            raise ValueError('ringfold: %s: the input has %d elements, it must have the group size (%d) '
                             'times the output\'s %d' % (what, t.numel(), self._size, output.numel()))
        return self._reducescatter_part(what, T.host(t).reshape(self._size, -1), kind, factor, output)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = _opts(opts, 'ReduceScatterOptions')
        self._check_open('reduce_scatter_tensor')
        kind, factor = T.reduce_op(opts.reduceOp)
        part = self._scatter_reduced_tensor('reduce_scatter_tensor', output, input, kind, factor)
        return self._submit('reduce_scatter_tensor', [part], [output], opts, self._devices([output]))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = _opts(opts, 'ReduceScatterOptions')
        self._check_open('reduce_scatter_tensor_coalesced')
        kind, factor = T.reduce_op(opts.reduceOp)
        parts = self._build('reduce_scatter_tensor_coalesced', [
            (lambda o=o, t=t: self._scatter_reduced_tensor('reduce_scatter_tensor_coalesced', o, t, kind, factor))
            for o, t in zip(outputs, inputs)])
        return self._submit('reduce_scatter_tensor_coalesced', parts, list(outputs), opts, self._devices(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- all-to-all ---------------------------------------------------------------------------

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        if opts is None and isinstance(input_split_sizes, _C.AllToAllOptions):
            opts, input_split_sizes = input_split_sizes, None
        opts = _opts(opts, 'AllToAllOptions')
        what = 'all_to_all_single'
        self._check_open(what)
        T.check_device(input, what)
        if input.dim() == 0 or output.dim() == 0:
            raise ValueError('ringfold: %s: tensors need at least one dimension' % what)
        rows = input.shape[0]
        splits = [int(s) for s in (input_split_sizes or [])]
        if not splits:
            if rows % self._size:
                raise ValueError('ringfold: %s: the input\'s first dimension (%d) must divide by the group '
                                 'size (%d) when no split sizes are given' % (what, rows, self._size))
            splits = [rows // self._size] * self._size
        elif len(splits) != self._size or sum(splits) != rows or min(splits) < 0:
            raise ValueError('ringfold: %s: input split sizes %s do not split %d rows among %d ranks'
                             % (what, splits, rows, self._size))
        expected = [int(s) for s in (output_split_sizes or [])]
        if output.dtype != input.dtype:
            _dtype_error(what, output.dtype, input.dtype)

        def store(received, got):
            if expected and got != expected:
                raise ValueError('ringfold: %s: received split sizes %s, but output_split_sizes is %s'
                                 % (what, got, expected))
            if received.numel() != output.numel():
                raise ValueError('ringfold: %s: received %d rows (%d elements) for an output of shape %s'
                                 % (what, received.shape[0], received.numel(), tuple(output.shape)))
            output.copy_(received.reshape(output.shape))
        part = self._alltoall_part(what, input.reshape(rows, -1) if input.dim() == 1 else input, splits, store)
        return self._submit(what, [part], [output], opts, self._devices([output]))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = _opts(opts, 'AllToAllOptions')
        what = 'alltoall'
        self._check_open(what)
        if len(input_tensors) != self._size or len(output_tensors) != self._size:
            raise ValueError('ringfold: alltoall: %d inputs and %d outputs for a group of %d ranks'
                             % (len(input_tensors), len(output_tensors), self._size))
        dtypes = {t.dtype for t in list(input_tensors) + list(output_tensors)}
        if len(dtypes) != 1:
            raise ValueError('ringfold: alltoall: tensors of several dtypes: %s' % sorted(map(str, dtypes)))
        for t in input_tensors:
            T.check_device(t, what)
        flat = torch.cat([T.host(t).reshape(-1) for t in input_tensors]).reshape(-1, 1)
        splits = [t.numel() for t in input_tensors]

        def store(received, got):
            want = [o.numel() for o in output_tensors]
            if got != want:
                raise ValueError('ringfold: alltoall: received %s elements from the ranks, the outputs hold %s'
                                 % (got, want))
            offset = 0
            for o in output_tensors:
                o.copy_(received[offset:offset + o.numel()].reshape(o.shape))
                offset += o.numel()
        part = self._alltoall_part(what, flat, splits, store)
        return self._submit(what, [part], output_tensors, opts, self._devices(output_tensors))

    # ---- rooted collectives -------------------------------------------------------------------

    def _root(self, root, what):
        if not 0 <= root < self._size:
            raise ValueError('ringfold: %s: root rank %d is not in the group (size %d)' % (what, root, self._size))
        return root

    def reduce(self, tensors, opts=None):
        opts = _opts(opts, 'ReduceOptions')
        self._check_open('reduce')
        root = self._root(opts.rootRank, 'reduce')
        kind, factor = T.reduce_op(opts.reduceOp)
        t = tensors[opts.rootTensor if len(tensors) > 1 else 0]
        T.check_device(t, 'reduce')
        code = T.reducible(t.dtype)
        spec = T.native(kind, factor)
        if not t.is_cuda and code is not None and spec is not None:
            op_code, prescale, postscale = spec
            buf = t if t.is_contiguous() else t.contiguous()
            desc = T.describe(buf, code, tuple(buf.shape))
            h = enqueue('reduce', _lib.REDUCE, self._name(), desc, desc, op_code, prescale, postscale, root=root,
                        process_set=self._set)
            copy_back = buf is not t and self._rank == root
            part = _Part([h], buf, (lambda hs: t.copy_(buf)) if copy_back else None)
        elif self._rank == root:
            part = self._allreduce_part('reduce', t, kind, factor)
        else:
            scratch = t.detach().clone(memory_format=torch.contiguous_format)
            part = self._allreduce_part('reduce', scratch, kind, factor)
        return self._submit('reduce', [part], tensors, opts, self._devices(tensors))

    def _gather_rows(self, what, outs, t, root):
        T.check_device(t, what)
        mine = self._rank == root
        if mine:
            if len(outs) != self._size:
                raise ValueError('ringfold: %s: the root needs %d output tensors, got %d'
                                 % (what, self._size, len(outs)))
            for o in outs:
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise ValueError('ringfold: %s: output %s %s does not match the input %s %s'
                                     % (what, tuple(o.shape), o.dtype, tuple(t.shape), t.dtype))
        splits = [1 if r == root else 0 for r in range(self._size)]

        def store(received, got):
            if mine:
                for r, o in enumerate(outs):
                    o.copy_(received[r].reshape(o.shape))
        return self._alltoall_part(what, t.reshape((1,) + tuple(t.shape)), splits, store)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = _opts(opts, 'GatherOptions')
        self._check_open('gather')
        root = self._root(opts.rootRank, 'gather')
        outs = output_tensors[0] if output_tensors else []
        part = self._gather_rows('gather', outs, input_tensors[0], root)
        return self._submit('gather', [part], output_tensors, opts, self._devices(list(outs)))

    def gather_single(self, output, input, opts=None):
        opts = _opts(opts, 'GatherOptions')
        self._check_open('gather_into_tensor')
        root = self._root(opts.rootRank, 'gather_into_tensor')
        outs = list(output.reshape(self._size, -1).unbind(0)) if self._rank == root else []
        if self._rank == root and not output.is_contiguous():
            raise ValueError('ringfold: gather_into_tensor: the output must be contiguous')
        part = self._gather_rows('gather_into_tensor', outs, input.reshape(-1), root)
        return self._submit('gather_into_tensor', [part], [output], opts, self._devices([output]))

    gather_into_tensor = gather_single

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = _opts(opts, 'ScatterOptions')
        self._check_open('scatter')
        root = self._root(opts.rootRank, 'scatter')
        out = output_tensors[0]
        T.check_device(out, 'scatter')
        shape = tuple(out.shape)
        if self._rank == root:
            pieces = input_tensors[0]
            if len(pieces) != self._size:
                raise ValueError('ringfold: scatter: the root needs %d input tensors, got %d'
                                 % (self._size, len(pieces)))
            for p in pieces:
                if p.numel() != out.numel() or p.dtype != out.dtype:
                    raise ValueError('ringfold: scatter: input %s %s does not match the output %s %s'
                                     % (tuple(p.shape), p.dtype, shape, out.dtype))
            send = torch.stack([T.host(p).reshape(shape) for p in pieces])
            splits = [1] * self._size
        else:
            send = torch.empty((0,) + shape, dtype=out.dtype)
            splits = [0] * self._size

        def store(received, got):
            out.copy_(received[0].reshape(shape))
        part = self._alltoall_part('scatter', send, splits, store)
        return self._submit('scatter', [part], output_tensors, opts, self._devices([out]))

    # ---- barrier, point-to-point ----------------------------------------------------------------

    def barrier(self, opts=None):
        opts = _opts(opts, 'BarrierOptions')
        self._check_open('barrier')
        h = enqueue('barrier', _lib.BARRIER, None, None, None, process_set=self._set)
        return self._submit('barrier', [_Part([h])], [], opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        opts = _C.BarrierOptions()
        opts.asyncOp = False
        self.barrier(opts).wait(timeout)

    def _need_p2p(self, what):
        self._check_open(what)
        if self._p2p is None:
            raise ValueError('ringfold: %s needs the store torch gives a process group' % what)
        return self._p2p

    def _record(self, work):
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def send(self, tensors, dst, tag=0):
        return self._record(self._need_p2p('send').send(tensors, dst, tag))

    def recv(self, tensors, src, tag=0):
        return self._record(self._need_p2p('recv').recv(tensors, src, tag))

    def recv_anysource(self, tensors, tag=0):
        return self._record(self._need_p2p('recv_anysource').recv_anysource(tensors, tag))

    # ---- coalescing ---------------------------------------------------------------------------

    def start_coalescing(self, device=None):
        if self._coalescing is not None:
            raise ValueError('ringfold: start_coalescing while already coalescing')
        self._coalescing = []

    def end_coalescing(self, device=None):
        works, self._coalescing = self._coalescing or [], None
        return MultiWork(works)

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    # ---- subgroups and lifetime -----------------------------------------------------------------

    def new_group(self, ranks, timeout=None, backend=None, pg_options=None, group_name=None, group_desc=None):
        """Called by torch.distributed.new_group on every rank (torch versions that delegate
        subgroup creation to the default group); returns None where this rank is no member."""
        backend = str(backend or BACKEND_NAME).lower()
        ranks = list(range(self._size)) if ranks is None else [int(r) for r in ranks]
        timeout = timeout if timeout is not None else self._timeout
        if backend != BACKEND_NAME:
            return self._foreign_group(ranks, timeout, backend, pg_options, group_name, group_desc)
        if ranks != sorted(ranks):
            raise ValueError('ringfold: new_group: ranks %s must be in increasing order (ringfold subgroups '
                             'number their ranks as the global ranks go)' % (ranks,))
        if ranks == list(range(self._size)):
            set_id = 0
        else:
            caller = sys._getframe(1).f_locals
            if caller.get('use_local_synchronization'):
                raise ValueError('ringfold: new_group(use_local_synchronization=True) is not supported: a '
                                 'ringfold subgroup is a process set that every rank creates together; '
                                 'call new_group on every rank')
            set_id = _add_process_set(ranks)
        tag = '%s.s%d' % (self._tag, next(self._subgroups))     # counted on every rank alike
        if self._rank not in ranks:
            return None
        store = dist.PrefixStore('%s/' % tag, self._store) if self._store is not None else None
        pg = ProcessGroupRingfold(store, ranks.index(self._rank), len(ranks), timeout, set_id, ranks, tag)
        pg._set_group_name(group_name)
        pg._set_group_desc(group_desc or 'undefined')
        return pg

    def _foreign_group(self, ranks, timeout, backend, pg_options, group_name, group_desc):
        """A subgroup of another backend (e.g. gloo) under a ringfold world: made by torch's own
        helper, whose registration torch's new_group then repeats (so it is undone here)."""
        if self._rank not in ranks:
            return None
        _, default_store = c10d._world.pg_map[self]
        pg, _ = c10d._new_process_group_helper(
            len(ranks), ranks.index(self._rank), ranks, backend, default_store, group_name,
            backend_options=pg_options, timeout=timeout, group_desc=group_desc)
        c10d._unregister_process_group(group_name)
        for members in c10d._world.tags_to_pg.values():
            while pg in members:
                members.remove(pg)
        c10d._world.pg_to_tag.pop(pg, None)
        return pg

    def shutdown(self):
        """destroy_process_group(): stopping ringfold's engine is collective (it stops every
        rank's), so the group that started it first waits, up to its timeout, until every rank
        has come here; a rank that exits or fails meanwhile ends the wait too."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine:
            self._owns_engine = False
            try:
                h = enqueue('destroy_process_group', _lib.BARRIER, None, None, None, process_set=0)
                Work(self, 'destroy_process_group (waiting for every rank)', [h], None, None, []).wait()
            except Exception:
                pass                         # the engine already stopped or failed: stop anyway
            _bootstrap.stop_engine()

    def abort(self):
        """Stops the engine at once (every rank's pending work fails)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine:
            self._owns_engine = False
            _bootstrap.stop_engine()


def _add_process_set(ranks):
    """The id of a ringfold process set with exactly `ranks`, created (collectively) if needed."""
    lib = _lib.lib()
    arr, n = _lib.int_array(ranks)
    value = lib.horovod_add_process_set(arr, n)
    if value == _lib.PROCESS_SET_ERROR_EXISTING_SET:
        ids = (ctypes.c_int * lib.horovod_number_of_process_sets())()
        lib.horovod_process_set_ids(ids)
        for set_id in ids:
            size = lib.horovod_process_set_size(set_id)
            members = (ctypes.c_int * max(size, 1))()
            if set_id and lib.horovod_process_set_ranks(set_id, members) == 0 and list(members[:size]) == ranks:
                return set_id
    if value < 0:
        reason = {_lib.PROCESS_SET_ERROR_DYNAMIC: 'the running engine was started without dynamic process sets '
                                                  '(hvd.init() before init_process_group: pass '
                                                  'process_sets="dynamic" or set RINGFOLD_DYNAMIC_PROCESS_SETS=1)',
                  _lib.PROCESS_SET_ERROR_INIT: 'ringfold is not initialized',
                  _lib.PROCESS_SET_ERROR_SHUTDOWN: 'the engine has stopped'}.get(value) or _lib.last_error()
        raise ValueError('ringfold: new_group(%s): %s' % (ranks, reason))
    return value
