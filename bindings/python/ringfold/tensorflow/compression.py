"""Gradient compression for allreduce: Horovod's Compression.none and Compression.fp16 for
TensorFlow, plus ringfold's Compression.bf16.

A compressor has compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) -> tensor.
fp16/bf16 cast floating-point tensors to the wire type and the result back to the original
dtype; other dtypes pass through unchanged (as Horovod's FP16Compressor does).
"""
import tensorflow as tf


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
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None and ctx.is_floating else tensor


class FP16Compressor(_CastCompressor):
    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """ringfold's own: bfloat16 keeps float32's range, so large gradients cannot overflow."""
    wire_dtype = tf.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
