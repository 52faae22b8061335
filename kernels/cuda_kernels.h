// Host API of ringfold's CUDA kernels (reduce.cu, compress.cu, batched_copy.cu). Plain C++:
// g++ translation units include it; only the .cu files need nvcc.
//
// Conventions (CUB's): every function returns cudaError_t (cudaSuccess, or the launch/argument
// error; nothing throws), `d_` pointers are device memory (or managed/mapped memory the device
// can reach), the stream comes last, and functions that need scratch take (d_temp_storage,
// temp_storage_bytes): with d_temp_storage == nullptr they only write the size needed and do no
// work. All work is asynchronous on `stream`; the caller synchronises.
//
// Contract
//   * reduce: d_dst[i] = (d_a[i] op (d_b[i] * preScale, rounded to dtype)) * postScale, element
//     by element exactly as the CPU reducer (reducer.h, reduce_ops.cuh), so CPU and GPU ranks
//     agree bit for bit. kAvg reduces like kSum. d_dst may equal d_a or d_b; buffers need only
//     element alignment (16-byte vectors are used where all three are equally aligned).
//     cudaErrorInvalidValue for kBool, unknown codes, or null pointers with count > 0.
//   * scale: d_dst[i] = d_src[i] * factor (factor 1: a device-to-device copy of the bits).
//   * compression: float32 <-> float16/bfloat16. compress: d_out[i] = round(d_in[i] * scale),
//     decompress: d_out[i] = float(d_in[i]) * (1 / scale), where scale is read from device
//     memory (d_scale, one float; nullptr means 1), so no host round trip is needed.
//     maxAbs writes max |d_in[i]| (NaNs ignored) to *d_maxAbs with cub::DeviceReduce.
//     lossScale turns *d_maxAbs into *d_scale = powerOfTwoScale(maxAbs, largest finite of the
//     format / headroom) (reduce_ops.cuh): a power of two, so decompression undoes it exactly
//     short of underflow. headroom >= 1 leaves room for summing (e.g. the number of ranks).
//     compressAutoScale = maxAbs + lossScale + compress in one call (temp storage: maxAbs's).
//   * batchedCopy: copies n (src, dst, bytes) descriptors in one launch; d_descs is device memory
//     holding the n descriptors (uploadCopyDescs puts them there from the host, on the stream,
//     through the caller's pinned or pageable array). Regions must not overlap.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/dtype.h"

namespace ringfold::cuda {

enum class HalfFormat { kFloat16, kBfloat16 };

cudaError_t reduce(void* d_dst, const void* d_a, const void* d_b, size_t count, DataType dtype,
                   ReduceOp op, double preScale, double postScale, cudaStream_t stream);
cudaError_t scale(void* d_dst, const void* d_src, size_t count, DataType dtype, double factor,
                  cudaStream_t stream);

cudaError_t maxAbs(void* d_temp_storage, size_t& temp_storage_bytes, const float* d_in, size_t count,
                   float* d_maxAbs, cudaStream_t stream);
cudaError_t lossScale(const float* d_maxAbs, float* d_scale, HalfFormat format, float headroom,
                      cudaStream_t stream);
cudaError_t compress(void* d_out, const float* d_in, size_t count, HalfFormat format,
                     const float* d_scale, cudaStream_t stream);
cudaError_t decompress(float* d_out, const void* d_in, size_t count, HalfFormat format,
                       const float* d_scale, cudaStream_t stream);
// d_scale receives the scale used (decompress with it); temp storage holds maxAbs's scratch.
cudaError_t compressAutoScale(void* d_temp_storage, size_t& temp_storage_bytes, void* d_out,
                              const float* d_in, size_t count, HalfFormat format, float headroom,
                              float* d_scale, cudaStream_t stream);

struct CopyDesc {
  const void* src;
  void* dst;
  size_t bytes;
};
cudaError_t batchedCopy(const CopyDesc* d_descs, int n, cudaStream_t stream);
cudaError_t uploadCopyDescs(CopyDesc* d_descs, const CopyDesc* h_descs, int n, cudaStream_t stream);

}  // namespace ringfold::cuda
