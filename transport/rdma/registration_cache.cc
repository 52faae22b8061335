// RegistrationCache (registration_cache.h).
#include "transport/rdma/registration_cache.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "common/logging.h"

namespace ringfold::transport::rdma {

namespace {

uintptr_t pageSize() {
  static const uintptr_t size = [] {
    long s = ::sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<uintptr_t>(s) : uintptr_t{4096};
  }();
  return size;
}

}  // namespace

RegistrationCache::RegistrationCache(Fabric& fabric, uint64_t budgetBytes) : fabric_(fabric), budget_(budgetBytes) {}

RegistrationCache::~RegistrationCache() {
  close();
  // Whoever uses an entry holds the device state that owns this cache, so none is in use now.
  for (Entry* e : live_) delete e;
}

RegistrationCache::Entry* RegistrationCache::acquire(void* data, size_t size, MemoryKind kind) {
  RF_ENFORCE(!closed_, "the rdma device was closed: memory cannot be registered");
  RF_ENFORCE(size > 0 && data != nullptr, "registering an empty range");
  const uintptr_t page = pageSize();
  const uintptr_t first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t start = first & ~(page - 1);
  const uintptr_t end = (first + size + page - 1) & ~(page - 1);

  // The indexed ranges do not overlap, so only the one starting at or before `start` can cover.
  auto it = index_.upper_bound(start);
  if (it != index_.begin()) {
    Entry* e = std::prev(it)->second;
    if (e->start_ <= start && e->end_ >= end) {
      if (e->idle_) {
        lru_.erase(e->lru_);
        e->idle_ = false;
        idleBytes_ -= e->end_ - e->start_;
      }
      ++e->uses_;
      ++counters_.hits;
      return e;
    }
  }

  ++counters_.misses;
  // Overlapping entries: the predecessor if it reaches past `start`, then those starting before `end`.
  uintptr_t unionStart = start, unionEnd = end;
  std::vector<Entry*> overlapping;
  it = index_.upper_bound(start);
  if (it != index_.begin() && std::prev(it)->second->end_ > start) --it;
  for (; it != index_.end() && it->second->start_ < end; ++it) {
    overlapping.push_back(it->second);
    unionStart = std::min(unionStart, it->second->start_);
    unionEnd = std::max(unionEnd, it->second->end_);
  }

  auto e = std::make_unique<Entry>();
  bool registered = false;
  if (!overlapping.empty()) {
    try {
      e->reg_ = fabric_.registerMemory(reinterpret_cast<void*>(unionStart), unionEnd - unionStart, kind);
      e->start_ = unionStart;
      e->end_ = unionEnd;
      registered = true;
    } catch (const std::exception& x) {
      RF_LOG(kDebug) << "rdma: registering the union of overlapping ranges failed (" << x.what()
                     << "); registering the range alone";
    }
  }
  if (!registered) {
    e->reg_ = fabric_.registerMemory(reinterpret_cast<void*>(start), end - start, kind);
    e->start_ = start;
    e->end_ = end;
  }
  ++counters_.registrations;
  e->registered_ = true;
  e->uses_ = 1;
  // What the new entry overlaps leaves the index (the indexed ranges stay disjoint).
  for (Entry* old : overlapping) unindex(old);
  Entry* out = e.release();
  live_.insert(out);
  out->indexed_ = true;
  index_[out->start_] = out;
  return out;
}

void RegistrationCache::unindex(Entry* e) noexcept {
  if (e->indexed_) {
    index_.erase(e->start_);
    e->indexed_ = false;
  }
  if (e->idle_) {
    lru_.erase(e->lru_);
    e->idle_ = false;
    idleBytes_ -= e->end_ - e->start_;
  }
  dropIfDone(e);
}

void RegistrationCache::deregister(Entry* e) noexcept {
  if (!e->registered_) return;
  e->registered_ = false;
  fabric_.deregister(e->reg_);  // close() deregistered everything before closed_ was set
  ++counters_.deregistrations;
}

void RegistrationCache::dropIfDone(Entry* e) noexcept {
  if (e->uses_ > 0 || e->indexed_) return;
  deregister(e);
  live_.erase(e);
  delete e;
}

void RegistrationCache::release(Entry* e) noexcept {
  if (e == nullptr) return;
  if (--e->uses_ > 0) return;
  if (!e->indexed_ || closed_ || budget_ == 0 || !e->registered_) {
    unindex(e);
    return;
  }
  e->idle_ = true;
  e->lru_ = lru_.insert(lru_.end(), e);
  idleBytes_ += e->end_ - e->start_;
  trim();
}

void RegistrationCache::trim() noexcept {
  while (idleBytes_ > budget_ && !lru_.empty()) unindex(lru_.front());
}

void RegistrationCache::invalidate(Entry* e) noexcept {
  if (e == nullptr) return;
  deregister(e);
  unindex(e);
}

void RegistrationCache::close() noexcept {
  if (closed_) return;
  // Deregister everything while the fabric is open; entries still in use stay allocated (their
  // holders release them later) but are dead.
  for (Entry* e : live_) deregister(e);
  closed_ = true;
  std::vector<Entry*> indexed;
  for (auto& [start, e] : index_) indexed.push_back(e);
  for (Entry* e : indexed) unindex(e);
}

}  // namespace ringfold::transport::rdma
