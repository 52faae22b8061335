// Engine: Horovod's background engine (engine.cc: construction and the background thread;
// engine_calls.cc: what callers call). Framework plugins enqueue tensors one at a time, by name,
// in any order, from any thread; the engine matches them across ranks, fuses small ones, runs
// the collectives and completes each tensor's handle.
//
// One background thread per engine loops once per cycle time (RINGFOLD_CYCLE_TIME). A cycle
// that ran anything is also followed at once by a follow-up cycle, which leaves that schedule
// alone: a backward pass enqueues gradients in bursts, and the ones enqueued while a batch ran
// then go without waiting for the tick, while a tensor enqueued after an idle follow-up still
// waits only until the regular tick. (The global set's responses are the same on every rank,
// so its ranks choose alike.) The thread does not wait for the tick either while this rank has
// tensors to negotiate: one enqueued since the last cycle, or one the other ranks have not
// submitted yet. It starts a cycle RINGFOLD_WAKE_DELAY_US later (0 by default: at once), so a
// small model's step no longer lasts a cycle time. Cycles stay collective: a rank that starts
// one early waits in its negotiation for the others, so no rank cycles faster than the slowest.
// Each cycle:
//   1. drain the queue of new tensors into their process sets;
//   2. for each process set this rank belongs to, in id order: negotiate (process_set.h: the
//      cached fast path, else the coordinator), plan batches (fusion.h), and run them
//      (operations.h), completing handles; errors the group agreed on complete handles with
//      that error on every rank;
//   3. apply agreed control changes: shutdown, tuned settings (autotune.h), process sets added
//      or removed (these run as negotiated operations on the global set, so every rank applies
//      them at the same point).
//
// Contract
//   * enqueue() checks what it can check locally, and is the only place that checks a tensor's
//     arguments (validateTensor in tensor_args.h, then the split count and the GPU); it throws
//     InvalidArgument (bad argument, a name already in flight in that set, unknown set, this rank
//     not in the set) or EngineStopped (after shutdown, or after the engine failed); otherwise
//     it returns a handle that the engine completes exactly once.
//   * Disagreements between ranks (shape, dtype, op, root, device, ...) complete the tensor's
//     handle on every rank with the same error, naming the tensor and the ranks that differ.
//   * A peer that dies fails every pending handle on every rank with an IoError-derived
//     message (kAborted) within the communicator's timeout; the engine is then unusable.
//   * shutdown() on any rank stops every rank's engine at the same cycle; pending handles
//     complete with a shutdown error. The destructor shuts down.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/topology.h"
#include "engine/autotune.h"
#include "engine/engine_options.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/operations.h"
#include "engine/process_set.h"
#include "engine/tensor_args.h"
#include "engine/timeline.h"

namespace ringfold::engine {

// Thrown by enqueue once the engine takes no more work: after shutdown() (on any rank) or after
// a failure stopped it. what() says which.
class EngineStopped : public Error {
 public:
  EngineStopped(StatusCode code, const std::string& what) : Error(what), code_(code) {}
  // kPreconditionError after shutdown; the failure's code (e.g. kAborted for a dead peer) after
  // a failure.
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Counters since start (read with Engine::stats()).
struct EngineStats {
  uint64_t cycles = 0;
  uint64_t coordinatorRounds = 0;  // cycles (per set) that needed the coordinator
  uint64_t cacheHits = 0;          // tensors agreed through the cache's bit vector
  uint64_t tensorsRun = 0;         // tensors completed by a collective (not errors)
  uint64_t batches = 0;            // collective calls made for them (fewer: fusion)
};

class Engine {
 public:
  // `hosts`: this rank's place among the hosts (describeHosts); its rank and size are the
  // communicator's. The default: every rank alone on its host.
  Engine(std::unique_ptr<Communicator> world, EngineOptions options, HostLayout hosts = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Bootstrap from the environment (Communicator::fromEnvironment) and params. `incarnation`
  // numbers successive inits of one job (shutdown, then init again: elastic training); every
  // rank passes the same number, and each incarnation meets under its own store keys.
  static std::unique_ptr<Engine> fromEnvironment(std::vector<std::vector<int>> processSets = {},
                                                 std::optional<bool> dynamicProcessSets = {},
                                                 int incarnation = 0);

  // Every tensor is checked once, here (validate()), before anything is queued. GPU tensors
  // (device >= 0): allreduce and broadcast, in CUDA builds, with a device present; anything else
  // throws InvalidArgument naming the tensor (e.g. "no CUDA device is available").
  Handle enqueue(TensorArgs args);
  // A grouped call: the tensors are negotiated and released together. A bad tensor throws with
  // "tensor <index>: " before its message, and none of the group is queued.
  std::vector<Handle> enqueueGroup(std::vector<TensorArgs> args);
  // Throws InvalidArgument unless an alltoall in `processSet` may pass `nsplits` splits (one per
  // rank of the set). The C ABI calls it before it reads a caller's array of that length.
  void checkSplitCount(int processSet, int64_t nsplits) const;
  // Asks to cancel `handle`'s operation. Only an operation that has not been agreed yet is
  // cancelled: one still queued here, one this rank has not reported to the coordinator, or one
  // it reported that some rank of the set has not submitted yet (the coordinator withdraws this
  // rank's request at the next cycle; the other ranks that submitted it then wait for this rank
  // again, so cancel it on every rank that submitted it). It then completes with kAborted and
  // the message "cancelled". An operation already agreed (every rank submitted it, or it was
  // ready everywhere through the cache) runs to completion as if cancel() had not been called.
  // Asynchronous: wait on the handle to learn which happened. Unknown handles: InvalidArgument.
  void cancel(Handle handle);
  // How many joins completed in `processSet` (0 for an unknown set). After a join every rank
  // of the set is in step, so automatic names of unnamed operations restart from it (C ABI).
  uint64_t joinsCompleted(int processSet) const;
  Handle join(int processSet = 0);
  Handle barrier(int processSet = 0);
  HandleTable& handles() { return handles_; }

  // Blocking, called by every rank of the global set with the same arguments (dynamic mode).
  int addProcessSet(std::vector<int> ranks);
  void removeProcessSet(int id);
  std::vector<int> processSetIds() const;
  std::vector<int> processSetRanks(int id) const;  // throws InvalidArgument for an unknown id
  int processSetRank(int id) const;                // -1 if this rank is not a member

  void shutdown();
  bool running() const { return running_.load(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const HostLayout& topology() const { return topology_; }
  // The GPU this rank uses when a tensor does not say (defaultCudaDevice in device_ops.h), -1
  // without CUDA support or device. Thread-safe.
  int cudaDevice();

  // Timeline, written by global rank 0 (elsewhere these do nothing). Unlike Horovod, which
  // needs HOROVOD_TIMELINE=DYNAMIC at init, a timeline can be started at any time.
  void startTimeline(const std::string& path, bool markCycles);
  void stopTimeline();
  TunableSettings settings() const;
  EngineStats stats() const;

 private:
  void loop();
  bool cycle();  // false: stop
  void runSet(ProcessSet& set, std::vector<Response> responses);
  void complete(int set, TensorEntry& entry, Result result);
  void completeError(int set, TensorEntry& entry, StatusCode code, const std::string& message);
  void failAll(StatusCode code, const std::string& message);
  void applyControl(const Response& response, ProcessSet& global);
  // validateTensor(a) (tensor_args.h), then what needs the engine: the split count and the GPU.
  void validate(const TensorArgs& a);
  void checkDevice(const TensorArgs& a);
  std::vector<TensorEntry> toEntries(std::vector<TensorArgs> args) const;
  std::vector<Handle> enqueueInternal(std::vector<TensorEntry> entries, const std::vector<int>& sets);
  // Under mu_: asks for a cycle options_.wakeDelayUs after `now` unless wake-ups are off or one
  // is already asked for; true if this call asked.
  bool wakeSoon(std::chrono::steady_clock::time_point now);
  ProcessSet* findSet(int id) const;
  // Splits the global communicator for `ranks` (sorted; members only) and registers the set
  // under the next id, which it returns.
  int createSet(const std::vector<int>& ranks);

  const int rank_;
  const int size_;
  const HostLayout topology_;
  EngineOptions options_;
  HandleTable handles_;
  Timeline timeline_;
  Operations operations_;
  std::unique_ptr<Autotuner> autotuner_;  // global rank 0 only
  bool tunePending_ = false;               // rank 0: announce current() next cycle
  bool ranWork_ = false;                   // the last cycle ran responses: start the next at once
  uint64_t tunedBytes_ = 0;                // operations_.bytesMoved() at the last record()
  TunableSettings tuned_;

  mutable std::mutex mu_;  // guards everything below up to the thread
  std::condition_variable wake_;
  std::vector<std::pair<int, TensorEntry>> queue_;
  // When the first tensor enqueued since the last drain wants a cycle (options_.wakeDelayUs
  // after it); max() when none is waiting.
  std::chrono::steady_clock::time_point wakeAt_ = std::chrono::steady_clock::time_point::max();
  std::vector<std::unordered_set<std::string>> inFlight_;  // per set id
  std::vector<uint64_t> joinsCompleted_;                   // per set id
  std::vector<std::unique_ptr<ProcessSet>> sets_;           // by id; null once removed
  bool shutdownRequested_ = false;
  std::vector<Handle> cancels_;  // asked for, applied by the engine thread at the next cycle
  EngineStats stats_;
  std::string failure_;  // why the engine stopped, for later enqueues
  StatusCode failureCode_ = StatusCode::kOk;

  std::atomic<bool> running_{true};
  std::thread thread_;
};

}  // namespace ringfold::engine
