// Run-time dtype / op codes -> the template arguments of the kernels. nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"
#include "kernels/reduce_ops.cuh"

namespace ringfold::cuda {

// Calls f(T{}) with T the storage type of dtype; cudaErrorInvalidValue for kBool / unknown.
template <class F>
cudaError_t withType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kInt8: return f(int8_t{});
    case DataType::kUint8: return f(uint8_t{});
    case DataType::kInt32: return f(int32_t{});
    case DataType::kUint32: return f(uint32_t{});
    case DataType::kInt64: return f(int64_t{});
    case DataType::kUint64: return f(uint64_t{});
    case DataType::kFloat16: return f(Float16{});
    case DataType::kBfloat16: return f(Bfloat16{});
    case DataType::kFloat32: return f(float{});
    case DataType::kFloat64: return f(double{});
    case DataType::kFloat8e4m3: return f(Float8e4m3{});
    case DataType::kFloat8e5m2: return f(Float8e5m2{});
    default: return cudaErrorInvalidValue;
  }
}

// Calls f(Op{}) with the functor of op (kAvg reduces as kSum).
template <class F>
cudaError_t withOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return f(OpSum{});
    case ReduceOp::kProd: return f(OpProd{});
    case ReduceOp::kMax: return f(OpMax{});
    case ReduceOp::kMin: return f(OpMin{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ringfold::cuda
