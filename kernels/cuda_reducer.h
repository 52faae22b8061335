// CudaReducer: the Reducer (src/reduce/reducer.h) for device memory, on one CUDA stream.
//
// Contract
//   * reduce()/scale() follow reducer.h element for element (the same bits as the CPU reducer,
//     see reduce_ops.cuh), on buffers of device `device()`; they enqueue the work on `stream()`
//     and return without waiting: the caller orders later work after the stream (an event, or
//     cudaStreamSynchronize) before it reads the result.
//   * Argument errors (kBool, unknown op, null buffers, partial overlap) throw InvalidArgument
//     before anything is enqueued; a CUDA error throws ringfold::Error naming the call.
//   * The calling thread's current device is set to device() for the call and restored after.
//   * Not thread-safe; one reducer per stream.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "reduce/reducer.h"

namespace ringfold {

class CudaReducer final : public Reducer {
 public:
  CudaReducer(int device, cudaStream_t stream);

  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale = 1.0) override;
  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  void setStream(cudaStream_t stream) { stream_ = stream; }

 private:
  int device_;
  cudaStream_t stream_;
};

// Throws ringfold::Error "<what>: <CUDA error name>: <description>" unless err is cudaSuccess.
void checkCuda(cudaError_t err, const std::string& what);

// Number of CUDA devices; 0 with *why set to the runtime's reason (no driver, no device) when
// there are none. Never throws: a machine without libcuda just has no devices.
int cudaDeviceCountOrWhy(std::string* why);

// Sets the current device for the lifetime of the guard, then restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace ringfold
