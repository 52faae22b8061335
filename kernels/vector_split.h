// VectorSplit: how a kernel cuts [0, count) elements into a scalar head, 16-byte vectors and a
// scalar tail, from the buffers' addresses. Host-callable plain C++ (tested on the CPU in
// tests/kernels/vector_split_test.cc) and __host__ __device__ under nvcc.
//
// Contract
//   * head + vectors * lanes + tail == count, lanes = vecBytes / elemSize (vecBytes a power of
//     two and a multiple of elemSize).
//   * When every address has the same remainder modulo vecBytes and that remainder is a whole
//     number of elements, the head is the elements before the first vecBytes boundary (at most
//     lanes - 1, fewer if count is smaller), so every vector access of every buffer is aligned;
//     the tail is what is left after the last whole vector.
//   * Otherwise (buffers misaligned against each other, or a remainder inside an element) no
//     vector access is possible: head == count, vectors == tail == 0.
//   * count == 0 gives {0, 0, 0}; addresses are not dereferenced.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"

namespace ringfold::cuda {

inline constexpr size_t kVectorBytes = 16;

struct VectorSplit {
  size_t head = 0;     // scalar elements [0, head)
  size_t vectors = 0;  // vectors of lanes elements from element head
  size_t tail = 0;     // scalar elements [count - tail, count)
  // Threads a grid-stride kernel wants: one per vector, or per scalar element if more.
  RF_HOST_DEVICE size_t work() const { return vectors > head + tail ? vectors : head + tail; }
  // Index of the k-th scalar element (k < head + tail): the head first, then the tail.
  RF_HOST_DEVICE size_t scalarIndex(size_t k, size_t lanes) const {
    return k < head ? k : head + vectors * lanes + (k - head);
  }
};

RF_HOST_DEVICE inline VectorSplit splitVectors(const uintptr_t* addrs, int naddrs, size_t count,
                                               size_t elemSize, size_t vecBytes = kVectorBytes) {
  VectorSplit s;
  if (count == 0) return s;
  const size_t mis = naddrs > 0 ? addrs[0] % vecBytes : 0;
  bool aligned = mis % elemSize == 0;
  for (int i = 1; i < naddrs && aligned; ++i) aligned = addrs[i] % vecBytes == mis;
  if (!aligned) {
    s.head = count;
    return s;
  }
  const size_t lanes = vecBytes / elemSize;
  const size_t head = mis == 0 ? 0 : (vecBytes - mis) / elemSize;
  s.head = head < count ? head : count;
  const size_t rest = count - s.head;
  s.vectors = rest / lanes;
  s.tail = rest % lanes;
  return s;
}

// The three-buffer form used by the binary reduction kernels (dst, a, b).
RF_HOST_DEVICE inline VectorSplit splitVectors3(const void* dst, const void* a, const void* b,
                                                size_t count, size_t elemSize) {
  const uintptr_t addrs[3] = {reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(a),
                              reinterpret_cast<uintptr_t>(b)};
  return splitVectors(addrs, 3, count, elemSize);
}

}  // namespace ringfold::cuda
