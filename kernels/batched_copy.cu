// Batched copy: many (src, dst, bytes) descriptors in one launch, for packing tensors into and
// out of the fusion buffer. Grid y strides over descriptors, grid x over the bytes of one; each
// copy moves 16-byte vectors where source and destination are equally aligned (vector_split.h).
#include "kernels/cuda_kernels.h"
#include "kernels/launch.cuh"
#include "kernels/vector_split.h"

namespace ringfold::cuda {
namespace {

constexpr int kMaxGridY = 65535;

__global__ void __launch_bounds__(kThreads) batchedCopyKernel(const CopyDesc* descs, int n) {
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int d = blockIdx.y; d < n; d += gridDim.y) {
    const CopyDesc desc = descs[d];
    const auto* src = static_cast<const unsigned char*>(desc.src);
    auto* dst = static_cast<unsigned char*>(desc.dst);
    const uintptr_t addrs[2] = {reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src)};
    const VectorSplit sp = splitVectors(addrs, 2, desc.bytes, 1);
    const uint4* vs = reinterpret_cast<const uint4*>(src + sp.head);
    uint4* vd = reinterpret_cast<uint4*>(dst + sp.head);
    for (size_t v = tid; v < sp.vectors; v += stride) vd[v] = vs[v];
    for (size_t k = tid; k < sp.head + sp.tail; k += stride) {
      const size_t i = sp.scalarIndex(k, kVectorBytes);
      dst[i] = src[i];
    }
  }
}

}  // namespace

cudaError_t batchedCopy(const CopyDesc* d_descs, int n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && d_descs == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned y = static_cast<unsigned>(n < kMaxGridY ? n : kMaxGridY);
  // About gridFor's total of blocks, spread over the descriptors in flight at once.
  const unsigned total = gridFor(static_cast<size_t>(1) << 30);
  const unsigned x = total > y ? (total + y - 1) / y : 1;
  batchedCopyKernel<<<dim3(x, y), kThreads, 0, stream>>>(d_descs, n);
  return cudaGetLastError();
}

cudaError_t uploadCopyDescs(CopyDesc* d_descs, const CopyDesc* h_descs, int n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (d_descs == nullptr || h_descs == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return cudaMemcpyAsync(d_descs, h_descs, static_cast<size_t>(n) * sizeof(CopyDesc), cudaMemcpyHostToDevice,
                         stream);
}

}  // namespace ringfold::cuda
