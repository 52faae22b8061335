// HandleTable: the engine's answer to "is my tensor done, and what came out?".
//
// enqueue returns a Handle; the background thread completes it with a Result exactly once; the
// caller polls or waits, reads the Result, and releases the handle. As PyTorch's c10d Work:
// poll = isCompleted, wait(timeout), and the status carries the error (exception()).
// Thread-safe: handles are created and read on user threads and completed on the engine's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ringfold::engine {

using Handle = int64_t;

// Horovod's Status codes, in its order.
enum class StatusCode : int {
  kOk = 0,
  kUnknownError = 1,
  kPreconditionError = 2,  // e.g. used after shutdown, unknown process set
  kAborted = 3,            // a peer or the network failed; the engine (or the set) is unusable
  kInvalidArgument = 4,    // the ranks disagree, or a bad argument
  kInProgress = 5,
};

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string message;
  bool ok() const { return code == StatusCode::kOk; }
};

struct Result {
  Status status;
  // Outputs whose size the group decides (allgather, alltoall, reducescatter) live here.
  std::unique_ptr<std::byte[]> output;
  size_t outputBytes = 0;
  std::vector<int64_t> shape;           // shape of `output`
  std::vector<int64_t> receivedSplits;  // alltoall: rows received from each rank
  int lastJoinedRank = -1;              // join
  int processSetId = -1;                // add_process_set
};

class HandleTable {
 public:
  Handle create();
  // Completes `handle` (once). Unknown handles (released early) are ignored.
  void complete(Handle handle, Result result);
  // Throws InvalidArgument for a handle that does not exist (never created, or released).
  bool poll(Handle handle) const;
  // Waits until done or `timeout` passes; returns null on timeout. The Result stays valid until
  // release(handle).
  const Result* wait(Handle handle, std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  void release(Handle handle);
  size_t size() const;

 private:
  struct State {
    bool done = false;
    Result result;
  };
  std::shared_ptr<State> find(Handle handle) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Handle next_ = 1;
  std::unordered_map<Handle, std::shared_ptr<State>> states_;
};

}  // namespace ringfold::engine
