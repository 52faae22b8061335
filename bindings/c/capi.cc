// Internals of the C ABI: errors, the library's state, argument conversion, handles (capi.h).
#include "bindings/c/capi.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "common/dtype.h"
#include "common/params.h"
#include "rendezvous/bootstrap.h"

namespace ringfold {
namespace capi {

using detail::concat;
using engine::StatusCode;

static_assert(RINGFOLD_OK == static_cast<int>(StatusCode::kOk));
static_assert(RINGFOLD_UNKNOWN_ERROR == static_cast<int>(StatusCode::kUnknownError));
static_assert(RINGFOLD_PRECONDITION_ERROR == static_cast<int>(StatusCode::kPreconditionError));
static_assert(RINGFOLD_ABORTED == static_cast<int>(StatusCode::kAborted));
static_assert(RINGFOLD_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(RINGFOLD_IN_PROGRESS == static_cast<int>(StatusCode::kInProgress));
static_assert(RINGFOLD_INT8 == static_cast<int>(DataType::kInt8));
static_assert(RINGFOLD_UINT8 == static_cast<int>(DataType::kUint8));
static_assert(RINGFOLD_INT32 == static_cast<int>(DataType::kInt32));
static_assert(RINGFOLD_UINT32 == static_cast<int>(DataType::kUint32));
static_assert(RINGFOLD_INT64 == static_cast<int>(DataType::kInt64));
static_assert(RINGFOLD_UINT64 == static_cast<int>(DataType::kUint64));
static_assert(RINGFOLD_FLOAT16 == static_cast<int>(DataType::kFloat16));
static_assert(RINGFOLD_FLOAT32 == static_cast<int>(DataType::kFloat32));
static_assert(RINGFOLD_FLOAT64 == static_cast<int>(DataType::kFloat64));
static_assert(RINGFOLD_BFLOAT16 == static_cast<int>(DataType::kBfloat16));
static_assert(RINGFOLD_BOOL == static_cast<int>(DataType::kBool));
static_assert(RINGFOLD_FLOAT8_E4M3 == static_cast<int>(DataType::kFloat8e4m3));
static_assert(RINGFOLD_FLOAT8_E5M2 == static_cast<int>(DataType::kFloat8e5m2));
static_assert(RINGFOLD_FLOAT8_E5M2 + 1 == kNumDataTypes);
static_assert(RINGFOLD_CPU_DEVICE == engine::kCpuDevice);

namespace {

constexpr int kMaxDims = 64;
constexpr int kHandleBits = 40;  // engine handle in the low bits, generation above
constexpr int64_t kHandleMask = (int64_t{1} << kHandleBits) - 1;

thread_local std::string tError;
thread_local const char* tErrorFallback = nullptr;  // set when the message could not be stored

// ---- the library's state ----------------------------------------------------------------------

class Library {
 public:
  ~Library() {
    // A process that exits initialized: shut down as Horovod's static destructor does. Never in
    // a forked child (the engine's thread exists only in the parent).
    std::shared_ptr<Engine> engine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pid_ == getpid()) engine = std::move(engine_);
      abandonLocked();
    }
    if (engine) {
      try {
        engine->shutdown();
      } catch (...) {
      }
    }
  }

  std::mutex& lifecycle() { return lifecycle_; }

  Session current() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!engine_ || pid_ != getpid()) return {};
    return {engine_, generation_, dynamic_};
  }

  Session require() {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_ && pid_ != getpid()) {
      precondition(concat("ringfold was initialized in process ", pid_,
                          "; this process is a fork() of it and must call horovod_init itself"));
    }
    if (!engine_) precondition("ringfold is not initialized (call horovod_init or ringfold_init first)");
    return {engine_, generation_, dynamic_};
  }

  // The number the next init will have (0 for the first): every rank of a job counts its inits
  // alike, so it names the incarnation in the store (Engine::fromEnvironment) unless
  // RINGFOLD_INCARNATION does (incarnationOfNextInit).
  int64_t nextGeneration() {
    std::lock_guard<std::mutex> lock(mu_);
    return generation_ + 1;
  }

  void publish(std::shared_ptr<Engine> engine, bool dynamic) {
    std::lock_guard<std::mutex> lock(mu_);
    abandonLocked();
    engine_ = std::move(engine);
    ++generation_;
    pid_ = getpid();
    dynamic_ = dynamic;
    unnamed_.clear();
  }

  // Takes the engine out (null when there is none in this process).
  std::shared_ptr<Engine> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ != getpid()) {
      abandonLocked();
      return nullptr;
    }
    return std::move(engine_);
  }

  std::string autoName(OpType op, int processSet) {
    std::lock_guard<std::mutex> lock(mu_);
    // A completed join puts every rank of the set in step again, although the ranks made
    // different numbers of calls before it: the count restarts there on every rank alike.
    const uint64_t epoch = engine_ ? engine_->joinsCompleted(processSet) : 0;
    Unnamed& u = unnamed_[{static_cast<int>(op), processSet}];
    if (u.epoch != epoch) u = {epoch, 0};
    return concat(engine::opTypeLowerName(op), ".noname.", u.next++);
  }

 private:
  // A forked child's copy of the parent's engine: never destroyed (that would join a thread
  // that does not exist here), but kept reachable.
  void abandonLocked() {
    if (engine_ && pid_ != getpid()) {
      static auto* abandoned = new std::vector<std::shared_ptr<Engine>>();
      abandoned->push_back(std::move(engine_));
    }
    engine_.reset();
  }

  std::mutex lifecycle_;  // serializes init and shutdown
  std::mutex mu_;         // guards what follows
  std::shared_ptr<Engine> engine_;
  int64_t generation_ = -1;  // the first init is generation 0: its handles are 1, 2, 3, ...
  pid_t pid_ = 0;
  bool dynamic_ = false;
  struct Unnamed {
    uint64_t epoch = 0;  // Engine::joinsCompleted() of the set when `next` was counted
    uint64_t next = 0;
  };
  std::map<std::pair<int, int>, Unnamed> unnamed_;
};

Library gLibrary;

// The store incarnation the next init meets under: RINGFOLD_INCARNATION when set (elastic
// training numbers memberships for every process alike, whichever init of the process it is),
// else this process's count of its inits.
int incarnationOfNextInit() {
  if (auto v = params::kIncarnation.lookup()) {
    const int64_t n = params::parseInt(v->first, v->second);
    if (n < 1 || n > INT32_MAX) {
      invalid(concat(v->second, "='", v->first,
                     "' is not an incarnation: it must be a positive integer (1 for a job's first membership)"));
    }
    return static_cast<int>(n);
  }
  return static_cast<int>(gLibrary.nextGeneration());
}

// "NAME=value" of the variable that set `p` ("NAME" alone when none did).
std::string setting(const params::Param& p) {
  const auto v = p.lookup();
  return v ? v->second + "=" + v->first : std::string(p.name);
}

// Elastic mode refuses process sets (Horovod #4021): after a reset the ranks of a set would name
// other processes, or ones that are gone.
void refuseProcessSetsWhenElastic(int numPs, bool dynamic) {
  if (numPs == 0 && !dynamic) return;
  if (!params::kElastic.asBool()) return;
  const std::string what =
      numPs > 0 ? concat(numPs, numPs == 1 ? " static process set" : " static process sets")
                : "dynamic process sets (" + setting(params::kDynamicProcessSets) + ")";
  invalid(concat("process sets are not supported in elastic mode (", setting(params::kElastic),
                 "), but init was given ", what,
                 ": the membership changes at every reset, so a set's ranks would name other processes or ones that "
                 "are gone (Horovod #4021). Use the global process set in elastic jobs."));
}

}  // namespace

// ---- errors -------------------------------------------------------------------------------------

void precondition(const std::string& what) { throw ApiError(RINGFOLD_PRECONDITION_ERROR, what); }
void invalid(const std::string& what) { throw InvalidArgument(what); }

void clearError() noexcept {
  tError.clear();
  tErrorFallback = nullptr;
}

void setError(const char* fn, const std::string& what) noexcept {
  try {
    tError = fn ? concat(fn, ": ", what) : what;
    tErrorFallback = nullptr;
  } catch (...) {
    tErrorFallback = "ringfold: out of memory while recording an error message";
  }
}

const char* lastError() noexcept { return tErrorFallback ? tErrorFallback : tError.c_str(); }

int recordCurrentException(const char* fn) noexcept {
  try {
    throw;
  } catch (const ApiError& e) {
    setError(fn, e.what());
    return e.code();
  } catch (const InvalidArgument& e) {
    setError(fn, e.what());
    return RINGFOLD_INVALID_ARGUMENT;
  } catch (const MismatchError& e) {
    setError(fn, e.what());
    return RINGFOLD_INVALID_ARGUMENT;
  } catch (const IoError& e) {
    setError(fn, e.what());
    return RINGFOLD_ABORTED;
  } catch (const TimeoutError& e) {
    setError(fn, e.what());
    return RINGFOLD_ABORTED;
  } catch (const std::bad_alloc&) {
    setError(fn, "out of memory");
    return RINGFOLD_UNKNOWN_ERROR;
  } catch (const std::exception& e) {
    setError(fn, e.what());
    return RINGFOLD_UNKNOWN_ERROR;
  } catch (...) {
    setError(fn, "unknown exception");
    return RINGFOLD_UNKNOWN_ERROR;
  }
}

// ---- state --------------------------------------------------------------------------------------

Session current() { return gLibrary.current(); }
Session require() { return gLibrary.require(); }

void initialize(const int* ranks, int nranks, const int* psRanks, const int* psSizes, int numPs) {
  std::lock_guard<std::mutex> lifecycle(gLibrary.lifecycle());
  if (gLibrary.current().engine) return;  // already initialized: nothing to do (as Horovod)
  if (nranks < 0) invalid(concat("nranks is ", nranks));
  if (nranks > 0 && ranks == nullptr) invalid(concat("ranks is NULL but nranks is ", nranks));
  if (numPs < 0) invalid(concat("num_ps is ", numPs));
  if (numPs > 0 && psSizes == nullptr) invalid(concat("ps_sizes is NULL but num_ps is ", numPs));
  refuseProcessSetsWhenElastic(numPs, params::kDynamicProcessSets.asBool());
  // Every count is checked against the world's size before the array it describes is read: the
  // library cannot know the arrays' lengths, only that no longer one makes sense.
  const int world = rendezvous::bootstrapFromEnvironment().size;
  const std::string worldText = concat(world, world == 1 ? " rank" : " ranks");
  int64_t total = 0;
  for (int i = 0; i < numPs; ++i) {
    if (psSizes[i] <= 0) {
      invalid(concat("process set ", i, " passed to init has ", psSizes[i], " ranks; a process set needs at least one"));
    }
    if (psSizes[i] > world) {
      invalid(concat("ps_sizes[", i, "] is ", psSizes[i], ", more than the ", worldText,
                     " of the world: a process set holds distinct ranks of it"));
    }
    total += psSizes[i];  // at most num_ps * world: no overflow in 64 bits
  }
  if (total > 0 && psRanks == nullptr) invalid(concat("ps_ranks is NULL but ps_sizes add up to ", total));
  std::vector<std::vector<int>> sets;
  for (int64_t i = 0, at = 0; i < numPs; at += psSizes[i], ++i) {
    sets.emplace_back(psRanks + at, psRanks + at + psSizes[i]);
  }

  if (nranks > 0) {
    if (nranks > world) {
      invalid(concat("nranks is ", nranks, " but the world has ", worldText, ": init with other ranks than 0..",
                     world - 1, " is not supported (every rank takes part; use a process set for a subset)"));
    }
    bool all = nranks == world;
    for (int i = 0; all && i < nranks; ++i) all = ranks[i] == i;
    if (!all) {
      invalid(concat("init with ranks ", engine::shapeString(std::vector<int64_t>(ranks, ranks + nranks)),
                     " is not supported: ringfold's ranks are the launcher's 0..", world - 1,
                     " and every rank takes part; to run collectives on a subset of ranks, pass it as a "
                     "process set (ps_ranks/ps_sizes) or add one with horovod_add_process_set"));
    }
  }
  const bool dynamic = params::kDynamicProcessSets.asBool();
  std::shared_ptr<Engine> engine = Engine::fromEnvironment(std::move(sets), dynamic, incarnationOfNextInit());
  gLibrary.publish(std::move(engine), dynamic);
}

void shutdown() {
  std::lock_guard<std::mutex> lifecycle(gLibrary.lifecycle());
  std::shared_ptr<Engine> engine = gLibrary.take();
  if (engine) engine->shutdown();
}

// ---- arguments ----------------------------------------------------------------------------------

TensorArgs tensorArgs(OpType op, const ringfold_tensor_t& t, int processSet) {
  TensorArgs a;
  a.op = op;
  a.dtype = engine::dataTypeFromCode(t.dtype);
  if (t.ndim < 0 || t.ndim > kMaxDims) invalid(concat("ndim is ", t.ndim, "; it must be between 0 and ", kMaxDims));
  if (t.ndim > 0 && t.shape == nullptr) invalid(concat("shape is NULL but ndim is ", t.ndim));
  a.shape.assign(t.shape, t.shape + t.ndim);
  a.input = t.data;
  a.device = t.device;
  a.stream = t.stream;
  a.processSet = processSet;
  return a;
}

std::vector<int64_t> alltoallSplits(const Session& s, const int64_t* splits, int nsplits, int processSet) {
  if (nsplits < 0) invalid(concat("nsplits is ", nsplits));
  if (nsplits == 0) return {};
  s.engine->checkSplitCount(processSet, nsplits);
  if (splits == nullptr) invalid(concat("splits is NULL but nsplits is ", nsplits));
  return std::vector<int64_t>(splits, splits + nsplits);
}

void requireOut(const void* p, const char* what) {
  if (p == nullptr) invalid(concat(what, " is NULL"));
}

std::string nameFor(const char* name, OpType op, int processSet) {
  if (name) return name;
  return gLibrary.autoName(op, processSet);
}

// ---- handles ------------------------------------------------------------------------------------

int64_t encodeHandle(const Session& s, Handle h) {
  if (h <= 0 || h > kHandleMask) RF_THROW(Error, "engine handle ", h, " out of the C ABI's range");
  return (s.generation << kHandleBits) | h;
}

std::string unknownHandle(int64_t handle) {
  return concat("unknown handle ", handle, " (never created, already released, or from before the last shutdown)");
}

Handle decodeHandle(const Session& s, int64_t handle) {
  if (handle <= 0 || (handle >> kHandleBits) != s.generation) invalid(unknownHandle(handle));
  return handle & kHandleMask;
}

const Result& completedResult(const Session& s, int64_t handle) {
  const Result* r =
      withHandle(s, handle, [&](Handle h) { return s.engine->handles().wait(h, std::chrono::milliseconds(0)); });
  if (r == nullptr) precondition(concat("handle ", handle, " has not completed yet (ringfold_wait for it first)"));
  if (!r->status.ok()) {
    throw ApiError(static_cast<int>(r->status.code),
                   concat("the operation of handle ", handle, " failed: ", r->status.message));
  }
  return *r;
}

}  // namespace capi
}  // namespace ringfold
