// Operations: run one batch of agreed responses (fusion.h) on a process set's communicator.
//
// The engine takes the batch's local entries out of the set first (so that, whatever happens,
// it can complete their handles), then calls run(). run() returns one Result per member, in
// batch order, or throws what the collective threw (the communicator then fails the same way
// on every member: collectives/communicator.h, "guarded").
//
//   allreduce     : one member runs in place from the caller's input to its output; several are
//                   packed into the fusion buffer (MEMCPY_IN_FUSION_BUFFER), reduced once, and
//                   unpacked (MEMCPY_OUT_FUSION_BUFFER). A rank that has joined has no entry and
//                   contributes zeros.
//   allgather     : allgatherv with each rank's first dimension from the response; the engine
//                   allocates the output ([sum of first dims, rest of shape]).
//   broadcast     : from the response's root into the caller's output.
//   alltoall      : rows per destination from the splits (equal split when none); received
//                   rows per source are exchanged first; the engine allocates the output.
//   reducescatter : Horovod's split of the first dimension (the first dim % n ranks get one
//                   row more); uneven splits go through a zero-padded staging buffer, because
//                   the reduce-scatter collective moves equal blocks.
//   barrier       : the dissemination barrier.
// Memory: the buffers an operation needs (an output the engine allocates, the fusion buffer,
// reducescatter's staging) are allocated before any data moves. When the batch is large
// (kAgreeMinBytes, reckoned alike on every member from the responses), the members then agree
// that each of them got its buffers: one allgather of 8 bytes. If a member could not, the batch
// fails on every member with one message naming the tensor, its size, "out of memory" and the
// ranks that ran out, and the engine stays usable. A failed allocation in a smaller batch stops
// the engine on that rank (an Error saying so), which then aborts its communicators so that
// every peer learns why at once. The fusion buffer is reused, so a fused allreduce checks only
// when it needs more than its set has agreed before.
// GPU tensors (device >= 0; allreduce and broadcast) go through DeviceOps (device_ops.h): staged
// through pinned host memory, folded on the GPU, fused in a device buffer. Each rank uses its own
// tensors' device (ranks may use different GPU indices); a joined rank uses RINGFOLD_CUDA_DEVICE
// or its local rank's GPU (defaultCudaDevice in device_ops.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/device_ops.h"
#include "engine/fusion.h"
#include "engine/handle_table.h"
#include "engine/process_set.h"

namespace ringfold::engine {

class Timeline;

class Operations {
 public:
  // localRank: which GPU a joined rank (no tensor of its own) uses, see defaultCudaDevice().
  Operations(Timeline* timeline, int localRank);
  ~Operations();

  // GPU tensors' operations (device_ops.h); null in builds without CUDA.
  DeviceOps* deviceOps() { return deviceOps_.get(); }

  std::vector<Result> run(ProcessSet& set, const std::vector<Response>& responses, const Batch& batch,
                          std::vector<std::optional<TensorEntry>>& entries);

  // Bytes moved by the collectives so far (autotune's measure of throughput).
  uint64_t bytesMoved() const { return bytesMoved_; }

  // Batches of at least this many bytes check that every member allocated its buffers.
  static constexpr uint64_t kAgreeMinBytes = uint64_t{4} << 20;

 private:
  // Each returns an empty string, or the out-of-memory error every member reports.
  // `reducer` does the batch's reductions (the communicator's, traced on the timeline).
  std::string allreduce(ProcessSet& set, const std::vector<const Response*>& members,
                        std::vector<std::optional<TensorEntry>>& entries, Reducer& reducer);
  Result allgather(ProcessSet& set, const Response& r, const TensorEntry& e);
  Result alltoall(ProcessSet& set, const Response& r, const TensorEntry& e);
  Result reducescatter(ProcessSet& set, const Response& r, const TensorEntry& e, Reducer& reducer);
  // The members tell each other how many bytes each failed to allocate (`failedBytes` here) for
  // the batch headed by `head`, of `batchBytes`; returns the error they all report, or "".
  std::string agreeOnMemory(ProcessSet& set, const Response& head, size_t fused, uint64_t batchBytes,
                            uint64_t failedBytes);
  // One tensor's batch of `batchBytes`, of which this rank failed to allocate `failedBytes`:
  // agreeOnMemory() from kAgreeMinBytes on; below it, a failure stops the engine on this rank
  // (throws). Returns the error every member reports, or "".
  std::string checkMemory(ProcessSet& set, const Response& r, uint64_t batchBytes, uint64_t failedBytes);
  bool tracing() const;
  void activity(const std::vector<const Response*>& members, const char* name);
  void activityEnd(const std::vector<const Response*>& members);

  void deviceAllreduce(Communicator& comm, const std::vector<const Response*>& members,
                       std::vector<std::optional<TensorEntry>>& entries);
  int localDevice(const std::vector<std::optional<TensorEntry>>& entries, const Response& head);

  Timeline* timeline_;
  int localRank_;
  std::unique_ptr<DeviceOps> deviceOps_;
  std::unique_ptr<std::byte[]> fusion_;  // grows to the largest batch, then reused
  size_t fusionBytes_ = 0;
  std::unordered_map<int, uint64_t> fusionAgreed_;  // per set: the fused size its members all hold
  std::unique_ptr<std::byte[]> staging_;
  size_t stagingBytes_ = 0;
  uint64_t bytesMoved_ = 0;
};

// Rows of Horovod's reducescatter split that `rank` of `size` receives from `rows` rows.
int64_t reducescatterRows(int64_t rows, int rank, int size);

}  // namespace ringfold::engine
