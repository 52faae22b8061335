#include "kernels/cuda_reducer.h"

#include <cstdint>

#include "common/error.h"
#include "kernels/cuda_kernels.h"

namespace ringfold {
namespace {

bool partialOverlap(const void* p, const void* q, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  const auto y = reinterpret_cast<uintptr_t>(q);
  if (x == y || bytes == 0) return false;
  return x < y ? y - x < bytes : x - y < bytes;
}

void checkDtype(DataType dtype) {
  const int d = static_cast<int>(dtype);
  RF_ENFORCE(d >= 0 && d < kNumDataTypes && isReducible(dtype), "cuda reducer: data type ",
             dataTypeName(dtype), " (", d, ") cannot be reduced");
}

}  // namespace

void checkCuda(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return;
  RF_THROW(Error, what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

int cudaDeviceCountOrWhy(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n <= 0) {
    if (why != nullptr) {
      *why = err != cudaSuccess ? std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(err) + " (" +
                                      cudaGetErrorString(err) + ")"
                                : std::string("cudaGetDeviceCount found 0 devices");
    }
    cudaGetLastError();  // a failed query must not poison later calls' error checks
    return 0;
  }
  return n;
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) checkCuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

CudaDeviceGuard::~CudaDeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

CudaReducer::CudaReducer(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  RF_ENFORCE_GE(device, 0, "CudaReducer needs a CUDA device index");
}

void CudaReducer::reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
                         double postScale) {
  checkDtype(dtype);
  const int o = static_cast<int>(op);
  RF_ENFORCE(o >= 0 && o < kNumReduceOps, "cuda reducer: unknown reduce op ", o);
  if (count == 0) return;
  RF_ENFORCE(dst != nullptr && a != nullptr && b != nullptr, "cuda reducer: null buffer for ", count, " elements");
  const size_t bytes = count * dataTypeSize(dtype);
  RF_ENFORCE(!partialOverlap(dst, a, bytes) && !partialOverlap(dst, b, bytes),
             "cuda reducer: dst partially overlaps a source (only dst == a or dst == b is allowed)");
  CudaDeviceGuard guard(device_);
  checkCuda(cuda::reduce(dst, a, b, count, dtype, op, 1.0, postScale, stream_), "cuda reduce");
}

void CudaReducer::scale(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  checkDtype(dtype);
  if (count == 0) return;
  RF_ENFORCE(dst != nullptr && src != nullptr, "cuda reducer: null buffer for ", count, " elements");
  RF_ENFORCE(!partialOverlap(dst, src, count * dataTypeSize(dtype)),
             "cuda reducer: scale dst partially overlaps src (only dst == src is allowed)");
  CudaDeviceGuard guard(device_);
  checkCuda(cuda::scale(dst, src, count, dtype, factor, stream_), "cuda scale");
}

}  // namespace ringfold
