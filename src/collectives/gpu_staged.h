// GpuStaging: collectives on device memory over a host transport (TCP, loopback), staged
// through pinned host buffers in the order of sched::StagingSchedule
// (src/collectives/staging_schedule.h): the device-to-host copy of block b+1 runs while block b
// is on the network, and the copy back of block b while block b+1 is.
//
// Contract
//   * allreduce: recvbuf (device, may equal sendbuf) gets the allreduce of every rank's sendbuf,
//     blocks of RINGFOLD_CUDA_STAGING_BYTES at a time, each block by the host allreduce
//     (collectives/allreduce.h) on its pinned copy, with the folds done on the device: received
//     segments are copied to the device and reduced there by the CUDA kernels (same element
//     rules as the CPU reducer), and the folded segment is copied back to be sent on. Every
//     rank ends with the same bits; results are those of the host allreduce run block by block.
//   * broadcast: root's buffer to every rank's, block by block through the same pinned slots.
//   * Ordering: the work starts after everything already queued on `stream` (an event), and
//     `stream` is made to wait for an event recorded after the result is on the device. The
//     call also returns only once the result is on the device, so the host may read it then.
//   * Errors: a CUDA failure throws ringfold::Error naming the call; a peer failure throws what
//     the host collective throws. After a failure the staging buffers stay usable.
//   * One GpuStaging per device, used by one thread at a time (the engine's background thread).
//   * Layering: the engine calls this, this calls the host collectives (which reach the
//     transport) and kernels/' host API (CudaReducer, DeviceBuffer) for the device work; the
//     folding reducer is passed to the host allreduce per call (AllreduceOptions::reducer).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "collectives/communicator.h"
#include "reduce/reducer.h"
#include "common/dtype.h"

namespace ringfold {

struct StagedAllreduceOptions {
  const void* sendbuf = nullptr;  // device memory of GpuStaging::device()
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;
  double postScale = 1.0;
  cudaStream_t stream = nullptr;  // the caller's stream (nullptr: the legacy default stream)
};

struct StagedBroadcastOptions {
  void* buffer = nullptr;  // device memory: the root's input, every other rank's output
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  cudaStream_t stream = nullptr;
};

class GpuStaging {
 public:
  // blockBytes: 0 reads RINGFOLD_CUDA_STAGING_BYTES.
  explicit GpuStaging(int device, size_t blockBytes = 0);
  ~GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  int device() const { return device_; }
  void allreduce(Communicator& comm, const StagedAllreduceOptions& opts);
  void broadcast(Communicator& comm, const StagedBroadcastOptions& opts);

 private:
  class Reducer;
  // Runs the schedule over device buffer [dev, dev + bytes): exchange(host, devBlock, bytes)
  // works on the pinned copy of one block.
  using Exchange = std::function<void(std::byte* host, std::byte* devBlock, size_t bytes)>;
  void stage(std::byte* dev, size_t bytes, size_t elemSize, cudaStream_t caller, const Exchange& exchange);

  int device_;
  size_t blockBytes_;
  std::byte* pinned_ = nullptr;  // kSlots x blockBytes_
  cudaStream_t in_ = nullptr, out_ = nullptr, work_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  cudaEvent_t inDone_[3] = {}, outDone_[3] = {};
  std::unique_ptr<Reducer> reducer_;  // the host allreduce's reducer (passed per call)
};

}  // namespace ringfold
