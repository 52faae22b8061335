// Launch geometry shared by the .cu files: grid-stride kernels get enough blocks to fill every
// SM a few times over, never more blocks than there is work. nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ringfold::cuda {

inline constexpr int kThreads = 256;

// Blocks for `work` items processed one per thread in a grid-stride loop: at most
// kBlocksPerSm per SM (enough to hide memory latency), at least 1.
inline unsigned gridFor(size_t work) {
  constexpr int kBlocksPerSm = 8;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    sms = 1;
  }
  const size_t cap = static_cast<size_t>(sms) * kBlocksPerSm;
  const size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want == 0 ? 1 : (want < cap ? want : cap));
}

}  // namespace ringfold::cuda
