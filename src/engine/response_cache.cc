#include "engine/response_cache.h"

namespace ringfold::engine {

bool ResponseCache::sameProperties(const Request& a, const Request& b) {
  return a.op == b.op && a.dtype == b.dtype && a.reduceOp == b.reduceOp && a.root == b.root &&
         a.device == b.device && a.preScale == b.preScale && a.postScale == b.postScale &&
         a.shape == b.shape && a.group == b.group && a.groupSize == b.groupSize;
}

bool ResponseCache::cacheable(const Response& response) {
  if (response.error) return false;
  switch (response.op) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kReducescatter:
    case OpType::kReduce:
      return true;
    default:
      return false;
  }
}

Request ResponseCache::requestFor(const Response& response, int rank) {
  Request r;
  r.rank = rank;
  r.op = response.op;
  r.dtype = response.dtype;
  r.reduceOp = response.reduceOp;
  r.root = response.root;
  r.device = response.device;
  r.preScale = response.preScale;
  r.postScale = response.postScale;
  r.name = response.name;
  r.shape = response.shape;
  r.group = response.group;
  return r;
}

ResponseCache::Lookup ResponseCache::lookup(const Request& local, uint32_t* slot) const {
  auto it = byName_.find(local.name);
  if (it == byName_.end()) return Lookup::kMiss;
  *slot = it->second;
  return sameProperties(slots_[it->second]->local, local) ? Lookup::kHit : Lookup::kInvalid;
}

void ResponseCache::touch(uint32_t slot) {
  auto pos = lruPos_.at(slot);
  lru_.splice(lru_.begin(), lru_, pos);
}

void ResponseCache::put(const Response& response, const Request& local) {
  if (capacity_ == 0 || !cacheable(response)) return;
  auto it = byName_.find(response.name);
  if (it != byName_.end()) {
    slots_[it->second] = Slot{response, local};
    touch(it->second);
    return;
  }
  uint32_t slot;
  if (slots_.size() < capacity_) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = lru_.back();  // evict the least recently used
    byName_.erase(slots_[slot]->response.name);
    lru_.pop_back();
    lruPos_.erase(slot);
  }
  slots_[slot] = Slot{response, local};
  byName_[response.name] = slot;
  lru_.push_front(slot);
  lruPos_[slot] = lru_.begin();
}

}  // namespace ringfold::engine
