// GrowingDeviceBuffer: device memory that grows on demand and is then reused, so steady state
// allocates nothing (staging scratch, the GPU fusion buffer, copy descriptors).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "kernels/cuda_reducer.h"

namespace ringfold {

class GrowingDeviceBuffer {
 public:
  explicit GrowingDeviceBuffer(std::string what) : what_(std::move(what)) {}
  ~GrowingDeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  GrowingDeviceBuffer(const GrowingDeviceBuffer&) = delete;
  GrowingDeviceBuffer& operator=(const GrowingDeviceBuffer&) = delete;

  // At least `bytes` of device memory on the current device; the contents are not kept when it
  // grows. Throws ringfold::Error when cudaMalloc fails.
  std::byte* get(size_t bytes) {
    if (bytes > size_) {
      if (p_ != nullptr) cudaFree(p_);
      p_ = nullptr;
      size_ = 0;
      checkCuda(cudaMalloc(&p_, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes for the " + what_);
      size_ = bytes;
    }
    return static_cast<std::byte*>(p_);
  }

 private:
  std::string what_;
  void* p_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ringfold
