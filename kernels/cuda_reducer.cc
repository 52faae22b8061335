#include "kernels/cuda_reducer.h"

#include "common/error.h"
#include "kernels/cuda_kernels.h"
#include "reduce/reducer_args.h"

namespace ringfold {

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
  if (!reduce_detail::checkReduceArgs("cuda reducer", dst, a, b, count, dtype, op)) return;
  CudaDeviceGuard guard(device_);
  checkCuda(cuda::reduce(dst, a, b, count, dtype, op, 1.0, postScale, stream_), "cuda reduce");
}

void CudaReducer::scale(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  if (!reduce_detail::checkScaleArgs("cuda reducer", dst, src, count, dtype)) return;
  CudaDeviceGuard guard(device_);
  checkCuda(cuda::scale(dst, src, count, dtype, factor, stream_), "cuda scale");
}

}  // namespace ringfold
