#include "engine/process_set.h"

#include <unordered_set>

#include "collectives/collectives.h"
#include "common/error.h"
#include "common/logging.h"
#include "engine/device_ops.h"
#include "engine/timeline.h"

namespace ringfold::engine {

namespace {
constexpr size_t kFlagShutdown = 0;
constexpr size_t kFlagCoordinator = 1;
constexpr size_t kFlagTuned = 2;
constexpr size_t kNumFlags = 3;
}  // namespace

ProcessSet::ProcessSet(int id, std::vector<int> ranks, std::unique_ptr<Communicator> comm,
                       int worldSize, size_t cacheCapacity)
    : id_(id), ranks_(std::move(ranks)), comm_(std::move(comm)), cache_(cacheCapacity) {
  if (comm_ && comm_->rank() == 0) {
    coordinator_ = std::make_unique<Coordinator>(static_cast<int>(ranks_.size()), worldSize, deviceOpsBuilt());
  }
}

bool ProcessSet::add(TensorEntry&& entry) {
  if (failures_.count(entry.request.name)) return false;
  const std::string name = entry.request.name;
  pendingOrder_.push_back(name);
  pending_.emplace(name, std::move(entry));
  return true;
}

std::optional<std::string> ProcessSet::takeFailure(const std::string& name) {
  auto it = failures_.find(name);
  if (it == failures_.end()) return std::nullopt;
  std::string message = std::move(it->second);
  failures_.erase(it);
  return message;
}

bool ProcessSet::recordFailure(const Response& response) {
  if (joining()) return false;
  failures_[response.name] = response.errorMessage;
  return true;
}

bool ProcessSet::joining() const {
  for (const auto& [name, e] : pending_) {
    if (e.request.op == OpType::kJoin) return true;
  }
  return false;
}

TensorEntry* ProcessSet::entry(const std::string& name) {
  auto it = pending_.find(name);
  return it == pending_.end() ? nullptr : &it->second;
}

std::optional<TensorEntry> ProcessSet::take(const std::string& name) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return std::nullopt;
  TensorEntry e = std::move(it->second);
  pending_.erase(it);
  std::erase(pendingOrder_, name);
  return e;
}

std::optional<TensorEntry> ProcessSet::cancel(Handle handle, bool* found) {
  *found = false;
  for (const std::string& name : pendingOrder_) {
    TensorEntry& e = pending_.at(name);
    if (e.handle != handle) continue;
    *found = true;
    if (!e.sent) return take(name);
    e.cancelRequested = true;
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<TensorEntry> ProcessSet::takeAll() {
  std::vector<TensorEntry> out;
  for (const std::string& name : pendingOrder_) out.push_back(std::move(pending_.at(name)));
  pending_.clear();
  pendingOrder_.clear();
  return out;
}

CycleResult ProcessSet::negotiate(bool wantShutdown, bool tuned, const NegotiationSettings& settings) {
  const auto now = std::chrono::steady_clock::now();
  const uint32_t slots = cache_.slots();
  std::vector<uint8_t>& vec = readiness_;
  vec.assign(kNumFlags + slots, 1);
  vec[kFlagShutdown] = wantShutdown ? 1 : 0;
  vec[kFlagCoordinator] = coordinator_ && coordinator_->waiting() ? 1 : 0;
  vec[kFlagTuned] = tuned ? 1 : 0;

  // 1. Classify what has not gone to the coordinator yet. A grouped hit counts only when its
  //    whole group hits here, so common hits always hold whole groups.
  std::vector<std::pair<uint32_t, const Request*>> hits;
  std::unordered_map<std::string, int> groupHits;
  for (const std::string& name : pendingOrder_) {
    const TensorEntry& e = pending_.at(name);
    if (e.cancelRequested && !e.cancelSent) vec[kFlagCoordinator] = 1;  // a withdrawal to send
    if (e.sent) continue;
    uint32_t slot = 0;
    if (cache_.lookup(e.request, &slot) == ResponseCache::Lookup::kHit && now - e.enqueued < kHitPatience) {
      hits.emplace_back(slot, &e.request);
      if (!e.request.group.empty()) ++groupHits[e.request.group];
    } else {
      vec[kFlagCoordinator] = 1;
    }
  }
  for (const auto& [slot, request] : hits) {
    if (!request->group.empty() && groupHits[request->group] < request->groupSize) continue;
    vec[kNumFlags + slot] = 0;
  }

  // 2. One allreduce: max of "not ready" = not (AND of ready); max of flags = OR.
  allreduce(*comm_, {vec.data(), vec.data(), vec.size(), DataType::kUint8, ReduceOp::kMax});

  CycleResult out;
  out.shutdown = vec[kFlagShutdown] != 0;
  out.tuned = vec[kFlagTuned] != 0;
  std::unordered_set<std::string> fast;
  for (uint32_t s = 0; s < slots; ++s) {
    if (vec[kNumFlags + s] != 0) continue;
    out.responses.push_back(cache_.response(s));
    fast.insert(out.responses.back().name);
    cache_.touch(s);
  }
  out.cacheHits = out.responses.size();
  out.coordinated = vec[kFlagCoordinator] != 0;

  // 3. The coordinator, only when someone needs it.
  if (vec[kFlagCoordinator] != 0) {
    std::vector<Request> mine;
    for (const std::string& name : pendingOrder_) {
      TensorEntry& e = pending_.at(name);
      if (e.cancelRequested && !e.cancelSent) {
        Request withdrawal;
        withdrawal.op = OpType::kCancel;
        withdrawal.name = name;
        withdrawal.rank = e.request.rank;
        mine.push_back(std::move(withdrawal));
        e.cancelSent = true;
      }
      if (e.sent || fast.count(name)) continue;
      e.sent = true;
      mine.push_back(e.request);
    }
    for (Response& r : coordinate(mine, settings)) {
      // 4. Cache the coordinator's answers, in order, on every rank alike.
      if (ResponseCache::cacheable(r)) {
        const TensorEntry* e = entry(r.name);
        cache_.put(r, e ? e->request : ResponseCache::requestFor(r, rank()));
      }
      out.responses.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<Response> ProcessSet::coordinate(const std::vector<Request>& mine,
                                             const NegotiationSettings& settings) {
  auto gathered = gatherToRoot(encode(RequestList{mine}));
  std::vector<uint8_t> answer;
  if (coordinator_) {
    const auto now = std::chrono::steady_clock::now();
    Timeline* tl = settings.timeline && settings.timeline->active() ? settings.timeline : nullptr;
    for (int r = 0; r < size(); ++r) {
      RequestList list = r == 0 ? RequestList{mine} : decodeRequests(gathered[r].data(), gathered[r].size());
      for (Request& req : list.requests) {
        req.rank = r;  // the sender is who the transport says, not what the message claims
        if (req.op == OpType::kCancel) {
          coordinator_->withdraw(r, req.name);
          continue;
        }
        bool first = coordinator_->add(req, now);
        if (tl) {
          if (first) tl->negotiateStart(req.name, opTypeName(req.op));
          tl->negotiateRankReady(req.name, r);
        }
      }
    }
    std::vector<Response> ready = coordinator_->takeReady();
    if (settings.stallShutdown.count() > 0) {
      for (Response& r : coordinator_->failStalled(now, settings.stallShutdown)) ready.push_back(std::move(r));
    }
    if (settings.stallWarning.count() > 0 && now - lastStallWarning_ >= settings.stallWarning) {
      auto stalls = coordinator_->stalled(now, settings.stallWarning);
      if (!stalls.empty()) {
        const auto shutdownSeconds = settings.stallShutdown.count() / 1000.0;
        RF_LOG(kWarning) << (id_ == 0 ? "" : "process set " + std::to_string(id_) + ": ")
                         << Coordinator::describeStalls(stalls)
                         << (settings.stallShutdown.count() > 0
                                 ? detail::concat("\nA tensor still missing ranks after ", shutdownSeconds,
                                                  " s (RINGFOLD_STALL_SHUTDOWN_TIME) fails on every rank.")
                                 : std::string("\nRINGFOLD_STALL_SHUTDOWN_TIME is 0: they wait forever."));
        lastStallWarning_ = now;
      }
    }
    if (tl) {
      for (const Response& r : ready) tl->negotiateEnd(r.name);
    }
    answer = encode(ResponseList{ready});
  }
  answer = broadcastFromRoot(std::move(answer));
  return decodeResponses(answer.data(), answer.size()).responses;
}

std::vector<std::vector<uint8_t>> ProcessSet::gatherToRoot(const std::vector<uint8_t>& mine) {
  const int n = size();
  std::vector<uint64_t> lengths(n);
  uint64_t myLength = mine.size();
  allgather(*comm_, {&myLength, lengths.data(), 1, DataType::kUint64});
  std::vector<std::vector<uint8_t>> out(n);
  if (comm_->rank() == 0) {
    out[0] = mine;
    for (int r = 1; r < n; ++r) {
      out[r].resize(lengths[r]);
      if (lengths[r] > 0) recv(*comm_, out[r].data(), lengths[r], DataType::kUint8, r);
    }
  } else if (!mine.empty()) {
    send(*comm_, mine.data(), mine.size(), DataType::kUint8, 0);
  }
  return out;
}

std::vector<uint8_t> ProcessSet::broadcastFromRoot(std::vector<uint8_t> bytes) {
  uint64_t length = bytes.size();
  broadcast(*comm_, {&length, &length, 1, DataType::kUint64, 0});
  bytes.resize(length);
  broadcast(*comm_, {bytes.data(), bytes.data(), bytes.size(), DataType::kUint8, 0});
  return bytes;
}

}  // namespace ringfold::engine
