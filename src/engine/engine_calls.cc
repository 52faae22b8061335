// Engine, the caller's side (engine.h): enqueue and the checks of its arguments, cancel, join,
// barrier, process sets, shutdown, the timeline switches and the counters. The constructor and
// the background thread are in engine.cc.
#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/test_hook.h"
#include "engine/engine.h"

namespace ringfold::engine {

using Clock = std::chrono::steady_clock;

namespace {
constexpr const char* kProcessSetChange = "__ringfold.process_set_change";
}  // namespace

ProcessSet* Engine::findSet(int id) const {
  if (id < 0 || id >= static_cast<int>(sets_.size()) || !sets_[id]) return nullptr;
  return sets_[id].get();
}

int Engine::cudaDevice() {
  DeviceOps* ops = operations_.deviceOps();
  return ops == nullptr ? -1 : defaultCudaDevice(topology_.localRank, ops->deviceCount());
}

void Engine::checkDevice(const TensorArgs& a) {
  const std::string what = std::string(opTypeLowerName(a.op)) + " '" + a.name + "'";
  if (a.device < 0) RF_THROW(InvalidArgument, what, ": device ", a.device, " is neither the CPU (", kCpuDevice, ") nor a GPU index");
  if (a.op != OpType::kAllreduce && a.op != OpType::kBroadcast) {
    RF_THROW(InvalidArgument, what, " is on GPU ", a.device, ": GPU tensors are supported by allreduce and broadcast; copy it to the CPU for ",
             opTypeLowerName(a.op));
  }
  DeviceOps* ops = operations_.deviceOps();
  if (ops == nullptr) RF_THROW(InvalidArgument, what, " is on GPU ", a.device, ", but this ringfold build has no CUDA support");
  ops->check(a.device, what);
}

void Engine::checkSplitCount(int processSet, int64_t nsplits) const {
  int setSize = 0;
  try {
    setSize = processSet == 0 ? size_ : static_cast<int>(processSetRanks(processSet).size());
  } catch (const InvalidArgument&) {
    RF_THROW(InvalidArgument, "unknown process set ", processSet);
  }
  if (nsplits != setSize) {
    RF_THROW(InvalidArgument, "nsplits is ", nsplits, " but process set ", processSet, " has ", setSize,
             setSize == 1 ? " rank" : " ranks", ": pass one split per rank, or none (nsplits 0) for equal splits");
  }
}

void Engine::validate(const TensorArgs& a) {
  validateTensor(a);
  if (!carriesData(a.op)) return;
  if (a.op == OpType::kAlltoall && !a.splits.empty()) checkSplitCount(a.processSet, static_cast<int64_t>(a.splits.size()));
  if (a.device != kCpuDevice) checkDevice(a);
}

std::vector<TensorEntry> Engine::toEntries(std::vector<TensorArgs> args) const {
  std::vector<TensorEntry> entries;
  const std::string group = args.size() > 1 ? "group:" + args.front().name : "";
  for (TensorArgs& a : args) {
    TensorEntry e;
    e.request.op = a.op;
    e.request.name = std::move(a.name);
    e.request.dtype = a.dtype;
    e.request.reduceOp = a.reduceOp;
    e.request.root = a.root;
    e.request.device = a.device;
    e.request.preScale = a.preScale;
    e.request.postScale = a.postScale;
    e.request.shape = std::move(a.shape);
    e.request.splits = std::move(a.splits);
    e.request.group = group;
    e.request.groupSize = group.empty() ? 0 : static_cast<int32_t>(args.size());
    e.input = a.input;
    e.output = a.output;
    e.stream = a.stream;
    entries.push_back(std::move(e));
  }
  return entries;
}

std::vector<Handle> Engine::enqueueGroup(std::vector<TensorArgs> args) {
  std::vector<int> sets;
  for (size_t i = 0; i < args.size(); ++i) {
    try {
      validate(args[i]);
    } catch (const InvalidArgument& e) {
      RF_THROW(InvalidArgument, "tensor ", i, ": ", e.what());
    }
    sets.push_back(args[i].processSet);
  }
  return enqueueInternal(toEntries(std::move(args)), sets);
}

Handle Engine::enqueue(TensorArgs args) {
  validate(args);
  const std::vector<int> sets{args.processSet};
  std::vector<TensorArgs> one;
  one.push_back(std::move(args));
  return enqueueInternal(toEntries(std::move(one)), sets).front();
}

std::vector<Handle> Engine::enqueueInternal(std::vector<TensorEntry> entries, const std::vector<int>& sets) {
  std::vector<Handle> handles;
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) throw EngineStopped(failureCode_, failure_);
  if (shutdownRequested_ || !running_) {
    throw EngineStopped(StatusCode::kPreconditionError,
                        "ringfold has been shut down: no operation can be submitted after shutdown()");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const int id = sets[i];
    const std::string& name = entries[i].request.name;
    ProcessSet* set = findSet(id);
    if (!set) RF_THROW(InvalidArgument, opTypeLowerName(entries[i].request.op), " '", name, "': unknown process set ", id);
    if (!set->included()) {
      RF_THROW(InvalidArgument, opTypeLowerName(entries[i].request.op), " '", name, "': rank ", rank_,
               " is not in process set ", id, " (ranks ", rankList(set->ranks()), ")");
    }
    bool duplicate = inFlight_[id].count(name) > 0;
    for (size_t j = 0; j < i; ++j) duplicate = duplicate || (sets[j] == id && entries[j].request.name == name);
    if (duplicate) {
      RF_THROW(InvalidArgument, opTypeLowerName(entries[i].request.op), " '", name,
               "': a tensor with this name is already in flight", id ? " in process set " + std::to_string(id) : "",
               "; a name can be reused only after its previous operation has completed");
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry& e = entries[i];
    e.request.rank = sets_[sets[i]]->rank();
    e.handle = handles_.create();
    e.enqueued = now;
    handles.push_back(e.handle);
    inFlight_[sets[i]].insert(e.request.name);
    queue_.emplace_back(sets[i], std::move(e));
  }
  if (wakeSoon(now)) wake_.notify_all();  // the first tensor since the last drain (loop())
  return handles;
}

void Engine::cancel(Handle handle) {
  handles_.poll(handle);  // throws InvalidArgument for an unknown handle
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(handle);
  if (wakeSoon(Clock::now())) wake_.notify_all();
}

uint64_t Engine::joinsCompleted(int processSet) const {
  std::lock_guard<std::mutex> lock(mu_);
  return processSet >= 0 && processSet < static_cast<int>(joinsCompleted_.size()) ? joinsCompleted_[processSet] : 0;
}

namespace {
// The arguments of an operation without a tensor (join, barrier), under its reserved name.
TensorArgs tensorless(OpType op, const char* name, int processSet) {
  TensorArgs a;
  a.op = op;
  a.name = name;
  a.processSet = processSet;
  return a;
}
}  // namespace

Handle Engine::join(int processSet) { return enqueue(tensorless(OpType::kJoin, "__ringfold.join", processSet)); }

Handle Engine::barrier(int processSet) {
  return enqueue(tensorless(OpType::kBarrier, "__ringfold.barrier", processSet));
}

namespace {
// Waits for `handle`, releases it, and returns its result (throws its error).
Result waitFor(HandleTable& handles, Handle handle) {
  const Result* r = handles.wait(handle);
  Result out;
  out.status = r->status;
  out.processSetId = r->processSetId;
  handles.release(handle);
  if (!out.status.ok()) {
    if (out.status.code == StatusCode::kInvalidArgument || out.status.code == StatusCode::kPreconditionError) {
      RF_THROW(InvalidArgument, out.status.message);
    }
    RF_THROW(Error, out.status.message);
  }
  return out;
}
}  // namespace

int Engine::addProcessSet(std::vector<int> ranks) {
  if (!options_.dynamicProcessSets) {
    RF_THROW(InvalidArgument, "add_process_set: process sets can be added after init only in dynamic mode "
                              "(RINGFOLD_DYNAMIC_PROCESS_SETS=1, or init with dynamic process sets)");
  }
  std::sort(ranks.begin(), ranks.end());
  TensorArgs a;
  a.op = OpType::kAddProcessSet;
  a.name = kProcessSetChange;
  for (int r : ranks) a.shape.push_back(r);
  return waitFor(handles_, enqueue(std::move(a))).processSetId;
}

void Engine::removeProcessSet(int id) {
  if (!options_.dynamicProcessSets) {
    RF_THROW(InvalidArgument, "remove_process_set: process sets can be removed only in dynamic mode "
                              "(RINGFOLD_DYNAMIC_PROCESS_SETS=1, or init with dynamic process sets)");
  }
  TensorArgs a;
  a.op = OpType::kRemoveProcessSet;
  a.name = kProcessSetChange;
  a.root = id;
  waitFor(handles_, enqueue(std::move(a)));
}

std::vector<int> Engine::processSetIds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> ids;
  for (const auto& s : sets_) {
    if (s) ids.push_back(s->id());
  }
  return ids;
}

std::vector<int> Engine::processSetRanks(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  ProcessSet* set = findSet(id);
  if (!set) RF_THROW(InvalidArgument, "unknown process set ", id);
  return set->ranks();
}

int Engine::processSetRank(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  ProcessSet* set = findSet(id);
  if (!set) RF_THROW(InvalidArgument, "unknown process set ", id);
  return set->rank();
}

void Engine::shutdown() {
  testhook::stopAt("shutdown", rank_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdownRequested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    // On the engine's own thread the process is exiting under it: a library's signal handler
    // (libfabric's psm provider loads one that calls exit()) or an exit() in a callback runs
    // the static destructors here. Joining itself would throw and leave the thread joinable,
    // and its destructor would abort the process; it will not run again, so let it go.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  timeline_.stop();
}

void Engine::startTimeline(const std::string& path, bool markCycles) {
  if (rank_ == 0) timeline_.start(path, markCycles);
}

void Engine::stopTimeline() {
  if (rank_ == 0) timeline_.stop();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

TunableSettings Engine::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuned_;
}

}  // namespace ringfold::engine
