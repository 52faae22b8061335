// CUDA helpers of the NCCL-API library (state.h "CUDA"): pointer classification, stream waits,
// scalars, ncclMemAlloc's memory and the pinned staging buffers of device-buffer collectives.
// Built without the CUDA runtime (RF_NCCL_HAVE_CUDART unset) every pointer is host memory.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bindings/nccl/device.h"
#include "bindings/nccl/state.h"
#include "common/error.h"
#include "reduce/fp8.h"
#include "reduce/half.h"

#if RF_NCCL_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ringfold::nccl {

#if RF_NCCL_HAVE_CUDART
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw NcclError(ncclUnhandledCudaError, std::string(what) + " failed: " + cudaGetErrorString(e));
  }
}
}  // namespace

bool cudaUsable() {
  static const bool usable = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return usable;
}

int currentCudaDevice() {
  int dev = 0;
  if (cudaUsable() && cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = 0;
  }
  return dev;
}

MemKind memKind(const void* p) {
  if (p == nullptr || !cudaUsable()) return MemKind::kHost;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return MemKind::kHost;
  }
  return a.type == cudaMemoryTypeDevice ? MemKind::kDevice : MemKind::kHost;
}

void syncStream(cudaStream_t stream) {
  if (!cudaUsable()) return;
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void requireNotCapturing(cudaStream_t stream) {
  if (!cudaUsable()) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (status != cudaStreamCaptureStatusNone) {
    unsupported("CUDA graph capture: ringfold's libnccl.so.2 runs each call on the host and cannot be captured in a graph");
  }
}

void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
}

double readScalar(const void* p, DataType dtype) {
  if (memKind(p) == MemKind::kHost) return hostScalar(p, dtype);
  unsigned char bytes[8] = {0};
  check(cudaMemcpy(bytes, p, dataTypeSize(dtype), cudaMemcpyDeviceToHost), "cudaMemcpy of the PreMulSum scalar");
  return hostScalar(bytes, dtype);
}

void* allocate(size_t bytes) {
  if (!cudaUsable()) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes == 0 ? 1 : bytes) != 0) throw NcclError(ncclSystemError, "ncclMemAlloc: out of host memory");
    return p;
  }
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void release(void* p) {
  if (!cudaUsable()) {
    std::free(p);
    return;
  }
  check(cudaFree(p), "cudaFree");
}

struct NcclComm::StagingBuffers {
  std::vector<std::pair<void*, size_t>> slots;
  ~StagingBuffers() {
    for (auto& s : slots) cudaFreeHost(s.first);
  }
  void* get(int slot, size_t bytes) {
    if (slots.size() <= static_cast<size_t>(slot)) slots.resize(slot + 1, {nullptr, 0});
    auto& s = slots[slot];
    if (s.second < bytes) {
      if (s.first) cudaFreeHost(s.first);
      s = {nullptr, 0};
      check(cudaMallocHost(&s.first, bytes), "cudaMallocHost of a staging buffer");
      s.second = bytes;
    }
    return s.first;
  }
};

void* stagingBuffer(NcclComm* comm, int slot, size_t bytes) {
  if (!comm->staging) comm->staging = std::make_unique<NcclComm::StagingBuffers>();
  return comm->staging->get(slot, bytes);
}

#else  // no CUDA runtime: host memory only

bool cudaUsable() { return false; }
int currentCudaDevice() { return 0; }
MemKind memKind(const void*) { return MemKind::kHost; }
void syncStream(cudaStream_t) {}
void requireNotCapturing(cudaStream_t) {}
void copy(void*, const void*, size_t, cudaStream_t) {
  throw NcclError(ncclInternalError, "device copy without the CUDA runtime");
}
double readScalar(const void* p, DataType dtype) { return hostScalar(p, dtype); }
void* allocate(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes == 0 ? 1 : bytes) != 0) throw NcclError(ncclSystemError, "ncclMemAlloc: out of host memory");
  return p;
}
void release(void* p) { std::free(p); }
struct NcclComm::StagingBuffers {};
void* stagingBuffer(NcclComm*, int, size_t) {
  throw NcclError(ncclInternalError, "device staging without the CUDA runtime");
}

#endif

NcclComm::NcclComm() = default;
NcclComm::~NcclComm() { joinInit(); }

double hostScalar(const void* p, DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return *static_cast<const int8_t*>(p);
    case DataType::kUint8: return *static_cast<const uint8_t*>(p);
    case DataType::kInt32: return *static_cast<const int32_t*>(p);
    case DataType::kUint32: return *static_cast<const uint32_t*>(p);
    case DataType::kInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DataType::kUint64: return static_cast<double>(*static_cast<const uint64_t*>(p));
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return halfToFloat(h);
    }
    case DataType::kFloat32: return *static_cast<const float*>(p);
    case DataType::kFloat64: return *static_cast<const double*>(p);
    case DataType::kBfloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16ToFloat(b);
    }
    case DataType::kFloat8e4m3: return fp8e4m3ToFloat(*static_cast<const uint8_t*>(p));
    case DataType::kFloat8e5m2: return fp8e5m2ToFloat(*static_cast<const uint8_t*>(p));
    default: throw NcclError(ncclInvalidArgument, "PreMulSum scalar of an unsupported type");
  }
}

}  // namespace ringfold::nccl
