// RegistrationCache: the memory registrations of one rdma device's fabric, reused across
// requests (protocol.h, "Registration cache").
//
// Contract
//   * acquire(data, size) returns an entry whose registration covers [data, data + size), with
//     one more use: a cached one when its page-aligned range covers the bytes (a hit), else a new
//     registration of the page-aligned range (a miss). A new range that overlaps cached ones
//     without being covered registers their union (the old entries leave the index: unused
//     ones are deregistered now, used ones when their last use ends); if the union cannot be
//     registered (part of it was unmapped since), the range alone is.
//   * release(entry) ends a use. Entries without uses are kept, least recently used first out,
//     while their bytes total at most `budgetBytes`; beyond that (and always with a budget of
//     0) they are deregistered.
//   * invalidate(entry) deregisters now although uses remain (their owner is failing and a peer
//     may still write there); the entry leaves the index and its uses still end with release.
//   * close() deregisters everything (before the fabric closes); later acquire throws, release
//     only counts down. Not thread-safe: the thread driving the device calls everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <unordered_set>

#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma {

class RegistrationCache {
 public:
  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t registrations = 0;
    uint64_t deregistrations = 0;
  };

  class Entry {
   public:
    const Registration& registration() const { return reg_; }

   private:
    friend class RegistrationCache;
    uintptr_t start_ = 0, end_ = 0;  // page-aligned range registered
    Registration reg_;
    int uses_ = 0;
    bool indexed_ = false;     // findable by acquire()
    bool registered_ = false;  // not deregistered yet
    bool idle_ = false;        // in lru_
    std::list<Entry*>::iterator lru_;
  };

  RegistrationCache(Fabric& fabric, uint64_t budgetBytes);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // Throws what the fabric throws (InvalidArgument for memory it cannot register, Error).
  Entry* acquire(void* data, size_t size, MemoryKind kind = MemoryKind::kHost);
  void release(Entry* entry) noexcept;
  void invalidate(Entry* entry) noexcept;
  void close() noexcept;

  const Counters& counters() const { return counters_; }
  uint64_t budgetBytes() const { return budget_; }
  uint64_t idleBytes() const { return idleBytes_; }
  size_t cachedEntries() const { return index_.size(); }

 private:
  void unindex(Entry* e) noexcept;
  void deregister(Entry* e) noexcept;
  void dropIfDone(Entry* e) noexcept;  // deletes an entry with no uses that is out of the index
  void trim() noexcept;

  Fabric& fabric_;
  uint64_t budget_;
  bool closed_ = false;
  std::map<uintptr_t, Entry*> index_;  // by start; the indexed ranges never overlap
  std::list<Entry*> lru_;              // unused indexed entries, least recently used first
  uint64_t idleBytes_ = 0;
  std::unordered_set<Entry*> live_;    // every entry allocated (indexed or retired)
  Counters counters_;
};

}  // namespace ringfold::transport::rdma
