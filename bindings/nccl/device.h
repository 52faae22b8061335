// Device-memory helpers of the NCCL-API library beyond state.h's: copies on a stream, the
// memory of ncclMemAlloc, pinned staging buffers, and ringfold's GpuStaging where it is built.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "bindings/nccl/state.h"

namespace ringfold::nccl {

// cudaMemcpyAsync(cudaMemcpyDefault) on `stream`; NcclError(ncclUnhandledCudaError) on failure.
void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// ncclInvalidUsage (NcclError) when `stream` is being captured into a CUDA graph.
void requireNotCapturing(cudaStream_t stream);
// ncclMemAlloc / ncclMemFree: cudaMalloc / cudaFree, or page-aligned host memory without CUDA.
void* allocate(size_t bytes);
void release(void* p);
// A pinned host buffer of at least `bytes`, kept by the communicator (distinct slots are
// distinct buffers).
void* stagingBuffer(NcclComm* comm, int slot, size_t bytes);

// ringfold's GpuStaging (collectives/gpu_staged.h) for device buffers, where ringfold was built
// with CUDA: returns false (having done nothing) where it is not.
struct StagedCall {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;
  int root = 0;
  cudaStream_t stream = nullptr;
};
bool gpuStagedAllreduce(NcclComm* comm, const StagedCall& call);
bool gpuStagedBroadcast(NcclComm* comm, const StagedCall& call);

}  // namespace ringfold::nccl

namespace ringfold::nccl {
// Frees the communicator's GpuStaging (before the communicator goes).
void forgetGpuStaging(NcclComm* comm);
}  // namespace ringfold::nccl
