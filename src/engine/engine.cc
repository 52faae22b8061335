#include "engine/engine.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "collectives/collectives.h"
#include "collectives/topology.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/test_hook.h"
#include "rendezvous/bootstrap.h"

namespace ringfold::engine {

using Clock = std::chrono::steady_clock;

namespace {

// Maps what a collective threw to a status code.
StatusCode codeOf(const std::exception& e) {
  if (dynamic_cast<const IoError*>(&e)) return StatusCode::kAborted;
  if (dynamic_cast<const InvalidArgument*>(&e) || dynamic_cast<const MismatchError*>(&e)) {
    return StatusCode::kInvalidArgument;
  }
  return StatusCode::kUnknownError;
}

// This rank's engine stops with `message`: tell every peer now, through each communicator that
// has not failed already (a failed one carries its own reason), instead of leaving them to wait
// RINGFOLD_TIMEOUT for a rank that no longer negotiates.
void abortPeers(std::vector<std::unique_ptr<ProcessSet>>& sets, int rank, const std::string& message) {
  for (auto& set : sets) {
    if (set && set->included()) {
      set->comm().abort(transport::ErrorKind::kIo, detail::concat("ringfold stopped on rank ", rank, ": ", message));
    }
  }
}

}  // namespace

EngineOptions EngineOptions::fromParams() {
  EngineOptions o;
  o.fusionThresholdBytes = params::kFusionThreshold.asBytes();
  o.fusionTensorMaxBytes = params::kFusionTensorMaxBytes.asBytes();
  o.cycleTimeMs = params::kCycleTime.asDouble();
  if (!(o.cycleTimeMs >= 0 && o.cycleTimeMs <= 60000)) {
    RF_THROW(InvalidArgument, params::kCycleTime.name, "=", o.cycleTimeMs, " must be between 0 and 60000 ms");
  }
  o.wakeDelayUs = params::kWakeDelay.asDouble();
  if (!(o.wakeDelayUs == -1 || (o.wakeDelayUs >= 0 && o.wakeDelayUs <= 60e6))) {
    RF_THROW(InvalidArgument, params::kWakeDelay.name, "=", o.wakeDelayUs, " must be -1 (off) or between 0 and 60000000 us");
  }
  const int64_t capacity = params::kCacheCapacity.asInt();
  if (capacity < 0 || capacity > (1 << 20)) {
    RF_THROW(InvalidArgument, params::kCacheCapacity.name, "=", capacity, " must be between 0 and 1048576");
  }
  o.cacheCapacity = static_cast<size_t>(capacity);
  o.disableGroupFusion = params::kDisableGroupFusion.asBool();
  o.dynamicProcessSets = params::kDynamicProcessSets.asBool();
  o.stallWarning = params::kStallCheckDisable.asBool() ? std::chrono::milliseconds(0)
                                                        : params::kStallCheckTime.asSeconds();
  o.stallShutdown = params::kStallShutdownTime.asSeconds();
  o.timelinePath = params::kTimeline.str();
  o.timelineMarkCycles = params::kTimelineMarkCycles.asBool();
  o.autotune = params::kAutotune.asBool();
  if (o.autotune) o.autotuneOptions = autotuneOptionsFromParams();
  return o;
}

namespace {
HostLayout withIdentity(HostLayout hosts, const Communicator& comm) {
  hosts.rank = comm.rank();
  hosts.size = comm.size();
  return hosts;
}
}  // namespace

Engine::Engine(std::unique_ptr<Communicator> world, EngineOptions options, HostLayout hosts)
    : rank_(world->rank()),
      size_(world->size()),
      topology_(withIdentity(std::move(hosts), *world)),
      options_(std::move(options)),
      operations_(&timeline_, topology_.localRank),
      tuned_{options_.fusionThresholdBytes, options_.cycleTimeMs} {
  std::vector<int> everyone(size_);
  for (int r = 0; r < size_; ++r) everyone[r] = r;
  Communicator& global = *world;
  sets_.push_back(std::make_unique<ProcessSet>(0, everyone, std::move(world), size_, options_.cacheCapacity));
  inFlight_.emplace_back();
  joinsCompleted_.push_back(0);

  // Static process sets: every rank must pass the same ones. Agree on a digest first, so that a
  // mismatch is the same clear error on every rank instead of a split that never connects.
  std::ostringstream text;
  for (auto& ranks : options_.processSets) {
    std::sort(ranks.begin(), ranks.end());
    text << rankList(ranks) << ';';
  }
  uint64_t digest = std::hash<std::string>{}(text.str());
  std::vector<uint64_t> digests(size_);
  allgather(global, {&digest, digests.data(), 1, DataType::kUint64});
  for (int r = 0; r < size_; ++r) {
    if (digests[r] != digests[0]) {
      RF_THROW(InvalidArgument, "the process sets passed to init differ between ranks (rank ", r,
               " disagrees with rank 0); every rank must pass the same sets");
    }
  }
  for (const auto& ranks : options_.processSets) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size_ || (i && ranks[i] == ranks[i - 1])) {
        RF_THROW(InvalidArgument, "process set [", rankList(ranks), "]: rank ", ranks[i],
                 ranks[i] < 0 || ranks[i] >= size_ ? " is out of range" : " appears twice");
      }
    }
    if (ranks.empty()) RF_THROW(InvalidArgument, "a process set needs at least one rank");
    createSet(ranks);
  }

  if (rank_ == 0 && !options_.timelinePath.empty() && options_.timelinePath != "DYNAMIC") {
    timeline_.start(options_.timelinePath, options_.timelineMarkCycles);
  }
  if (rank_ == 0 && options_.autotune) {
    autotuner_ = std::make_unique<Autotuner>(tuned_, options_.autotuneOptions);
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    RF_LOG(kWarning) << "engine shutdown: " << e.what();
  }
}

std::unique_ptr<Engine> Engine::fromEnvironment(std::vector<std::vector<int>> processSets,
                                                std::optional<bool> dynamicProcessSets, int incarnation) {
  EngineOptions options = EngineOptions::fromParams();
  options.processSets = std::move(processSets);
  if (dynamicProcessSets) options.dynamicProcessSets = *dynamicProcessSets;
  const rendezvous::BootstrapInfo info = rendezvous::bootstrapFromEnvironment();
  auto world = Communicator::fromEnvironment(incarnation);
  // Hosts as the launcher laid them out; without that (uneven placement), by host name.
  HostLayout hosts = describeHosts(*world, hostIdFromLaunch(info));
  return std::make_unique<Engine>(std::move(world), std::move(options), std::move(hosts));
}

// ---- the background thread ------------------------------------------------------------------

void Engine::loop() {
  auto last = std::chrono::steady_clock::now();
  auto next = last;  // when the next regular cycle is due
  while (true) {
    const auto start = std::chrono::steady_clock::now();
    if (start >= next) {  // a regular cycle: the next one is due a cycle time from now
      std::lock_guard<std::mutex> lock(mu_);
      next = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double, std::milli>(tuned_.cycleTimeMs));
    }
    bool go = false;
    try {
      go = cycle();
    } catch (const std::exception& e) {
      failAll(codeOf(e), e.what());
      abortPeers(sets_, rank_, e.what());
      break;
    }
    if (autotuner_) {
      const uint64_t bytes = operations_.bytesMoved() - tunedBytes_;
      if (bytes > 0) {
        tunedBytes_ = operations_.bytesMoved();
        const double seconds = std::chrono::duration<double>(start - last).count();
        if (autotuner_->record(bytes, seconds)) tunePending_ = true;
      }
    }
    last = start;
    if (!go) break;
    if (ranWork_) continue;  // a follow-up cycle at once, off the regular schedule
    // Wait for the regular cycle, or less when a tensor was enqueued (wakeAt_, set by enqueue)
    // or this rank still has tensors waiting for other ranks: a rank that enqueued later than
    // this one starts its cycle early, and would otherwise wait in it for this rank's tick.
    // (Cycles are collective, so this never cycles faster than the slowest rank does.)
    std::unique_lock<std::mutex> lock(mu_);
    if (std::any_of(inFlight_.begin(), inFlight_.end(), [](const auto& names) { return !names.empty(); })) {
      wakeSoon(Clock::now());
    }
    while (!shutdownRequested_) {
      const auto until = std::min(next, wakeAt_);
      if (Clock::now() >= until) break;
      wake_.wait_until(lock, until);
    }
  }
  running_ = false;
}

bool Engine::wakeSoon(Clock::time_point now) {
  if (options_.wakeDelayUs < 0 || wakeAt_ != Clock::time_point::max()) return false;
  wakeAt_ = now + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::micro>(options_.wakeDelayUs));
  return true;
}

bool Engine::cycle() {
  if (timeline_.active() && timeline_.markCycles()) timeline_.cycleStart();
  std::vector<std::pair<int, TensorEntry>> drained;
  std::vector<Handle> cancels;
  bool wantShutdown;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained.swap(queue_);
    wakeAt_ = Clock::time_point::max();  // the next enqueue wakes the thread again
    cancels.swap(cancels_);
    wantShutdown = shutdownRequested_;
  }
  for (auto& [id, entry] : drained) {
    ProcessSet* set = findSet(id);
    if (!set) {
      completeError(id, entry, StatusCode::kPreconditionError,
                    detail::concat("process set ", id, " was removed before '", entry.request.name, "' ran"));
      continue;
    }
    const std::string name = entry.request.name;
    if (!set->add(std::move(entry))) {
      completeError(id, entry, StatusCode::kPreconditionError, *set->takeFailure(name));
    }
  }

  for (Handle h : cancels) {
    for (auto& set : sets_) {
      if (!set || !set->included()) continue;
      bool found = false;
      if (auto e = set->cancel(h, &found)) completeError(set->id(), *e, StatusCode::kAborted, "cancelled");
      if (found) break;  // cancelled now, or a withdrawal goes with this cycle's negotiation
    }
  }

  NegotiationSettings ns{options_.stallWarning, options_.stallShutdown, rank_ == 0 ? &timeline_ : nullptr};
  ProcessSet& global = *sets_[0];
  CycleResult g = global.negotiate(wantShutdown, tunePending_, ns);
  if (g.tuned) {
    // Rank 0's tuner changed the settings: everyone adopts them now, before planning batches.
    TunableSettings t = autotuner_ ? autotuner_->current() : tuned_;
    broadcast(global.comm(), {&t, &t, sizeof t, DataType::kUint8, 0});
    tunePending_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    tuned_ = t;
  }
  auto count = [&](const CycleResult& c) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.cacheHits += c.cacheHits;
    stats_.coordinatorRounds += c.coordinated ? 1 : 0;
  };
  count(g);
  ranWork_ = !g.responses.empty();
  runSet(global, std::move(g.responses));
  for (size_t id = 1; id < sets_.size(); ++id) {
    ProcessSet* set = sets_[id].get();
    if (!set || !set->included()) continue;
    CycleResult c = set->negotiate(false, false, ns);
    count(c);
    ranWork_ = ranWork_ || !c.responses.empty();
    runSet(*set, std::move(c.responses));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cycles;
  }
  if (g.shutdown) {
    failAll(StatusCode::kPreconditionError,
            "ringfold was shut down (shutdown() was called on at least one rank) before this operation ran");
    return false;
  }
  return true;
}

void Engine::complete(int set, TensorEntry& entry, Result result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (set < static_cast<int>(inFlight_.size())) inFlight_[set].erase(entry.request.name);
  }
  handles_.complete(entry.handle, std::move(result));
}

void Engine::completeError(int set, TensorEntry& entry, StatusCode code, const std::string& message) {
  Result r;
  r.status = {code, message};
  complete(set, entry, std::move(r));
}

void Engine::runSet(ProcessSet& set, std::vector<Response> responses) {
  std::vector<Response> work;
  for (Response& r : responses) {
    if (r.error) {
      if (auto e = set.take(r.name)) {
        completeError(set.id(), *e, StatusCode::kPreconditionError, r.errorMessage);
      } else {
        // This rank has not submitted it (a stall shutdown, typically: this rank stopped
        // submitting). Say so now, in bounded time, and fail its submission when it comes. (A
        // joined rank will not submit it: the error was about the others.)
        if (set.recordFailure(r)) {
          RF_LOG(kError) << r.errorMessage << " [this rank has not submitted '" << r.name
                         << "'; when it does, that call fails with this error]";
        }
      }
      continue;
    }
    switch (r.op) {
      case OpType::kJoin: {
        // Every rank of the set is in step again: errors remembered for tensors a rank never
        // submitted are stale, and unnamed operations count from 0 again (joinsCompleted()).
        set.forgetFailures();
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++joinsCompleted_[set.id()];
        }
        if (auto e = set.take(r.name)) {
          Result res;
          res.lastJoinedRank = r.lastJoinedRank;
          complete(set.id(), *e, std::move(res));
        }
        break;
      }
      case OpType::kCancel:  // the coordinator withdrew a rank's request: that rank's cancel won
        if (r.root == set.rank()) {
          if (auto e = set.take(r.name)) completeError(set.id(), *e, StatusCode::kAborted, "cancelled");
        }
        break;
      case OpType::kAddProcessSet:
      case OpType::kRemoveProcessSet:
        applyControl(r, set);
        break;
      default:
        work.push_back(std::move(r));
    }
  }
  uint64_t threshold;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threshold = tuned_.fusionThresholdBytes;
  }
  for (const Batch& batch : planBatches(work, threshold, options_.disableGroupFusion, options_.fusionTensorMaxBytes)) {
    std::vector<std::optional<TensorEntry>> entries;
    for (size_t i : batch.members) entries.push_back(set.take(work[i].name));
    std::vector<Result> results;
    try {
      testhook::stopAt("first", rank_);
      results = operations_.run(set, work, batch, entries);
    } catch (const std::exception& e) {
      for (auto& entry : entries) {
        if (entry) completeError(set.id(), *entry, codeOf(e), e.what());
      }
      throw;  // the communicator is poisoned: the engine stops with this error
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.batches;
      for (const auto& entry : entries) stats_.tensorsRun += entry ? 1 : 0;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i]) complete(set.id(), *entries[i], std::move(results[i]));
    }
  }
}

int Engine::createSet(const std::vector<int>& ranks) {
  const int id = static_cast<int>(sets_.size());
  const bool member = std::binary_search(ranks.begin(), ranks.end(), rank_);
  // Collective over the members only; every rank registers the set, so ids agree everywhere.
  auto comm = member ? sets_[0]->comm().split(ranks, "ps" + std::to_string(id)) : nullptr;
  auto set = std::make_unique<ProcessSet>(id, ranks, std::move(comm), size_, options_.cacheCapacity);
  std::lock_guard<std::mutex> lock(mu_);
  sets_.push_back(std::move(set));
  inFlight_.emplace_back();
  joinsCompleted_.push_back(0);
  return id;
}

void Engine::applyControl(const Response& r, ProcessSet& global) {
  std::optional<TensorEntry> entry = global.take(r.name);
  Result res;
  if (r.op == OpType::kAddProcessSet) {
    res.processSetId = createSet(std::vector<int>(r.shape.begin(), r.shape.end()));
  } else {
    const int id = r.root;
    ProcessSet* set = findSet(id);
    if (id == 0 || !set) {
      res.status = {StatusCode::kInvalidArgument,
                    id == 0 ? "remove_process_set: the global process set (id 0) cannot be removed"
                            : "remove_process_set: unknown process set " + std::to_string(id)};
    } else {
      for (TensorEntry& e : set->takeAll()) {
        completeError(id, e, StatusCode::kPreconditionError,
                      detail::concat("process set ", id, " was removed before '", e.request.name, "' ran"));
      }
      // The set's rank 0 deletes its store keys (split()'s "<prefix>/split/ps<id>/"): every rank
      // asked for this removal after its createSet() had finished connecting, and ids are never
      // reused, so nobody reads or writes them again. Best effort: they are garbage either way.
      if (set->included() && set->rank() == 0) {
        try {
          set->comm().deleteStoreKeys();
        } catch (const std::exception& ex) {
          RF_LOG(kWarning) << "process set " << id << ": could not delete its store keys: " << ex.what();
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      sets_[id].reset();
    }
  }
  if (entry) complete(0, *entry, std::move(res));
}

void Engine::failAll(StatusCode code, const std::string& message) {
  std::vector<std::pair<int, TensorEntry>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) {
      failure_ = message;
      failureCode_ = code;
    }
    queued.swap(queue_);
  }
  for (auto& [id, e] : queued) completeError(id, e, code, message);
  for (auto& set : sets_) {
    if (!set) continue;
    for (TensorEntry& e : set->takeAll()) completeError(set->id(), e, code, message);
  }
}

}  // namespace ringfold::engine
