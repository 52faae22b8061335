// float32 <-> float16 / bfloat16 compression with an optional loss-style scale that lives in
// device memory, and the max-abs reduction (CUB) the scale is computed from.
//
// Vectors: 4 floats (16 bytes) against 4 halves (8 bytes). Both sides are aligned at the same
// element exactly when float address % 16 == 2 * (half address % 8), so the split is computed
// over {float address, 2 * half address} with 4-byte elements (vector_split.h).
#include <cub/device/device_reduce.cuh>

#include "kernels/cuda_kernels.h"
#include "kernels/launch.cuh"
#include "kernels/reduce_ops.cuh"
#include "kernels/vector_split.h"

namespace ringfold::cuda {
namespace {

constexpr int kLanes = 4;

template <class H>
union HalfVec {
  uint2 raw;
  H e[kLanes];
};
union FloatVec {
  float4 raw;
  float e[kLanes];
};

__device__ float loadScale(const float* d_scale) { return d_scale != nullptr ? *d_scale : 1.0f; }

template <class H>
__global__ void __launch_bounds__(kThreads) compressKernel(H* out, const float* in, VectorSplit sp, const float* d_scale) {
  const float s = loadScale(d_scale);
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const float4* vi = reinterpret_cast<const float4*>(in + sp.head);
  uint2* vo = reinterpret_cast<uint2*>(out + sp.head);
  for (size_t v = tid; v < sp.vectors; v += stride) {
    FloatVec x;
    HalfVec<H> r;
    x.raw = vi[v];
#pragma unroll
    for (int j = 0; j < kLanes; ++j) r.e[j] = compressElement<H>(x.e[j], s);
    vo[v] = r.raw;
  }
  for (size_t k = tid; k < sp.head + sp.tail; k += stride) {
    const size_t i = sp.scalarIndex(k, kLanes);
    out[i] = compressElement<H>(in[i], s);
  }
}

template <class H>
__global__ void __launch_bounds__(kThreads) decompressKernel(float* out, const H* in, VectorSplit sp, const float* d_scale) {
  const float inv = 1.0f / loadScale(d_scale);
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint2* vi = reinterpret_cast<const uint2*>(in + sp.head);
  float4* vo = reinterpret_cast<float4*>(out + sp.head);
  for (size_t v = tid; v < sp.vectors; v += stride) {
    HalfVec<H> x;
    FloatVec r;
    x.raw = vi[v];
#pragma unroll
    for (int j = 0; j < kLanes; ++j) r.e[j] = decompressElement<H>(x.e[j], inv);
    vo[v] = r.raw;
  }
  for (size_t k = tid; k < sp.head + sp.tail; k += stride) {
    const size_t i = sp.scalarIndex(k, kLanes);
    out[i] = decompressElement<H>(in[i], inv);
  }
}

__global__ void lossScaleKernel(const float* d_maxAbs, float* d_scale, float target) {
  *d_scale = powerOfTwoScale(*d_maxAbs, target);
}

struct AbsOp {
  __device__ float operator()(float x) const { return fabsf(x); }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }  // NaN loses
};

VectorSplit splitFloatHalf(const void* f, const void* h, size_t count) {
  const uintptr_t addrs[2] = {reinterpret_cast<uintptr_t>(f), 2 * reinterpret_cast<uintptr_t>(h)};
  return splitVectors(addrs, 2, count, sizeof(float));
}

template <class F>
cudaError_t withFormat(HalfFormat format, F&& f) {
  switch (format) {
    case HalfFormat::kFloat16: return f(Float16{});
    case HalfFormat::kBfloat16: return f(Bfloat16{});
  }
  return cudaErrorInvalidValue;
}

constexpr size_t kScratchHeader = 256;  // compressAutoScale keeps its max-abs float here

}  // namespace

cudaError_t maxAbs(void* d_temp_storage, size_t& temp_storage_bytes, const float* d_in, size_t count,
                   float* d_maxAbs, cudaStream_t stream) {
  return cub::DeviceReduce::TransformReduce(d_temp_storage, temp_storage_bytes, d_in, d_maxAbs, count, MaxOp{},
                                            AbsOp{}, 0.0f, stream);
}

cudaError_t lossScale(const float* d_maxAbs, float* d_scale, HalfFormat format, float headroom,
                      cudaStream_t stream) {
  if (d_maxAbs == nullptr || d_scale == nullptr || !(headroom >= 1.0f)) return cudaErrorInvalidValue;
  const float maxFinite = format == HalfFormat::kFloat16 ? 65504.0f : 3.38953139e38f;
  lossScaleKernel<<<1, 1, 0, stream>>>(d_maxAbs, d_scale, maxFinite / headroom);
  return cudaGetLastError();
}

cudaError_t compress(void* d_out, const float* d_in, size_t count, HalfFormat format,
                     const float* d_scale, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (d_out == nullptr || d_in == nullptr) return cudaErrorInvalidValue;
  return withFormat(format, [&](auto tag) {
    using H = decltype(tag);
    const VectorSplit sp = splitFloatHalf(d_in, d_out, count);
    compressKernel<H><<<gridFor(sp.work()), kThreads, 0, stream>>>(static_cast<H*>(d_out), d_in, sp, d_scale);
    return cudaGetLastError();
  });
}

cudaError_t decompress(float* d_out, const void* d_in, size_t count, HalfFormat format,
                       const float* d_scale, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (d_out == nullptr || d_in == nullptr) return cudaErrorInvalidValue;
  return withFormat(format, [&](auto tag) {
    using H = decltype(tag);
    const VectorSplit sp = splitFloatHalf(d_out, d_in, count);
    decompressKernel<H><<<gridFor(sp.work()), kThreads, 0, stream>>>(d_out, static_cast<const H*>(d_in), sp, d_scale);
    return cudaGetLastError();
  });
}

cudaError_t compressAutoScale(void* d_temp_storage, size_t& temp_storage_bytes, void* d_out,
                              const float* d_in, size_t count, HalfFormat format, float headroom,
                              float* d_scale, cudaStream_t stream) {
  size_t cubBytes = 0;
  cudaError_t err = maxAbs(nullptr, cubBytes, d_in, count, nullptr, stream);
  if (err != cudaSuccess) return err;
  if (d_temp_storage == nullptr) {
    temp_storage_bytes = kScratchHeader + cubBytes;
    return cudaSuccess;
  }
  if (temp_storage_bytes < kScratchHeader + cubBytes || d_scale == nullptr) return cudaErrorInvalidValue;
  auto* d_max = static_cast<float*>(d_temp_storage);
  void* d_cub = static_cast<char*>(d_temp_storage) + kScratchHeader;
  if ((err = maxAbs(d_cub, cubBytes, d_in, count, d_max, stream)) != cudaSuccess) return err;
  if ((err = lossScale(d_max, d_scale, format, headroom, stream)) != cudaSuccess) return err;
  return compress(d_out, d_in, count, format, d_scale, stream);
}

}  // namespace ringfold::cuda
