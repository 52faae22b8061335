// DeviceOps: what the engine does with tensors on a GPU, behind an interface so that src/engine
// needs no CUDA header. CUDA builds implement it in engine/device_ops_cuda.cc with
// GpuStaging (collectives/gpu_staged.h); other builds have none (makeDeviceOps() returns
// null and GPU tensors are refused at enqueue).
//
// Contract
//   * check(device, what): throws InvalidArgument naming `what` (e.g. "allreduce 'grad'") when
//     the tensor's device cannot be used: no CUDA device at run time ("no CUDA device
//     available: cudaGetDeviceCount returned ...") or an index past the devices present.
//   * allreduce(...): one batch of GPU tensors of one device, dtype and op. Members without a
//     tensor (a joined rank) contribute zeros. Each tensor's work starts after what is queued on
//     its stream; each stream then waits for the result (an event), and the call returns once
//     the results are on the device. Several members go through a device fusion buffer, packed
//     and unpacked by one batched-copy launch each.
//   * broadcast(...): the root's buffer into every rank's output, same ordering.
//   * Called by the engine's background thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold::engine {

struct DeviceTensor {
  const void* input = nullptr;  // null for a joined rank's missing tensor (zeros)
  void* output = nullptr;
  size_t bytes = 0;
  void* stream = nullptr;       // cudaStream_t; null: the legacy default stream
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // CUDA devices this process sees (0 without a driver or device); never throws.
  virtual int deviceCount() = 0;
  virtual void check(int device, const std::string& what) = 0;
  virtual void allreduce(Communicator& comm, int device, const std::vector<DeviceTensor>& members, DataType dtype,
                         ReduceOp op, double preScale, double postScale) = 0;
  virtual void broadcast(Communicator& comm, int device, const DeviceTensor& tensor, DataType dtype, int root) = 0;
};

// The GPU a rank uses when no tensor names one (a joined rank; ringfold_cuda_device()):
// RINGFOLD_CUDA_DEVICE when set (InvalidArgument past deviceCount), else localRank modulo
// deviceCount; -1 when deviceCount is 0.
int defaultCudaDevice(int localRank, int deviceCount);

// The CUDA implementation in builds with CUDA, null otherwise; deviceOpsBuilt() says which.
std::unique_ptr<DeviceOps> makeDeviceOps();
bool deviceOpsBuilt();

}  // namespace ringfold::engine
