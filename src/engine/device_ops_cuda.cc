// The engine's DeviceOps for CUDA builds (contract in src/engine/device_ops.h): GpuStaging per
// device, an engine stream per device that waits for the tensors' streams, and a device fusion
// buffer packed and unpacked with the batched-copy kernel.
#include <cuda_runtime_api.h>

#include <map>
#include <string>

#include "common/error.h"
#include "common/params.h"
#include "engine/device_ops.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_reducer.h"
#include "kernels/device_buffer.h"
#include "collectives/gpu_staged.h"

namespace ringfold::engine {
namespace {

// Everything the engine keeps per device.
struct PerDevice {
  explicit PerDevice(int device) : staging(device) {
    CudaDeviceGuard guard(device);
    checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~PerDevice() {
    cudaStreamSynchronize(stream);
    cudaEventDestroy(event);
    cudaStreamDestroy(stream);
  }
  GpuStaging staging;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  GrowingDeviceBuffer fusion{"GPU fusion buffer"}, descs{"copy descriptors"};
};

class CudaDeviceOps final : public DeviceOps {
 public:
  int deviceCount() override { return cudaDeviceCountOrWhy(nullptr); }

  void check(int device, const std::string& what) override {
    std::string why;
    const int n = cudaDeviceCountOrWhy(&why);
    if (n == 0) RF_THROW(InvalidArgument, what, " is on GPU ", device, ", but no CUDA device is available (", why, ")");
    if (device >= n) {
      RF_THROW(InvalidArgument, what, " is on GPU ", device, ", but this process sees only ", n, " CUDA device",
               n == 1 ? "" : "s");
    }
  }

  void allreduce(Communicator& comm, int device, const std::vector<DeviceTensor>& members, DataType dtype,
                 ReduceOp op, double preScale, double postScale) override {
    PerDevice& d = at(device);
    CudaDeviceGuard guard(device);
    after(d, members);
    const size_t es = dataTypeSize(dtype);
    if (members.size() == 1 && members[0].input != nullptr) {
      const DeviceTensor& t = members[0];
      d.staging.allreduce(comm, {t.input, t.output, t.bytes / es, dtype, op, preScale, postScale, d.stream});
    } else {
      size_t total = 0;
      for (const DeviceTensor& t : members) total += t.bytes;
      std::byte* fusion = d.fusion.get(total);
      std::vector<cuda::CopyDesc> in, out;
      size_t offset = 0;
      for (const DeviceTensor& t : members) {
        if (t.input != nullptr) {
          in.push_back({t.input, fusion + offset, t.bytes});
          out.push_back({fusion + offset, t.output, t.bytes});
        } else if (t.bytes > 0) {  // a joined rank: zeros
          checkCuda(cudaMemsetAsync(fusion + offset, 0, t.bytes, d.stream), "cudaMemsetAsync");
        }
        offset += t.bytes;
      }
      batchedCopy(d, in);
      d.staging.allreduce(comm, {fusion, fusion, total / es, dtype, op, preScale, postScale, d.stream});
      batchedCopy(d, out);
    }
    done(d, members);
  }

  void broadcast(Communicator& comm, int device, const DeviceTensor& t, DataType dtype, int root) override {
    PerDevice& d = at(device);
    CudaDeviceGuard guard(device);
    after(d, {t});
    const size_t es = dataTypeSize(dtype);
    if (comm.rank() == root && t.input != t.output && t.bytes > 0) {
      checkCuda(cudaMemcpyAsync(t.output, t.input, t.bytes, cudaMemcpyDeviceToDevice, d.stream), "cudaMemcpyAsync");
    }
    d.staging.broadcast(comm, {t.output, t.bytes / es, dtype, root, d.stream});
    done(d, {t});
  }

 private:
  PerDevice& at(int device) {
    auto it = devices_.find(device);
    if (it == devices_.end()) it = devices_.emplace(device, std::make_unique<PerDevice>(device)).first;
    return *it->second;
  }

  // The engine stream starts after everything queued on the tensors' streams.
  static void after(PerDevice& d, const std::vector<DeviceTensor>& members) {
    for (const DeviceTensor& t : members) {
      checkCuda(cudaEventRecord(d.event, static_cast<cudaStream_t>(t.stream)), "cudaEventRecord on a tensor's stream");
      checkCuda(cudaStreamWaitEvent(d.stream, d.event, 0), "cudaStreamWaitEvent");
    }
  }

  // The tensors' streams wait for the engine stream; the results are on the device on return.
  static void done(PerDevice& d, const std::vector<DeviceTensor>& members) {
    checkCuda(cudaEventRecord(d.event, d.stream), "cudaEventRecord");
    for (const DeviceTensor& t : members) {
      checkCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(t.stream), d.event, 0), "cudaStreamWaitEvent on a tensor's stream");
    }
    checkCuda(cudaStreamSynchronize(d.stream), "GPU collective");
  }

  static void batchedCopy(PerDevice& d, const std::vector<cuda::CopyDesc>& descs) {
    if (descs.empty()) return;
    const int n = static_cast<int>(descs.size());
    auto* dd = reinterpret_cast<cuda::CopyDesc*>(d.descs.get(descs.size() * sizeof(cuda::CopyDesc)));
    checkCuda(cuda::uploadCopyDescs(dd, descs.data(), n, d.stream), "upload of copy descriptors");
    checkCuda(cuda::batchedCopy(dd, n, d.stream), "batched copy of the GPU fusion buffer");
    // A copy from pageable memory returns once the runtime has taken the bytes, so `descs` may
    // go; the device array is reused only by later work on the same stream.
  }

  std::map<int, std::unique_ptr<PerDevice>> devices_;
};

}  // namespace

std::unique_ptr<DeviceOps> makeDeviceOps() { return std::make_unique<CudaDeviceOps>(); }
bool deviceOpsBuilt() { return true; }

}  // namespace ringfold::engine
