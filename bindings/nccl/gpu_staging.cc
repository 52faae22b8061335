// GpuStaging for the NCCL-API library's device buffers (device.h), built only where ringfold
// has its CUDA kernels (RF_NCCL_GPU_STAGING); elsewhere the functions return false and the
// generic staging of ops.cc copies through pinned buffers instead.
#include "bindings/nccl/device.h"

#if RF_NCCL_GPU_STAGING
#include <map>

#include "collectives/gpu_staged.h"
#endif

namespace ringfold::nccl {

#if RF_NCCL_GPU_STAGING
namespace {
// One GpuStaging per communicator, made on first use on the communicator's device.
std::mutex gMutex;
std::map<NcclComm*, std::unique_ptr<GpuStaging>>& stagings() {
  static auto* m = new std::map<NcclComm*, std::unique_ptr<GpuStaging>>();
  return *m;
}
GpuStaging& stagingOf(NcclComm* comm) {
  std::lock_guard<std::mutex> lock(gMutex);
  auto& slot = stagings()[comm];
  if (!slot) slot = std::make_unique<GpuStaging>(comm->cudaDev);
  return *slot;
}
}  // namespace

void forgetGpuStaging(NcclComm* comm) {
  std::lock_guard<std::mutex> lock(gMutex);
  stagings().erase(comm);
}

bool gpuStagedAllreduce(NcclComm* comm, const StagedCall& call) {
  StagedAllreduceOptions o;
  o.sendbuf = call.sendbuf;
  o.recvbuf = call.recvbuf;
  o.count = call.count;
  o.dtype = call.dtype;
  o.op = call.op;
  o.preScale = call.preScale;
  o.stream = call.stream;
  stagingOf(comm).allreduce(*comm->comm, o);
  return true;
}

bool gpuStagedBroadcast(NcclComm* comm, const StagedCall& call) {
  // GpuStaging broadcasts in place: the root first copies its input into recvbuf.
  if (comm->rank == call.root && call.sendbuf != call.recvbuf) {
    copy(call.recvbuf, call.sendbuf, call.count * dataTypeSize(call.dtype), call.stream);
  }
  StagedBroadcastOptions o;
  o.buffer = call.recvbuf;
  o.count = call.count;
  o.dtype = call.dtype;
  o.root = call.root;
  o.stream = call.stream;
  stagingOf(comm).broadcast(*comm->comm, o);
  return true;
}
#else
void forgetGpuStaging(NcclComm*) {}
bool gpuStagedAllreduce(NcclComm*, const StagedCall&) { return false; }
bool gpuStagedBroadcast(NcclComm*, const StagedCall&) { return false; }
#endif

}  // namespace ringfold::nccl
