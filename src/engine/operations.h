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
// GPU tensors (device >= 0; allreduce and broadcast) go through DeviceOps (device_ops.h): staged
// through pinned host memory, folded on the GPU, fused in a device buffer. Each rank uses its own
// tensors' device (ranks may use different GPU indices); a joined rank uses RINGFOLD_CUDA_DEVICE
// or its local rank's GPU (defaultCudaDevice in device_ops.h).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
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

 private:
  void allreduce(Communicator& comm, const std::vector<const Response*>& members,
                 std::vector<std::optional<TensorEntry>>& entries);
  Result allgather(Communicator& comm, const Response& r, const TensorEntry& e);
  Result alltoall(Communicator& comm, const Response& r, const TensorEntry& e);
  Result reducescatter(Communicator& comm, const Response& r, const TensorEntry& e);
  bool tracing() const;
  void activity(const std::vector<const Response*>& members, const char* name);
  void activityEnd(const std::vector<const Response*>& members);

  void deviceAllreduce(Communicator& comm, const std::vector<const Response*>& members,
                       std::vector<std::optional<TensorEntry>>& entries);
  int localDevice(const std::vector<std::optional<TensorEntry>>& entries, const Response& head);

  Timeline* timeline_;
  int localRank_;
  std::unique_ptr<DeviceOps> deviceOps_;
  std::vector<std::byte> fusion_;  // grows to the largest batch, then reused
  std::vector<std::byte> staging_;
  uint64_t bytesMoved_ = 0;
};

// Rows of Horovod's reducescatter split that `rank` of `size` receives from `rows` rows.
int64_t reducescatterRows(int64_t rows, int rank, int size);

}  // namespace ringfold::engine
