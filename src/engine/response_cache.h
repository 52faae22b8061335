// ResponseCache: responses the group has agreed on before, so that a tensor that recurs with the
// same properties (every training step's gradients) skips the coordinator.
//
// Each rank keeps its own cache, and every rank's cache holds the same responses in the same
// slots: caches change only through put()/touch() calls made in the same order on every rank,
// from the cycle's agreed response list (ProcessSet::negotiate). A slot's index is therefore a
// name every rank understands, and one bit per slot ("ready here") exchanged with a bitwise AND
// tells every rank which cached tensors are ready everywhere, without a trip to the coordinator.
//
// A slot also remembers the *local* request that produced it; a new local request is a hit
// when it equals that request in every property (allgather: including this rank's own first
// dimension, so a hit on every rank means every rank's shape is unchanged and the cached
// per-rank sizes still hold). Same name with different properties is kInvalid: it goes to the
// coordinator, and the new response replaces the slot.
//
// Capacity 0 disables the cache. Eviction is least-recently-used (used = put or touched).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace ringfold::engine {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  enum class Lookup { kMiss, kHit, kInvalid };
  Lookup lookup(const Request& local, uint32_t* slot) const;

  // Only responses whose content follows from the ranks' requests alone are cached (not
  // alltoall, whose splits change, nor join, barrier or process-set changes), and no errors.
  static bool cacheable(const Response& response);

  // Stores `response`, produced with this rank's `local` request. A rank that had joined and
  // submitted nothing passes requestFor(response) instead, so that its slots stay in step.
  void put(const Response& response, const Request& local);
  void touch(uint32_t slot);
  // The request a rank would have made for `response` (allreduce: every rank's is the same).
  static Request requestFor(const Response& response, int rank);

  const Response& response(uint32_t slot) const { return slots_[slot]->response; }
  // Slots allocated so far (the length of the ready bit vector); equal on every rank.
  uint32_t slots() const { return static_cast<uint32_t>(slots_.size()); }
  size_t capacity() const { return capacity_; }

 private:
  struct Slot {
    Response response;
    Request local;
  };
  static bool sameProperties(const Request& a, const Request& b);

  size_t capacity_;
  std::vector<std::optional<Slot>> slots_;
  std::unordered_map<std::string, uint32_t> byName_;
  std::list<uint32_t> lru_;  // front: most recently used
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> lruPos_;
};

}  // namespace ringfold::engine
