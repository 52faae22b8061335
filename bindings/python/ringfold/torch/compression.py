"""Gradient compression for allreduce: Horovod's Compression.none and Compression.fp16.

A compressor has compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) -> tensor.
fp16 casts floating-point tensors to float16 for the wire and casts the result back to the
original dtype; other dtypes pass through. On a CUDA tensor the casts run on the device.
"""
import torch


class Compressor:
    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Sends floating-point tensors as `wire_dtype` and casts the result back."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.type(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.type(ctx)


class FP16Compressor(_CastCompressor):
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """ringfold's own: bfloat16 keeps float32's range, so large gradients cannot overflow."""
    wire_dtype = torch.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
