// The NCCL-API library's internal state: what an ncclComm_t points at, the unique id's layout,
// error translation, and the CUDA helpers. Nothing here is exported (exports.map keeps only
// the nccl*/pnccl* entry points of api.cc).
//
// Vocabulary
//   NcclComm  : the object behind ncclComm_t. It owns a ringfold::Communicator once its init
//               has finished (init runs on a thread of its own: non-blocking init returns at
//               once and ncclCommGetAsyncError reports ncclInProgress until it is done).
//   op lock   : every call that runs on the communicator (a collective, a group's batch)
//               holds NcclComm::opMutex. ncclCommAbort sets `abortRequested` and asks the
//               Communicator to abort (requestAbort), whose waits then throw from inside any
//               blocking wait (every ~1 ms, also in a hierarchical allreduce's groups), so a collective stuck in another thread fails at once, its
//               guarded() tells every peer, and it releases the lock; Abort then frees the
//               communicator. An idle communicator is aborted by Abort itself.
//   asyncError: ncclInProgress while init runs, then ncclSuccess, then the error of the first
//               failed call or init (ncclCommGetAsyncError also notices a peer's abort).
//   lastError : the text of the latest error, per communicator and per process
//               (ncclGetLastError).
//   unique id : the 128 bytes of ncclUniqueId: magic "rfnccl01", the store's port and IPv4
//               address, and the 32-byte secret of the store server that ncclGetUniqueId started
//               in this process (kept alive until exit, as NCCL's bootstrap root is).
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "rendezvous/store.h"

namespace ringfold::nccl {

// ---- unique id -------------------------------------------------------------------------
struct IdFields {
  std::string host;    // dotted quad
  int port = 0;
  std::string secret;  // hex of the 32 secret bytes (the store's HMAC key)
};
// Starts a store server in this process (kept until exit) and describes it in `id`.
void makeUniqueId(ncclUniqueId* id);
// Throws InvalidArgument if `id` was not made by makeUniqueId (of any process).
IdFields parseUniqueId(const ncclUniqueId& id);

// ---- errors ----------------------------------------------------------------------------
// An error the library reports as `code` (ncclInvalidUsage for what is not supported).
struct NcclError : std::exception {
  NcclError(ncclResult_t code, std::string message) : code(code), message(std::move(message)) {}
  const char* what() const noexcept override { return message.c_str(); }
  ncclResult_t code;
  std::string message;
};
[[noreturn]] void unsupported(const std::string& what);  // throws NcclError(ncclInvalidUsage)
// ringfold's DataType for an NCCL type (the same numbers, but for the two 8-bit floats, which
// ringfold numbers after its bool); NcclError(ncclInvalidArgument) naming `who` if unknown.
DataType dataTypeOf(ncclDataType_t t, const char* who);
// The code for the exception being handled: IoError/TimeoutError -> ncclRemoteError,
// InvalidArgument -> ncclInvalidArgument, MismatchError -> ncclInvalidUsage, bad_alloc and
// other system failures -> ncclSystemError, anything else -> ncclInternalError; `text` gets its
// message.
ncclResult_t codeOf(std::exception_ptr error, std::string& text);
void setGlobalLastError(const std::string& text);
const char* globalLastError();

// ---- reduction operators ---------------------------------------------------------------
struct PreMulSum {
  DataType dtype;
  bool deviceScalar = false;   // ncclScalarDevice: read at each call
  const void* scalarPtr = nullptr;
  double hostValue = 1.0;      // ncclScalarHostImmediate: read at creation
};

// ncclCommRegister / ncclCommWindowRegister's handle: ringfold needs no registration, so the
// handle records the range (ncclWinGetUserPtr returns it).
struct RegisteredRange {
  void* buff;
  size_t size;
};

// ---- the communicator ------------------------------------------------------------------
struct NcclComm {
  int rank = 0;
  int nranks = 1;
  int cudaDev = 0;
  bool blocking = true;
  std::string name;  // ncclConfig_t::commName

  std::mutex opMutex;                     // held while anything runs on `comm`
  std::unique_ptr<Communicator> comm;     // set when init succeeds
  std::shared_ptr<rendezvous::Store> store;
  std::string storePrefix;
  std::thread initThread;
  std::mutex initJoinMutex;
  std::atomic<int> asyncError{ncclInProgress};
  std::atomic<bool> abortRequested{false};
  int splits = 0;   // ncclCommSplit calls so far (equal on every rank)
  int shrinks = 0;  // ncclCommShrink calls so far (equal on every remaining rank)

  std::mutex errorMutex;
  char lastError[1024] = {0};

  std::mutex opsMutex;
  std::map<int, PreMulSum> preMulSums;  // by ncclRedOp_t value (>= ncclNumOps)
  int nextOp = ncclNumOps;

  struct StagingBuffers;                   // CUDA staging (device.cc)
  std::unique_ptr<StagingBuffers> staging;

  NcclComm();
  ~NcclComm();  // joins the init thread

  void setLastError(const std::string& text);
  // Waits for the init thread, if any (any thread may call it).
  void joinInit();
  // Waits for init to finish; throws NcclError if it failed or is still running and `wait`
  // is false.
  Communicator& ready(bool wait);
  // Records a failure of a call: asyncError (first one wins), lastError; returns its code.
  ncclResult_t recordFailure(std::exception_ptr error);
};

// Runs init (connect through the id's store) on comm->initThread; `parent` set for split:
// `ranks` of the parent under `splitName`.
struct InitSpec {
  IdFields id;
  NcclComm* parent = nullptr;
  std::vector<int> ranks;  // split: members, in new-rank order
  std::string splitName;
};
void startInit(NcclComm* comm, InitSpec spec);

// Lets ncclCommAbort stop a running call (Communicator::watchAbortRequests; see "op lock").
void installAbortHook(NcclComm* comm);
// "ncclCommAbort was called on rank R".
std::string abortText(const NcclComm* comm);
// Marks the communicator aborted and makes a call running on it (in another thread) fail
// within ~1 ms with `why`. Init must have finished (joinInit).
void requestStop(NcclComm* comm, const std::string& why);
// Stops whatever runs on `comm` (requestStop), then aborts it with `why`, telling every peer
// (ncclCommAbort, ncclCommRevoke, ncclCommShrink with NCCL_SHRINK_ABORT).
void stopComm(NcclComm* comm, const std::string& why);
// Aborts and frees.
void abortComm(NcclComm* comm);

// ---- CUDA --------------------------------------------------------------------------------
// Whether the CUDA runtime can reach a device at all (cached after the first call).
bool cudaUsable();
int currentCudaDevice();  // 0 without CUDA
enum class MemKind { kHost, kDevice };
// kDevice for device memory, kHost for host memory (pageable, pinned or managed) and for
// every pointer when CUDA is unusable.
MemKind memKind(const void* p);
// Waits for `stream` (no-op without CUDA or for a null stream without CUDA).
void syncStream(cudaStream_t stream);
// Reads a PreMulSum scalar of `dtype` that may live in device memory.
double readScalar(const void* p, DataType dtype);
// Converts a scalar of `dtype` in host memory to double.
double hostScalar(const void* p, DataType dtype);

}  // namespace ringfold::nccl

struct ncclComm : ringfold::nccl::NcclComm {};
