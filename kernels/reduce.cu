// Reduction and scaling kernels: one grid-stride kernel per (dtype, op), 16-byte vector loads and
// stores for the aligned body, scalar head and tail (vector_split.h), element rule from
// reduce_ops.cuh. Scale factors are run-time arguments (uniform branches), so the template
// matrix stays at 12 dtypes x 4 ops + 12 scale kernels.
#include <cstring>

#include "kernels/cuda_kernels.h"
#include "kernels/dispatch.cuh"
#include "kernels/launch.cuh"
#include "kernels/vector_split.h"

namespace ringfold::cuda {
namespace {

template <class T>
union Vec {
  static constexpr int kLanes = static_cast<int>(kVectorBytes / sizeof(T));
  uint4 raw;
  T e[kLanes];
};

template <class T, class Op>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(T* dst, const T* a, const T* b, VectorSplit sp, Scales s) {
  using V = Vec<T>;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint4* va = reinterpret_cast<const uint4*>(a + sp.head);
  const uint4* vb = reinterpret_cast<const uint4*>(b + sp.head);
  uint4* vd = reinterpret_cast<uint4*>(dst + sp.head);
  for (size_t v = tid; v < sp.vectors; v += stride) {
    V x, y, r;
    x.raw = va[v];
    y.raw = vb[v];
#pragma unroll
    for (int j = 0; j < V::kLanes; ++j) r.e[j] = reduceElement<T, Op>(x.e[j], y.e[j], s);
    vd[v] = r.raw;
  }
  for (size_t k = tid; k < sp.head + sp.tail; k += stride) {
    const size_t i = sp.scalarIndex(k, V::kLanes);
    dst[i] = reduceElement<T, Op>(a[i], b[i], s);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) scaleKernel(T* dst, const T* src, VectorSplit sp, double factor) {
  using V = Vec<T>;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint4* vs = reinterpret_cast<const uint4*>(src + sp.head);
  uint4* vd = reinterpret_cast<uint4*>(dst + sp.head);
  for (size_t v = tid; v < sp.vectors; v += stride) {
    V x, r;
    x.raw = vs[v];
#pragma unroll
    for (int j = 0; j < V::kLanes; ++j) r.e[j] = scaleElement<T>(x.e[j], factor);
    vd[v] = r.raw;
  }
  for (size_t k = tid; k < sp.head + sp.tail; k += stride) {
    const size_t i = sp.scalarIndex(k, V::kLanes);
    dst[i] = scaleElement<T>(src[i], factor);
  }
}

}  // namespace

cudaError_t reduce(void* d_dst, const void* d_a, const void* d_b, size_t count, DataType dtype,
                   ReduceOp op, double preScale, double postScale, cudaStream_t stream) {
  if (count == 0) return isReducible(dtype) ? cudaSuccess : cudaErrorInvalidValue;
  if (d_dst == nullptr || d_a == nullptr || d_b == nullptr) return cudaErrorInvalidValue;
  Scales s;
  s.pre = preScale;
  s.post = postScale;
  s.hasPre = preScale != 1.0;
  s.hasPost = postScale != 1.0;
  return withType(dtype, [&](auto tag) {
    using T = decltype(tag);
    return withOp(op, [&](auto opTag) {
      using Op = decltype(opTag);
      const VectorSplit sp = splitVectors3(d_dst, d_a, d_b, count, sizeof(T));
      reduceKernel<T, Op><<<gridFor(sp.work()), kThreads, 0, stream>>>(
          static_cast<T*>(d_dst), static_cast<const T*>(d_a), static_cast<const T*>(d_b), sp, s);
      return cudaGetLastError();
    });
  });
}

cudaError_t scale(void* d_dst, const void* d_src, size_t count, DataType dtype, double factor,
                  cudaStream_t stream) {
  if (!isReducible(dtype)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (d_dst == nullptr || d_src == nullptr) return cudaErrorInvalidValue;
  if (factor == 1.0) {
    if (d_dst == d_src) return cudaSuccess;
    return cudaMemcpyAsync(d_dst, d_src, count * dataTypeSize(dtype), cudaMemcpyDeviceToDevice, stream);
  }
  return withType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const uintptr_t addrs[2] = {reinterpret_cast<uintptr_t>(d_dst), reinterpret_cast<uintptr_t>(d_src)};
    const VectorSplit sp = splitVectors(addrs, 2, count, sizeof(T));
    scaleKernel<T><<<gridFor(sp.work()), kThreads, 0, stream>>>(static_cast<T*>(d_dst),
                                                                  static_cast<const T*>(d_src), sp, factor);
    return cudaGetLastError();
  });
}

}  // namespace ringfold::cuda
