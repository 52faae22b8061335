// Helpers of the gpu-label tests: skip without a device (saying why), device buffers, checks.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "kernels/cuda_reducer.h"

namespace ringfold::testgpu {

#define RF_SKIP_WITHOUT_GPU()                                                \
  do {                                                                       \
    std::string why_;                                                        \
    if (::ringfold::cudaDeviceCountOrWhy(&why_) == 0) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

#define RF_CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// cudaMalloc'd bytes, freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&p_, bytes) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuffer() { if (p_ != nullptr) cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = unsigned char> T* as(size_t byteOffset = 0) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(p_) + byteOffset);
  }

 private:
  void* p_ = nullptr;
};

}  // namespace ringfold::testgpu
