// TensorArgs: what a plugin passes for one tensor, and the one place its arguments are checked.
//
// Contract
//   * validateTensor(a) checks everything about one tensor that needs no engine state, and
//     throws InvalidArgument with the message the C ABI reports (bindings/c prefixes its
//     function's name): a dtype or reduce op outside the enums; a stream on a CPU tensor or in a
//     build without CUDA; for tensors that carry data (not join, barrier or the process-set
//     changes), a negative dimension, a shape whose byte size does not fit in 63 bits (so no
//     product the engine forms later, in any order, overflows), a NULL input (or, for allreduce
//     and broadcast, output) with a nonzero size, a dtype that cannot be reduced for allreduce and
//     reducescatter, and alltoall splits that are negative or add up to more than the first
//     dimension (checked arithmetic); for every operation, an empty or over-long name.
//   * Engine::enqueue/enqueueGroup call it for every tensor, then check what needs their state:
//     the process set (known, this rank a member, as many splits as ranks), the GPU device, and
//     names in flight.
//   * dataTypeFromCode()/reduceOpFromHorovodCode() translate the plugin codes of ringfold.h
//     (NCCL's dtype numbering, Horovod's reduce ops) and throw InvalidArgument for a code that
//     names nothing (or ADASUM, which ringfold does not implement). checkStream() is the stream
//     check of validateTensor(), for a tensor that is not in a TensorArgs (the C ABI's output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/message.h"

namespace ringfold::engine {

struct TensorArgs {
  OpType op = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int device = kCpuDevice;       // kCpuDevice, or a CUDA device (allreduce, broadcast)
  void* stream = nullptr;        // GPU tensors: cudaStream_t their data is ordered on (null: default)
  const void* input = nullptr;
  void* output = nullptr;  // allreduce, broadcast: same size as input (may equal it)
  ReduceOp reduceOp = ReduceOp::kSum;
  double preScale = 1.0;
  double postScale = 1.0;
  int root = 0;                  // broadcast
  std::vector<int64_t> splits;   // alltoall
  int processSet = 0;
};

// Whether `op` moves a tensor (false for join, barrier and the process-set changes).
bool carriesData(OpType op);

// Throws InvalidArgument naming what is wrong (see the contract). Returns the tensor's size in
// bytes (0 for an operation without data).
size_t validateTensor(const TensorArgs& a);

void checkStream(const void* stream, int device);
DataType dataTypeFromCode(int code);
ReduceOp reduceOpFromHorovodCode(int code);

}  // namespace ringfold::engine
