#include "collectives/gpu_staged.h"

#include <algorithm>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/broadcast.h"
#include "collectives/staging_schedule.h"
#include "common/error.h"
#include "common/params.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_reducer.h"
#include "kernels/device_buffer.h"

namespace ringfold {
namespace {

constexpr size_t kSlots = 3;

}  // namespace

// The host allreduce's folds, done on the device. The pinned block [host_, host_ + bytes_)
// mirrors device memory [dev_, dev_ + bytes_): an operand inside the block is read from its
// device copy, which is current because every fold writes both (the device result is copied
// back to the pinned block before reduce() returns, and the host collective sends from there);
// the only other writes to the block are the allgather's receives, which no fold reads before
// the block is copied back to the device whole. Operands outside the block (the collective's
// receive scratch) are copied to the device first.
class GpuStaging::Reducer final : public ringfold::Reducer {
 public:
  Reducer(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

  void bind(std::byte* host, std::byte* dev, size_t bytes) {
    host_ = host;
    dev_ = dev;
    bytes_ = bytes;
  }

  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale) override {
    const size_t bytes = count * dataTypeSize(dtype);
    if (bytes == 0) return;
    const std::byte* da = onDevice(a, bytes, scratchA_);
    const std::byte* db = onDevice(b, bytes, scratchB_);
    std::byte* dd = mapped(dst, bytes) ? devOf(dst) : scratchD_.get(bytes);
    CudaReducer(device_, stream_).reduce(dd, da, db, count, dtype, op, postScale);
    toHost(dst, dd, bytes);
  }

  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override {
    const size_t bytes = count * dataTypeSize(dtype);
    if (bytes == 0) return;
    const std::byte* ds = onDevice(src, bytes, scratchA_);
    std::byte* dd = mapped(dst, bytes) ? devOf(dst) : scratchD_.get(bytes);
    CudaReducer(device_, stream_).scale(dd, ds, count, dtype, factor);
    toHost(dst, dd, bytes);
  }

 private:
  bool mapped(const void* p, size_t bytes) const {
    const auto* q = static_cast<const std::byte*>(p);
    return q >= host_ && q + bytes <= host_ + bytes_;
  }
  std::byte* devOf(const void* p) const { return dev_ + (static_cast<const std::byte*>(p) - host_); }
  const std::byte* onDevice(const void* p, size_t bytes, GrowingDeviceBuffer& scratch) {
    if (mapped(p, bytes)) return devOf(p);
    std::byte* d = scratch.get(bytes);
    checkCuda(cudaMemcpyAsync(d, p, bytes, cudaMemcpyHostToDevice, stream_), "staging: copy of a received segment to the device");
    return d;
  }
  void toHost(void* dst, const std::byte* dd, size_t bytes) {
    checkCuda(cudaMemcpyAsync(dst, dd, bytes, cudaMemcpyDeviceToHost, stream_), "staging: copy of a folded segment to the host");
    checkCuda(cudaStreamSynchronize(stream_), "staging: fold on the device");
  }

  int device_;
  cudaStream_t stream_;
  std::byte* host_ = nullptr;
  std::byte* dev_ = nullptr;
  size_t bytes_ = 0;
  GrowingDeviceBuffer scratchA_{"staging scratch"}, scratchB_{"staging scratch"}, scratchD_{"staging scratch"};
};

GpuStaging::GpuStaging(int device, size_t blockBytes)
    : device_(device), blockBytes_(blockBytes != 0 ? blockBytes : params::kCudaStagingBytes.asBytes()) {
  RF_ENFORCE_GT(blockBytes_, size_t{0}, params::kCudaStagingBytes.name, " must be at least 1 byte");
  CudaDeviceGuard guard(device_);
  void* pinned = nullptr;
  checkCuda(cudaHostAlloc(&pinned, kSlots * blockBytes_, cudaHostAllocDefault),
            "cudaHostAlloc of " + std::to_string(kSlots * blockBytes_) + " pinned staging bytes");
  pinned_ = static_cast<std::byte*>(pinned);
  for (cudaStream_t* s : {&in_, &out_, &work_}) checkCuda(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
  checkCuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  for (size_t i = 0; i < kSlots; ++i) {
    checkCuda(cudaEventCreateWithFlags(&inDone_[i], cudaEventDisableTiming), "cudaEventCreate");
    checkCuda(cudaEventCreateWithFlags(&outDone_[i], cudaEventDisableTiming), "cudaEventCreate");
  }
  reducer_ = std::make_unique<Reducer>(device_, work_);
}

GpuStaging::~GpuStaging() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  for (cudaStream_t s : {in_, out_, work_}) {
    if (s != nullptr) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  for (cudaEvent_t e : {ready_, done_, inDone_[0], inDone_[1], inDone_[2], outDone_[0], outDone_[1], outDone_[2]}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  reducer_.reset();
  if (previous >= 0) cudaSetDevice(previous);
}

void GpuStaging::stage(std::byte* dev, size_t bytes, size_t elemSize, cudaStream_t caller, const Exchange& exchange) {
  // Start after the caller's queued work; every later copy is ordered after `ready_`.
  checkCuda(cudaEventRecord(ready_, caller), "cudaEventRecord on the caller's stream");
  checkCuda(cudaStreamWaitEvent(in_, ready_, 0), "cudaStreamWaitEvent");
  checkCuda(cudaStreamWaitEvent(out_, ready_, 0), "cudaStreamWaitEvent");
  checkCuda(cudaStreamWaitEvent(work_, ready_, 0), "cudaStreamWaitEvent");
  const sched::StagingSchedule schedule(bytes, elemSize, blockBytes_, kSlots);
  for (const sched::StagingStep& step : schedule.steps()) {
    const sched::StagingBlock blk = schedule.block(step.block);
    std::byte* host = pinned_ + blk.slot * blockBytes_;
    std::byte* devBlock = dev + blk.offset;
    switch (step.kind) {
      case sched::StagingStep::kCopyIn:
        checkCuda(cudaMemcpyAsync(host, devBlock, blk.bytes, cudaMemcpyDeviceToHost, in_), "staging: device-to-host copy");
        checkCuda(cudaEventRecord(inDone_[blk.slot], in_), "cudaEventRecord");
        break;
      case sched::StagingStep::kWaitCopyIn:
        checkCuda(cudaEventSynchronize(inDone_[blk.slot]), "staging: device-to-host copy");
        break;
      case sched::StagingStep::kExchange:
        exchange(host, devBlock, blk.bytes);
        break;
      case sched::StagingStep::kCopyOut:
        checkCuda(cudaMemcpyAsync(devBlock, host, blk.bytes, cudaMemcpyHostToDevice, out_), "staging: host-to-device copy");
        checkCuda(cudaEventRecord(outDone_[blk.slot], out_), "cudaEventRecord");
        break;
      case sched::StagingStep::kWaitCopyOut:
        checkCuda(cudaEventSynchronize(outDone_[blk.slot]), "staging: host-to-device copy");
        break;
    }
  }
  // Completion: the caller's stream waits for the last copy to the device.
  checkCuda(cudaEventRecord(done_, out_), "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(caller, done_, 0), "cudaStreamWaitEvent on the caller's stream");
}

void GpuStaging::allreduce(Communicator& comm, const StagedAllreduceOptions& o) {
  CudaDeviceGuard guard(device_);
  const size_t es = dataTypeSize(o.dtype);
  const size_t bytes = o.count * es;
  if (bytes == 0) {  // still a collective: every rank takes part in the (empty) exchange
    ringfold::allreduce(comm, {nullptr, nullptr, 0, o.dtype, o.op, o.preScale, o.postScale});
    return;
  }
  RF_ENFORCE(o.sendbuf != nullptr && o.recvbuf != nullptr, "staged allreduce: null device buffer for ", o.count,
             " elements");
  auto* recv = static_cast<std::byte*>(o.recvbuf);
  if (o.sendbuf != o.recvbuf) {
    checkCuda(cudaEventRecord(ready_, o.stream), "cudaEventRecord on the caller's stream");
    checkCuda(cudaStreamWaitEvent(in_, ready_, 0), "cudaStreamWaitEvent");
    checkCuda(cudaMemcpyAsync(recv, o.sendbuf, bytes, cudaMemcpyDeviceToDevice, in_), "staging: copy of sendbuf");
  }
  // The collective folds through the staging reducer, which keeps the block's device copy current.
  stage(recv, bytes, es, o.stream, [&](std::byte* host, std::byte* devBlock, size_t blockBytes) {
    reducer_->bind(host, devBlock, blockBytes);
    AllreduceOptions block{host, host, blockBytes / es, o.dtype, o.op, o.preScale, o.postScale};
    block.reducer = reducer_.get();
    ringfold::allreduce(comm, block);
  });
}

void GpuStaging::broadcast(Communicator& comm, const StagedBroadcastOptions& o) {
  CudaDeviceGuard guard(device_);
  const size_t es = dataTypeSize(o.dtype);
  const size_t bytes = o.count * es;
  if (bytes == 0) {
    ringfold::broadcast(comm, {nullptr, nullptr, 0, o.dtype, o.root});
    return;
  }
  RF_ENFORCE(o.buffer != nullptr, "staged broadcast: null device buffer for ", o.count, " elements");
  stage(static_cast<std::byte*>(o.buffer), bytes, es, o.stream, [&](std::byte* host, std::byte*, size_t blockBytes) {
    ringfold::broadcast(comm, {host, host, blockBytes / es, o.dtype, o.root});
  });
}

}  // namespace ringfold
