// ProcessSet: a group of ranks that run collectives together, and its negotiation.
//
// Every process knows every set (same ids, same members, on every rank), but only members have
// a communicator and take part in its negotiation. Set 0 is the global set.
//
// Negotiation, once per engine cycle, collective over the set's members (negotiate()):
//   1. Each member classifies its new tensors against its response cache: a *hit* (same name,
//      same properties as a response agreed before) or not.
//   2. One small allreduce (uint8, max) of a vector that holds flags and one byte per cache slot:
//        [0] some rank asked to shut down
//        [1] some rank needs the coordinator (a miss, a hit waiting too long, or the coordinator
//            is still waiting on ranks for something, e.g. a join)
//        [2] rank 0 changed the tuned settings (autotune; global set only)
//        [3+s] cache slot s is NOT ready on some rank
//      A max over "not ready" bytes is the bitwise AND of "ready": slots that come out 0 are
//      ready everywhere and run now, in slot order, with no trip to the coordinator.
//   3. Only if flag [1] is set: every member sends the requests it has not sent yet to set rank
//      0 (the coordinator), which records them (coordinator.h), and broadcasts the responses
//      for whatever became ready (plus errors for mismatches and stalls). A member that cancels
//      a tensor it already sent sends a withdrawal (a kCancel request, setting flag [1]); if the
//      tensor was not released yet, a kCancel response tells that member to complete it.
//   4. Every member updates its cache from the cycle's list (touch hits, then put the
//      coordinator's responses, in order) so all caches stay identical.
// A hit that is not ready everywhere within kHitPatience is sent to the coordinator like a miss,
// so a tensor only some ranks submit always reaches the stall inspector.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/communicator.h"
#include "engine/coordinator.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace ringfold::engine {

class Timeline;

// A tensor this rank submitted, from enqueue until its handle completes.
struct TensorEntry {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;  // caller's output (allreduce, broadcast); null: the engine allocates
  void* stream = nullptr;  // GPU tensors: the cudaStream_t their data is ordered on
  Handle handle = 0;
  std::chrono::steady_clock::time_point enqueued;
  bool sent = false;  // sent to the coordinator
  bool cancelRequested = false;  // cancel() after it was sent: ask the coordinator to withdraw it
  bool cancelSent = false;       // that withdrawal was sent
};

struct NegotiationSettings {
  std::chrono::milliseconds stallWarning{60000};  // 0: no warnings
  std::chrono::milliseconds stallShutdown{0};     // 0: never fail stalled tensors
  Timeline* timeline = nullptr;                   // non-null only on the process that writes it
};

struct CycleResult {
  std::vector<Response> responses;  // agreed, in execution order
  bool shutdown = false;
  bool tuned = false;
  size_t cacheHits = 0;      // responses taken from the cache
  bool coordinated = false;  // the coordinator was consulted
};

class ProcessSet {
 public:
  static constexpr std::chrono::milliseconds kHitPatience{1000};

  // `comm` is null on ranks that are not members.
  ProcessSet(int id, std::vector<int> ranks, std::unique_ptr<Communicator> comm, int worldSize,
             size_t cacheCapacity);

  int id() const { return id_; }
  const std::vector<int>& ranks() const { return ranks_; }
  bool included() const { return comm_ != nullptr; }
  int rank() const { return comm_ ? comm_->rank() : -1; }
  int size() const { return static_cast<int>(ranks_.size()); }
  Communicator& comm() { return *comm_; }

  // Takes a new local tensor. Returns false (and leaves `entry` alone) if the group already
  // failed this name (a stall shutdown decided before this rank submitted it); failedMessage()
  // then says why.
  bool add(TensorEntry&& entry);
  std::optional<std::string> takeFailure(const std::string& name);

  CycleResult negotiate(bool wantShutdown, bool tuned, const NegotiationSettings& settings);

  // The local entry for a response's name (null if this rank did not submit it, e.g. joined).
  TensorEntry* entry(const std::string& name);
  std::optional<TensorEntry> take(const std::string& name);
  // Cancels `handle`'s entry, if this set holds it (*found). One not yet sent to the coordinator
  // is removed and returned (the caller completes it as cancelled). One already sent is marked:
  // the next negotiation asks the coordinator to withdraw it, and if the tensor has not been
  // released by then, a kCancel response for this rank follows (the caller completes it then);
  // otherwise it runs as agreed.
  std::optional<TensorEntry> cancel(Handle handle, bool* found);
  // Remembers an error response for a name this rank has not submitted yet, unless this rank
  // has joined (it will not submit it: the error was about the ranks that did). Returns
  // whether it was remembered.
  bool recordFailure(const Response& response);
  // After a join completed: every rank is in step again, so earlier remembered errors are stale.
  void forgetFailures() { failures_.clear(); }
  // True while this rank has a join pending in this set.
  bool joining() const;
  // Everything pending, removed (for shutdown and failure).
  std::vector<TensorEntry> takeAll();

 private:
  std::vector<std::vector<uint8_t>> gatherToRoot(const std::vector<uint8_t>& mine);
  std::vector<uint8_t> broadcastFromRoot(std::vector<uint8_t> bytes);
  std::vector<Response> coordinate(const std::vector<Request>& mine, const NegotiationSettings& settings);

  int id_;
  std::vector<int> ranks_;
  std::unique_ptr<Communicator> comm_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // set rank 0 only
  std::unordered_map<std::string, TensorEntry> pending_;
  std::vector<std::string> pendingOrder_;     // submission order (for deterministic sends)
  std::unordered_map<std::string, std::string> failures_;
  std::chrono::steady_clock::time_point lastStallWarning_{};
  // negotiate()'s flags-and-slots vector, kept between cycles: an idle engine allocates nothing
  // per cycle (with a sanitizer's allocator, which has no fork handlers, a fork() that lands
  // while another thread allocates leaves the child's allocator locked).
  std::vector<uint8_t> readiness_;
};

}  // namespace ringfold::engine
