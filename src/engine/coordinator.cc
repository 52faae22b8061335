#include "engine/coordinator.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"

namespace ringfold::engine {

namespace {

// "rank 0: float32; ranks 1, 3: float16" for the distinct values of `valueOf` over the ranks
// that submitted.
template <typename F>
std::string byValue(const std::vector<std::optional<Request>>& byRank, F valueOf) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (size_t r = 0; r < byRank.size(); ++r) {
    if (!byRank[r]) continue;
    std::string v = valueOf(*byRank[r]);
    if (!groups.count(v)) order.push_back(v);
    groups[v].push_back(static_cast<int>(r));
  }
  std::ostringstream out;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& ranks = groups[order[i]];
    out << (i ? "; " : "") << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t j = 0; j < ranks.size(); ++j) out << (j ? ", " : "") << ranks[j];
    out << ": " << order[i];
  }
  return out.str();
}

template <typename F>
bool allEqual(const std::vector<std::optional<Request>>& byRank, F valueOf) {
  const Request* first = nullptr;
  for (const auto& r : byRank) {
    if (!r) continue;
    if (!first) {
      first = &*r;
    } else if (!(valueOf(*r) == valueOf(*first))) {
      return false;
    }
  }
  return true;
}

std::string scalesOf(const Request& r) {
  std::ostringstream out;
  out << "prescale " << r.preScale << ", postscale " << r.postScale;
  return out.str();
}

std::vector<int64_t> tail(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

// "5 s", "2.5 s", "600 s": a limit as its user wrote it.
std::string secondsText(std::chrono::milliseconds d) {
  std::ostringstream os;
  os << d.count() / 1000.0 << " s";
  return os.str();
}

}  // namespace

Coordinator::Coordinator(int size, int worldSize, bool gpuSupported)
    : size_(size), worldSize_(worldSize), gpuSupported_(gpuSupported), joined_(size, false) {}

bool Coordinator::add(const Request& request, Clock::time_point now) {
  RF_ENFORCE(request.rank >= 0 && request.rank < size_, "request from rank ", request.rank,
             " of a set of ", size_);
  auto [it, inserted] = entries_.try_emplace(request.name);
  Entry& entry = it->second;
  if (inserted) {
    entry.byRank.resize(size_);
    entry.firstSeen = now;
    order_.push_back(request.name);
  }
  RF_ENFORCE(!entry.byRank[request.rank], "rank ", request.rank, " submitted '", request.name, "' twice");
  entry.byRank[request.rank] = request;
  ++entry.submitted;
  if (request.op == OpType::kJoin && !joined_[request.rank]) {
    joined_[request.rank] = true;
    joinOrder_.push_back(request.rank);
  }
  return inserted;
}

bool Coordinator::withdraw(int rank, const std::string& name) {
  RF_ENFORCE(rank >= 0 && rank < size_, "cancel from rank ", rank, " of a set of ", size_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.byRank[rank]) return false;
  Entry& entry = it->second;
  const OpType op = entry.byRank[rank]->op;
  entry.byRank[rank].reset();
  if (--entry.submitted == 0) {
    entries_.erase(it);
    order_.erase(std::find(order_.begin(), order_.end(), name));
  }
  if (op == OpType::kJoin && joined_[rank]) {
    joined_[rank] = false;
    std::erase(joinOrder_, rank);
  }
  Response res;
  res.op = OpType::kCancel;
  res.name = name;
  res.root = rank;
  withdrawn_.push_back(std::move(res));
  return true;
}

bool Coordinator::ready(const Entry& entry) const {
  for (int r = 0; r < size_; ++r) {
    if (entry.byRank[r]) continue;
    if (!joined_[r]) return false;
  }
  return true;
}

std::vector<int> Coordinator::missing(const Entry& entry) const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (!entry.byRank[r] && !joined_[r]) out.push_back(r);
  }
  return out;
}

const Request& Coordinator::anyRequest(const Entry& entry) {
  for (const auto& r : entry.byRank) {
    if (r) return *r;
  }
  RF_THROW(Error, "coordinator entry without requests");
}

std::vector<Response> Coordinator::takeReady() {
  // Readiness of every waiting name, then whole groups only.
  std::map<std::string, int> groupReady;
  std::vector<bool> isReady(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) {
    const Entry& entry = entries_.at(order_[i]);
    isReady[i] = ready(entry);
    const Request& any = anyRequest(entry);
    if (isReady[i] && !any.group.empty()) ++groupReady[any.group];
  }
  std::vector<Response> out = std::move(withdrawn_);
  withdrawn_.clear();
  std::vector<std::string> remaining;
  for (size_t i = 0; i < order_.size(); ++i) {
    const std::string& name = order_[i];
    const Entry& entry = entries_.at(name);
    const Request* any = &anyRequest(entry);
    bool release = isReady[i];
    if (release && !any->group.empty() && groupReady[any->group] < any->groupSize) release = false;
    if (!release) {
      remaining.push_back(name);
      continue;
    }
    out.push_back(build(name, entry));
    entries_.erase(name);
  }
  order_ = std::move(remaining);
  // A completed join resets the joined state for the next round of uneven data.
  for (const Response& r : out) {
    if (r.op == OpType::kJoin && !r.error) {
      std::fill(joined_.begin(), joined_.end(), false);
      joinOrder_.clear();
    }
  }
  return out;
}

Response Coordinator::build(const std::string& name, const Entry& entry) const {
  const auto& byRank = entry.byRank;
  const Request* first = nullptr;
  std::vector<int> joinedAbsent;
  for (int r = 0; r < size_; ++r) {
    if (byRank[r] && !first) first = &*byRank[r];
    if (!byRank[r]) joinedAbsent.push_back(r);
  }
  Response res;
  res.name = name;
  res.op = first->op;
  res.dtype = first->dtype;
  res.reduceOp = first->reduceOp;
  res.root = first->root;
  res.device = first->device;
  res.preScale = first->preScale;
  res.postScale = first->postScale;
  res.shape = first->shape;
  res.elements = first->elements();
  res.group = first->group;
  auto fail = [&](const std::string& message) {
    res.error = true;
    res.errorMessage = message;
    return res;
  };
  const std::string what = std::string(opTypeLowerName(first->op)) + " '" + name + "'";

  if (!allEqual(byRank, [](const Request& r) { return r.op; })) {
    return fail("Mismatched operations for tensor '" + name + "': " +
                byValue(byRank, [](const Request& r) { return std::string(opTypeLowerName(r.op)); }));
  }
  if (!joinedAbsent.empty() && first->op != OpType::kAllreduce && first->op != OpType::kJoin) {
    return fail(what + " was submitted while ranks " + rankList(joinedAbsent) +
                " had joined; only allreduce may run while ranks are joined (they contribute zeros)");
  }
  if (!allEqual(byRank, [](const Request& r) { return r.dtype; })) {
    return fail("Mismatched data types for " + what + ": " +
                byValue(byRank, [](const Request& r) { return std::string(dataTypeName(r.dtype)); }));
  }
  // CPU against GPU must agree; the GPU index may differ (each rank drives its own GPU).
  if (!allEqual(byRank, [](const Request& r) { return r.device == kCpuDevice; })) {
    return fail("Mismatched devices for " + what + ": " + byValue(byRank, [](const Request& r) {
                  return r.device == kCpuDevice ? std::string("CPU") : "GPU " + std::to_string(r.device);
                }));
  }
  if (first->device != kCpuDevice && !gpuSupported_ && first->op != OpType::kBarrier &&
      first->op != OpType::kJoin) {
    return fail(what + " is on GPU " + std::to_string(first->device) +
                ", but this ringfold build has no CUDA support");
  }
  if (reduces(first->op)) {
    if (first->dtype == DataType::kBool) return fail(what + ": bool tensors cannot be reduced");
    if (!allEqual(byRank, [](const Request& r) { return r.reduceOp; })) {
      return fail("Mismatched reduce ops for " + what + ": " +
                  byValue(byRank, [](const Request& r) { return std::string(reduceOpName(r.reduceOp)); }));
    }
    if (!allEqual(byRank, [](const Request& r) { return std::make_pair(r.preScale, r.postScale); })) {
      return fail("Mismatched scale factors for " + what + ": " + byValue(byRank, scalesOf));
    }
  }
  auto shapeOf = [](const Request& r) { return shapeString(r.shape); };
  switch (first->op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kReduce:
    case OpType::kReducescatter:
      if (!allEqual(byRank, [](const Request& r) { return r.shape; })) {
        return fail("Mismatched " + std::string(opTypeLowerName(first->op)) + " tensor shapes for '" +
                    name + "': " + byValue(byRank, shapeOf));
      }
      if (rooted(first->op)) {
        const std::string op = opTypeLowerName(first->op);
        if (!allEqual(byRank, [](const Request& r) { return r.root; })) {
          return fail("Mismatched " + op + " root ranks for '" + name + "': " +
                      byValue(byRank, [](const Request& r) { return std::to_string(r.root); }));
        }
        if (first->root < 0 || first->root >= size_) {
          return fail(op + " '" + name + "': root rank " + std::to_string(first->root) +
                      " is not in the process set of " + std::to_string(size_) + " ranks");
        }
      }
      if (first->op == OpType::kReducescatter && first->shape.empty()) {
        return fail("reducescatter '" + name + "' needs a tensor with at least one dimension");
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
      if (!allEqual(byRank, [](const Request& r) { return std::make_pair(r.shape.size(), tail(r.shape)); }) ||
          first->shape.empty()) {
        return fail("Mismatched " + std::string(opTypeLowerName(first->op)) + " tensor shapes for '" + name +
                    "' (every dimension but the first must agree, and there must be at least one): " +
                    byValue(byRank, shapeOf));
      }
      // Each rank's first dimension: allgather's output, and what alltoall moves in all
      // (operations.h sizes its out-of-memory check by it).
      for (const auto& r : byRank) res.firstDims.push_back(r->shape[0]);
      if (first->op == OpType::kAlltoall) {
        for (int r = 0; r < size_; ++r) {
          const Request& q = *byRank[r];
          std::string problem;
          if (q.splits.empty()) {
            if (q.shape[0] % size_ != 0) {
              problem = "first dimension " + std::to_string(q.shape[0]) + " is not divisible by " +
                        std::to_string(size_) + " ranks and no splits were given";
            }
          } else if (static_cast<int>(q.splits.size()) != size_) {
            problem = std::to_string(q.splits.size()) + " splits for " + std::to_string(size_) + " ranks";
          } else {
            int64_t sum = 0;
            for (int64_t s : q.splits) {  // requests arrive from the wire: no overflowing sums
              if (s < 0) problem = "a negative split";
              else if (__builtin_add_overflow(sum, s, &sum)) problem = "splits whose sum does not fit in 64 bits";
              if (!problem.empty()) break;
            }
            if (problem.empty() && sum != q.shape[0]) {
              problem = "splits add up to " + std::to_string(sum) + " but the first dimension is " +
                        std::to_string(q.shape[0]);
            }
          }
          if (!problem.empty()) return fail("alltoall '" + name + "' on rank " + std::to_string(r) + ": " + problem);
        }
      }
      break;
    case OpType::kJoin:
      res.lastJoinedRank = joinOrder_.empty() ? -1 : joinOrder_.back();
      break;
    case OpType::kAddProcessSet: {
      if (!allEqual(byRank, [](const Request& r) { return r.shape; })) {
        return fail("add_process_set: ranks disagree on the new set's members: " + byValue(byRank, shapeOf));
      }
      std::set<int64_t> seen;
      for (int64_t r : first->shape) {
        if (r < 0 || r >= worldSize_ || !seen.insert(r).second) {
          return fail("add_process_set " + shapeString(first->shape) + ": rank " + std::to_string(r) +
                      (r < 0 || r >= worldSize_ ? " is out of range [0, " + std::to_string(worldSize_) + ")"
                                                : " appears twice"));
        }
      }
      if (first->shape.empty()) return fail("add_process_set: a process set needs at least one rank");
      break;
    }
    case OpType::kRemoveProcessSet:
      if (!allEqual(byRank, [](const Request& r) { return r.root; })) {
        return fail("remove_process_set: ranks disagree on the set to remove: " +
                    byValue(byRank, [](const Request& r) { return std::to_string(r.root); }));
      }
      break;
    case OpType::kBarrier:
      break;
    case OpType::kCancel:  // withdrawals never become entries (withdraw())
      return fail("'" + name + "': a cancel is not an operation");
  }
  return res;
}

std::vector<Coordinator::Stall> Coordinator::stalled(Clock::time_point now,
                                                     std::chrono::milliseconds olderThan) const {
  std::vector<Stall> out;
  for (const std::string& name : order_) {
    const Entry& entry = entries_.at(name);
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - entry.firstSeen);
    if (waited < olderThan) continue;
    // A join waits, by design, for ranks that still have data: never a stall (nor in Horovod).
    if (anyRequest(entry).op == OpType::kJoin) continue;
    std::vector<int> miss = missing(entry);
    if (miss.empty()) continue;  // waiting for its group, not for ranks
    out.push_back({name, anyRequest(entry).op, std::move(miss), waited});
  }
  return out;
}

std::vector<Response> Coordinator::failStalled(Clock::time_point now, std::chrono::milliseconds olderThan) {
  std::vector<Response> out;
  for (const Stall& s : stalled(now, olderThan)) {
    Response res;
    res.op = s.op;
    res.name = s.name;
    res.error = true;
    res.errorMessage = std::string(opTypeLowerName(s.op)) + " '" + s.name + "' stalled: " +
                       (s.missingRanks.size() == 1 ? "rank " : "ranks ") + rankList(s.missingRanks) +
                       " never submitted it within RINGFOLD_STALL_SHUTDOWN_TIME (" +
                       secondsText(olderThan) + ")";
    out.push_back(std::move(res));
    entries_.erase(s.name);
    order_.erase(std::find(order_.begin(), order_.end(), s.name));
  }
  return out;
}

std::string Coordinator::describeStalls(const std::vector<Stall>& stalls) {
  std::map<int, std::vector<std::string>> byRank;
  double longest = 0;
  for (const Stall& s : stalls) {
    for (int r : s.missingRanks) byRank[r].push_back(s.name);
    longest = std::max(longest, s.waited.count() / 1000.0);
  }
  std::ostringstream out;
  out.precision(longest < 10 ? 1 : 0);
  out << std::fixed << "One or more tensors were submitted to be reduced, gathered or broadcasted by a subset of "
         "ranks and have been waiting for the remaining ranks for "
      << longest
      << " s. This may mean that ranks submit different tensors, or that only some ranks submit "
         "them, which would deadlock.\nMissing ranks:";
  for (const auto& [rank, names] : byRank) {
    out << "\n" << rank << ": [";
    for (size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << names[i];
    out << "]";
  }
  return out.str();
}

}  // namespace ringfold::engine
