// Internals of the C ABI (ringfold.h), shared by its .cc files and exported by none: everything
// here is in a namespace with hidden visibility, so libringfold.so exports only the functions
// ringfold.h marks RINGFOLD_API.
//
// Errors. Every exported function runs its body inside guard()/guardOr()/enqueueGuard(), which
// clear this thread's last-error message, catch everything the body throws, map it to a status
// code (error.h's classes: InvalidArgument/MismatchError -> INVALID_ARGUMENT, IoError/
// TimeoutError -> ABORTED, ApiError -> its own code, anything else -> UNKNOWN_ERROR) and record
// the message as "<function>: <what>". No exception crosses the C boundary.
//
// State. The library (capi.cc) holds the engine of the current initialization as a shared_ptr:
// every call takes its own reference (current()/require() return a Session), so a shutdown on
// another thread never frees an engine under a caller; the last reference destroys it. init and
// shutdown are serialized. Each initialization has a generation, encoded in the top bits of the
// handles it hands out, so a handle from before a shutdown is rejected instead of aliasing a new
// one. The process id of the initializer is recorded: a fork()ed child sees "not initialized"
// (its copy of the engine has no thread) and that copy is deliberately never destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "bindings/c/ringfold.h"
#include "common/error.h"
#include "engine/engine.h"

namespace ringfold {
namespace capi __attribute__((visibility("hidden"))) {

using engine::Engine;
using engine::Handle;
using engine::OpType;
using engine::Result;
using engine::TensorArgs;

// ---- errors ---------------------------------------------------------------------------------------

// A failure with its C status code (or process-set code), raised by the checks of the C ABI.
class ApiError : public std::runtime_error {
 public:
  ApiError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

[[noreturn]] void precondition(const std::string& what);
[[noreturn]] void invalid(const std::string& what);

void clearError() noexcept;
// Records "<fn>: <what>" (just `what` when fn is null) as this thread's last error.
void setError(const char* fn, const std::string& what) noexcept;
const char* lastError() noexcept;
// Maps the exception being handled to a status code and records its message. Call only from a
// catch block.
int recordCurrentException(const char* fn) noexcept;

// Runs `body` (returning a status) so that nothing escapes.
template <typename F>
int guard(const char* fn, F&& body) noexcept {
  clearError();
  try {
    return body();
  } catch (...) {
    return recordCurrentException(fn);
  }
}

// Runs `body` (returning a value); on an exception records it and returns `onError`.
template <typename T, typename F>
T guardOr(const char* fn, T onError, F&& body) noexcept {
  clearError();
  try {
    return body();
  } catch (...) {
    recordCurrentException(fn);
    return onError;
  }
}

// guard() for enqueue calls. Engine::enqueue* throws EngineStopped when the engine no longer
// takes work: shut down (here or on another rank) or stopped by a failure. Horovod reports both
// as its SHUT_DOWN_ERROR, a PRECONDITION_ERROR.
template <typename F>
int enqueueGuard(const char* fn, F&& body) noexcept {
  clearError();
  try {
    return body();
  } catch (const engine::EngineStopped& e) {
    setError(fn, e.what());
    return static_cast<int>(e.code());
  } catch (...) {
    return recordCurrentException(fn);
  }
}

// ---- the library's state --------------------------------------------------------------------------

struct Session {
  std::shared_ptr<Engine> engine;  // null: not initialized (in this process)
  int64_t generation = 0;
  bool dynamic = false;            // dynamic process sets
};

Session current();
// current(), or throws PRECONDITION_ERROR naming why there is none.
Session require();
// horovod_init / horovod_shutdown (serialized); throw on failure.
void initialize(const int* ranks, int nranks, const int* psRanks, const int* psSizes, int numPs);
void shutdown();

// ---- arguments ------------------------------------------------------------------------------------

// The C ABI checks only what it must before it reads a caller's memory (array lengths, NULL
// arrays) and translates codes; every check of the tensor itself is the engine's, done once in
// Engine::enqueue (engine/tensor_args.h), with the messages the C ABI reports.

// The engine's arguments for tensor `t` of operation `op`: its dtype code translated
// (engine::dataTypeFromCode), its shape read after ndim (0 to 64) and the pointer are checked,
// data, device and stream as given. The caller adds the op-specific fields.
TensorArgs tensorArgs(OpType op, const ringfold_tensor_t& t, int processSet);
// Alltoall's splits: nsplits (0, or the size of the process set: Engine::checkSplitCount) is
// checked before `splits` is read. Returns them; the engine checks their values.
std::vector<int64_t> alltoallSplits(const Session& s, const int64_t* splits, int nsplits, int processSet);
void requireOut(const void* p, const char* what);
// `name`, or "<op>.noname.<n>" counted per (op, process set) since init or the set's last
// completed join.
std::string nameFor(const char* name, OpType op, int processSet);

// ---- handles --------------------------------------------------------------------------------------

int64_t encodeHandle(const Session& s, Handle h);
std::string unknownHandle(int64_t handle);
Handle decodeHandle(const Session& s, int64_t handle);

// Calls f(engineHandle), turning the handle table's "unknown handle" into one naming the C handle.
template <typename F>
auto withHandle(const Session& s, int64_t handle, F&& f) {
  const Handle h = decodeHandle(s, handle);
  try {
    return f(h);
  } catch (const InvalidArgument&) {
    invalid(unknownHandle(handle));
  }
}

// The result of a completed, successful handle; throws its error otherwise.
const Result& completedResult(const Session& s, int64_t handle);

}  // namespace capi
}  // namespace ringfold
