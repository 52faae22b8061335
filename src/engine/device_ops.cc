#include "engine/device_ops.h"

#include "common/error.h"
#include "common/params.h"

namespace ringfold::engine {

int defaultCudaDevice(int localRank, int deviceCount) {
  if (deviceCount <= 0) return -1;
  if (params::kCudaDevice.isSet()) {
    const int64_t d = params::kCudaDevice.asInt();
    if (d < 0 || d >= deviceCount) {
      RF_THROW(InvalidArgument, params::kCudaDevice.name, "=", d, " is not one of the ", deviceCount,
               " CUDA devices of this process");
    }
    return static_cast<int>(d);
  }
  return localRank % deviceCount;
}

#if !defined(RINGFOLD_HAVE_CUDA_TOOLKIT)
// Builds without CUDA have no DeviceOps (device_ops_cuda.cc defines these otherwise).
std::unique_ptr<DeviceOps> makeDeviceOps() { return nullptr; }
bool deviceOpsBuilt() { return false; }
#endif

}  // namespace ringfold::engine
