"""How torch tensors and reduce ops are handed to ringfold's engine by the c10d backend.

Contract
  * reduce_op(op) turns a c10d ReduceOp (or RedOpType) into (kind, factor): kind a RedOpType,
    factor PREMUL_SUM's float factor (a tensor factor is read with .item()), else None.
  * native(kind, factor) is (engine op code, prescale, postscale) for the ops the engine
    reduces itself: SUM, AVG (ringfold's Average: sum times 1/n, integers truncated toward zero
    as NCCL's integer average), PRODUCT, MIN, MAX, PREMUL_SUM (sum of factor * x); None for
    BAND/BOR/BXOR, which fold() computes.
  * reducible(dtype) is the engine's code for a dtype it reduces (uint8, int8, int32, int64,
    float16, bfloat16, float32, float64, and uint32/uint64 where torch has them), else None.
    Everything else (bool, int16, complex, float8, ...) is reduced by fold().
  * rows(t, nrows) describes a tensor to a copying collective as a contiguous 2-D host-side
    buffer of `nrows` rows: (buffer, engine dtype code, engine shape). Dtypes the engine knows
    keep their type and trailing shape, so a rank whose tensor differs gets the engine's
    "Mismatched ... shapes/data types" error on every rank; others travel as bytes.
  * decode(raw, dtype, shape) views engine-allocated result bytes as `dtype` in `shape`.
  * fold(stacked, kind, factor) reduces a (ranks, ...) tensor along its first dimension in rank
    order, with gloo's meaning for every op (bool: SUM/MAX/BOR are OR, PRODUCT/MIN/BAND AND,
    BXOR XOR); integer AVG truncates toward zero. It raises ValueError for bitwise ops on
    floating-point tensors, as gloo refuses them.
  * describe(t, code, shape) is the engine's ringfold_tensor_t for a contiguous tensor (CUDA
    tensors with their device index and the current stream).
"""
import torch
import torch.distributed as dist

from ringfold import _lib, _ops
from ringfold.basics import Average, Max, Min, Product, Sum

RedOpType = dist.ReduceOp.RedOpType
BITWISE = (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR)

_REDUCIBLE = {
    torch.uint8: _lib.UINT8, torch.int8: _lib.INT8, torch.int32: _lib.INT32, torch.int64: _lib.INT64,
    torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16, torch.float32: _lib.FLOAT32,
    torch.float64: _lib.FLOAT64,
}
for _name, _code in (('uint32', _lib.UINT32), ('uint64', _lib.UINT64)):
    if hasattr(torch, _name):
        _REDUCIBLE[getattr(torch, _name)] = _code
_COPYABLE = dict(_REDUCIBLE)
_COPYABLE[torch.bool] = _lib.BOOL

_NATIVE = {
    RedOpType.SUM: Sum, RedOpType.AVG: Average, RedOpType.MIN: Min, RedOpType.MAX: Max,
    RedOpType.PRODUCT: Product, RedOpType.PREMUL_SUM: Sum,
}


def reduce_op(op):
    kind = getattr(op, 'op', op)
    factor = None
    if kind == RedOpType.PREMUL_SUM:
        factor = getattr(op, 'factor', None)
        if factor is None:
            state = op.__getstate__() if hasattr(op, '__getstate__') else None
            factor = state[1] if state else None
        if isinstance(factor, torch.Tensor):
            factor = factor.item()
        if factor is None:
            raise ValueError('ringfold: ReduceOp.PREMUL_SUM without a factor; make it with '
                             'torch.distributed._make_nccl_premul_sum(factor)')
        factor = float(factor)
    return kind, factor


def native(kind, factor):
    code = _NATIVE.get(kind)
    if code is None:
        return None
    return code, (factor if kind == RedOpType.PREMUL_SUM else 1.0), 1.0


def reducible(dtype):
    return _REDUCIBLE.get(dtype)


def copyable(dtype):
    """The engine's code for a dtype the copying collectives take as it is, else None."""
    return _COPYABLE.get(dtype)


def check_device(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError('ringfold: %s: expected torch.Tensor, got %s' % (what, type(t).__name__))
    if t.is_sparse:
        raise ValueError('ringfold: %s: sparse tensors are not supported (densify them, or use '
                         'ringfold.torch\'s sparse_allreduce_async)' % what)
    if t.device.type not in ('cpu', 'cuda'):
        raise ValueError('ringfold: %s: tensors on %s are not supported (cpu and cuda are)' % (what, t.device))


def host(t):
    """A contiguous CPU tensor with t's values (t itself when it already is one)."""
    if t.is_cuda:
        return t.detach().to('cpu')
    return t if t.is_contiguous() else t.contiguous()


def rows(t, nrows):
    """(contiguous host buffer, engine code, engine shape) for t as `nrows` rows (see contract);
    t.numel() must be divisible by nrows (nrows 0: t must be empty)."""
    buf = host(t)
    code = _COPYABLE.get(buf.dtype)
    if code is not None:
        if buf.dim() >= 1 and nrows == buf.shape[0]:
            shape = tuple(buf.shape)
        elif nrows == 1:
            shape = (1,) + tuple(buf.shape)
        else:
            shape = (nrows, buf.numel() // nrows if nrows else 0)
        return buf, code, shape
    raw = buf.reshape(-1).view(torch.uint8)
    return raw, _lib.UINT8, (nrows, raw.numel() // nrows if nrows else 0)


def decode(raw, dtype, shape):
    if raw.numel() == 0:
        return torch.empty(shape, dtype=dtype)
    return raw.view(dtype).view(shape)


def describe(t, code, shape):
    if t.is_cuda:
        stream = torch.cuda.current_stream(t.device).cuda_stream
        return _ops.tensor(t.data_ptr(), code, shape, t.device.index, stream)
    return _ops.tensor(t.data_ptr(), code, shape)


def fold(stacked, kind, factor):
    """Reduces stacked[0], stacked[1], ... in rank order (see the module contract)."""
    dtype = stacked.dtype
    is_bool = dtype == torch.bool
    if kind in BITWISE and (dtype.is_floating_point or dtype.is_complex):
        raise ValueError('ringfold: ReduceOp.%s needs integer or bool tensors, not %s'
                         % (kind.name, dtype))
    if is_bool:
        fn = {RedOpType.SUM: torch.logical_or, RedOpType.MAX: torch.logical_or,
              RedOpType.BOR: torch.logical_or, RedOpType.PRODUCT: torch.logical_and,
              RedOpType.MIN: torch.logical_and, RedOpType.BAND: torch.logical_and,
              RedOpType.BXOR: torch.logical_xor}.get(kind)
        if fn is None:
            raise ValueError('ringfold: ReduceOp.%s is not defined for bool tensors' % kind.name)
    else:
        fn = {RedOpType.SUM: torch.add, RedOpType.AVG: torch.add, RedOpType.PREMUL_SUM: torch.add,
              RedOpType.PRODUCT: torch.mul, RedOpType.MIN: torch.minimum,
              RedOpType.MAX: torch.maximum, RedOpType.BAND: torch.bitwise_and,
              RedOpType.BOR: torch.bitwise_or, RedOpType.BXOR: torch.bitwise_xor}[kind]
    parts = [stacked[i] for i in range(stacked.shape[0])]
    if kind == RedOpType.PREMUL_SUM:
        parts = [(p * factor).to(dtype) for p in parts]
    acc = parts[0].clone()
    for p in parts[1:]:
        acc = fn(acc, p)
    if kind == RedOpType.AVG:
        n = len(parts)
        acc = torch.div(acc, n, rounding_mode='trunc') if not (dtype.is_floating_point or dtype.is_complex) \
            else acc / n
    return acc.to(dtype)
