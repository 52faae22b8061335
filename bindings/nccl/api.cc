// The exported C API of ringfold's libnccl.so.2: every function of NVIDIA's nccl.h (and the
// host functions of nccl_device/*.h that libnccl.so.2 exports), each defined as pnccl<Name>
// with nccl<Name> a weak alias of it, as NCCL does. What each does is in docs/nccl.md; the
// work is in state.cc (communicators), ops.cc (collectives, groups) and device.cc (CUDA).
// No exception leaves this file: every entry point catches and returns an ncclResult_t, with
// the message for ncclGetLastError.
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "bindings/nccl/device.h"
#include "bindings/nccl/ops.h"
#include "bindings/nccl/state.h"
#include "common/error.h"
#include "common/params.h"

using ringfold::nccl::NcclError;
using ringfold::nccl::Op;
using ringfold::nccl::OpKind;

// ---- ABI: the values and layouts this library is built for ---------------------------------
static_assert(NCCL_UNIQUE_ID_BYTES == 128 && sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 && ncclInternalError == 3 &&
                  ncclInvalidArgument == 4 && ncclInvalidUsage == 5 && ncclRemoteError == 6 && ncclInProgress == 7 &&
                  ncclNumResults == 8,
              "ncclResult_t");
static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 && ncclNumOps == 5 &&
                  ncclMaxRedOp == 0x7fffffff && sizeof(ncclRedOp_t) == 4,
              "ncclRedOp_t");
static_assert(ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt == 2 && ncclUint32 == 3 &&
                  ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclHalf == 6 && ncclFloat32 == 7 &&
                  ncclFloat == 7 && ncclFloat64 == 8 && ncclDouble == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                  ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
              "ncclDataType_t");
// ringfold's DataType and ReduceOp share NCCL's numbering (common/dtype.h): ops.cc casts.
static_assert(int(ringfold::DataType::kInt8) == ncclInt8 && int(ringfold::DataType::kUint8) == ncclUint8 &&
                  int(ringfold::DataType::kInt32) == ncclInt32 && int(ringfold::DataType::kUint32) == ncclUint32 &&
                  int(ringfold::DataType::kInt64) == ncclInt64 && int(ringfold::DataType::kUint64) == ncclUint64 &&
                  int(ringfold::DataType::kFloat16) == ncclFloat16 && int(ringfold::DataType::kFloat32) == ncclFloat32 &&
                  int(ringfold::DataType::kFloat64) == ncclFloat64 && int(ringfold::DataType::kBfloat16) == ncclBfloat16,
              "DataType follows ncclDataType_t");
static_assert(int(ringfold::ReduceOp::kSum) == ncclSum && int(ringfold::ReduceOp::kProd) == ncclProd &&
                  int(ringfold::ReduceOp::kMax) == ncclMax && int(ringfold::ReduceOp::kMin) == ncclMin &&
                  int(ringfold::ReduceOp::kAvg) == ncclAvg,
              "ReduceOp follows ncclRedOp_t");
static_assert(ncclScalarDevice == 0 && ncclScalarHostImmediate == 1, "ncclScalarResidence_t");
static_assert(NCCL_SPLIT_NOCOLOR == -1 && NCCL_CONFIG_UNDEF_INT == INT_MIN, "config constants");
// ncclConfig_t of 2.28 (ncclConfig_v22800): offsets of every field.
static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t size");
static_assert(offsetof(ncclConfig_t, size) == 0 && offsetof(ncclConfig_t, magic) == 8 &&
                  offsetof(ncclConfig_t, version) == 12 && offsetof(ncclConfig_t, blocking) == 16 &&
                  offsetof(ncclConfig_t, cgaClusterSize) == 20 && offsetof(ncclConfig_t, minCTAs) == 24 &&
                  offsetof(ncclConfig_t, maxCTAs) == 28 && offsetof(ncclConfig_t, netName) == 32 &&
                  offsetof(ncclConfig_t, splitShare) == 40 && offsetof(ncclConfig_t, trafficClass) == 44 &&
                  offsetof(ncclConfig_t, commName) == 48 && offsetof(ncclConfig_t, collnetEnable) == 56 &&
                  offsetof(ncclConfig_t, CTAPolicy) == 60 && offsetof(ncclConfig_t, shrinkShare) == 64 &&
                  offsetof(ncclConfig_t, nvlsCTAs) == 68 && offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72 &&
                  offsetof(ncclConfig_t, nvlinkCentricSched) == 76,
              "ncclConfig_t layout");
static_assert(sizeof(ncclSimInfo_t) == 24 && offsetof(ncclSimInfo_t, estimatedTime) == 16, "ncclSimInfo_t layout");
static_assert(sizeof(ncclTeam_t) == 12, "ncclTeam_t");

using ringfold::nccl::RegisteredRange;

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// Runs `body`; an exception becomes its code, with the message for ncclGetLastError.
template <typename Body>
ncclResult_t guard(ncclComm_t comm, Body&& body) {
  try {
    return body();
  } catch (...) {
    std::string text;
    const ncclResult_t code = ringfold::nccl::codeOf(std::current_exception(), text);
    if (comm) {
      comm->setLastError(text);
    } else {
      ringfold::nccl::setGlobalLastError(text);
    }
    return code;
  }
}

void requireComm(ncclComm_t comm, const char* fn) {
  if (comm == nullptr) throw NcclError(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
}
template <typename T>
void requirePtr(T* p, const char* fn, const char* what) {
  if (p == nullptr) throw NcclError(ncclInvalidArgument, std::string(fn) + ": " + what + " is NULL");
}

struct Config {
  bool blocking = true;
  std::string name;
};

// Reads the fields of `config` that this library uses (null: defaults).
Config readConfig(const ncclConfig_t* config, const char* fn, bool defaultBlocking = true) {
  Config c;
  c.blocking = defaultBlocking;
  if (config == nullptr) return c;
  if (config->magic != kConfigMagic || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
    throw NcclError(ncclInvalidArgument,
                    std::string(fn) + ": the ncclConfig_t was not initialized with NCCL_CONFIG_INITIALIZER");
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1) {
      throw NcclError(ncclInvalidArgument, std::string(fn) + ": config->blocking must be 0 or 1, not " +
                                               std::to_string(config->blocking));
    }
    c.blocking = config->blocking == 1;
  }
  if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(const char*) && config->commName) {
    c.name = config->commName;
  }
  return c;
}

// A fresh communicator object whose init starts now; blocking ones are waited for unless
// inside a group (ncclGroupEnd waits). Returns what the init call returns.
ncclResult_t launchInit(ncclComm_t* out, ncclComm_t c, ringfold::nccl::InitSpec spec) {
  *out = c;
  ringfold::nccl::startInit(c, std::move(spec));
  if (ringfold::nccl::inGroup()) {
    ringfold::nccl::noteGroupInit(c);
    return ncclSuccess;
  }
  if (!c->blocking) return ncclInProgress;
  c->joinInit();
  const int state = c->asyncError.load();
  if (state != ncclSuccess) {
    ringfold::nccl::setGlobalLastError(c->lastError);
    delete c;
    *out = nullptr;
    return static_cast<ncclResult_t>(state);
  }
  return ncclSuccess;
}

ncclResult_t initRank(ncclComm_t* newcomm, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                      const char* fn) {
  requirePtr(newcomm, fn, "comm");
  *newcomm = nullptr;
  if (nranks < 1) throw NcclError(ncclInvalidArgument, std::string(fn) + ": nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks) {
    throw NcclError(ncclInvalidArgument,
                    std::string(fn) + ": rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  }
  const Config cfg = readConfig(config, fn);
  ringfold::nccl::InitSpec spec;
  spec.id = ringfold::nccl::parseUniqueId(id);
  auto* c = new ncclComm();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = cfg.blocking;
  c->name = cfg.name;
  c->cudaDev = ringfold::nccl::currentCudaDevice();
  return launchInit(newcomm, c, std::move(spec));
}

// Split and shrink: `ranks` of the parent form the new communicator (new rank i = ranks[i]).
ncclResult_t splitInit(ncclComm_t parent, ncclComm_t* newcomm, std::vector<int> ranks, const std::string& name,
                       const ncclConfig_t* config, const char* fn) {
  const Config cfg = readConfig(config, fn, parent->blocking);
  auto* c = new ncclComm();
  c->nranks = static_cast<int>(ranks.size());
  c->rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), parent->rank) - ranks.begin());
  c->blocking = cfg.blocking;
  c->name = cfg.name;
  c->cudaDev = parent->cudaDev;
  ringfold::nccl::InitSpec spec;
  spec.parent = parent;
  spec.ranks = std::move(ranks);
  spec.splitName = name;
  return launchInit(newcomm, c, std::move(spec));
}


int configuredVersion() {
  static const int version = [] {
    if (!ringfold::params::kNcclVersion.isSet()) return NCCL_VERSION_CODE;
    const int64_t v = ringfold::params::parseInt(ringfold::params::kNcclVersion.str(), ringfold::params::kNcclVersion.name);
    if (v < 20000 || v > 99999) {
      throw NcclError(ncclInvalidUsage, std::string(ringfold::params::kNcclVersion.name) + "=" + std::to_string(v) +
                                            " is not an NCCL version code (e.g. 23007 for 2.30.7)");
    }
    return static_cast<int>(v);
  }();
  return version;
}

ncclResult_t collective(const Op& op) { return ringfold::nccl::submit(op); }

void deviceApi(const char* fn) {
  ringfold::nccl::unsupported(std::string(fn) +
                              ": NCCL's device API (device communicators, LSA/GIN barriers, LL all-to-all) needs "
                              "NCCL's GPU kernels; ringfold's libnccl.so.2 does not provide it");
}

}  // namespace

// Defines pnccl<name> and makes nccl<name> a weak alias of it.
#define RF_NCCL_ALIAS(ret, name, ...) \
  extern "C" ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));

extern "C" {

// ---- memory -------------------------------------------------------------------------------
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return guard(nullptr, [&] {
    requirePtr(ptr, "ncclMemAlloc", "ptr");
    *ptr = ringfold::nccl::allocate(size);
    return ncclSuccess;
  });
}
ncclResult_t pncclMemFree(void* ptr) {
  return guard(nullptr, [&] {
    if (ptr) ringfold::nccl::release(ptr);
    return ncclSuccess;
  });
}

// ---- version, ids, errors -------------------------------------------------------------------
ncclResult_t pncclGetVersion(int* version) {
  return guard(nullptr, [&] {
    requirePtr(version, "ncclGetVersion", "version");
    *version = configuredVersion();
    return ncclSuccess;
  });
}
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guard(nullptr, [&] {
    requirePtr(uniqueId, "ncclGetUniqueId", "uniqueId");
    ringfold::nccl::makeUniqueId(uniqueId);
    return ncclSuccess;
  });
}
const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError has the details)";
    case ncclSystemError: return "unhandled system error (ncclGetLastError has the details)";
    case ncclInternalError: return "internal error (ncclGetLastError has the details)";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError has the details)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError has the details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
const char* pncclGetLastError(ncclComm_t comm) {
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->errorMutex);
    if (comm->lastError[0] != '\0') return comm->lastError;
  }
  return ringfold::nccl::globalLastError();
}
void pncclResetDebugInit() {}
// NCCL's internal twin of ncclResetDebugInit (exported by libnccl.so.2, no p-prefixed twin).
void ncclResetDebugInitInternal() {}

// ---- communicators ------------------------------------------------------------------------
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return guard(nullptr, [&] { return initRank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig"); });
}
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guard(nullptr, [&] { return initRank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank"); });
}
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config) {
  return guard(nullptr, [&] {
    requirePtr(commIds, "ncclCommInitRankScalable", "commIds");
    if (nId < 1) throw NcclError(ncclInvalidArgument, "ncclCommInitRankScalable: nId must be at least 1");
    // Every id names a store of the same job; the first one serves all ranks.
    return initRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  });
}
ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guard(nullptr, [&] {
    requirePtr(comms, "ncclCommInitAll", "comms");
    if (ndev < 1) throw NcclError(ncclInvalidArgument, "ncclCommInitAll: ndev must be at least 1");
    ncclUniqueId id;
    ringfold::nccl::makeUniqueId(&id);
    const ringfold::nccl::IdFields fields = ringfold::nccl::parseUniqueId(id);
    std::vector<ncclComm_t> made(ndev, nullptr);
    for (int i = 0; i < ndev; ++i) {
      auto* c = new ncclComm();
      c->rank = i;
      c->nranks = ndev;
      c->cudaDev = devlist ? devlist[i] : i;
      ringfold::nccl::InitSpec spec;
      spec.id = fields;
      ringfold::nccl::startInit(c, std::move(spec));
      made[i] = c;
    }
    ncclResult_t result = ncclSuccess;
    for (ncclComm_t c : made) {
      c->joinInit();
      if (c->asyncError.load() != ncclSuccess && result == ncclSuccess) {
        result = static_cast<ncclResult_t>(c->asyncError.load());
        ringfold::nccl::setGlobalLastError(c->lastError);
      }
    }
    for (int i = 0; i < ndev; ++i) {
      if (result != ncclSuccess) {
        delete made[i];
        made[i] = nullptr;
      }
      comms[i] = made[i];
    }
    return result;
  });
}
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommFinalize");
    // Every call completes before it returns: there is nothing left to flush.
    if (comm->blocking) comm->joinInit();
    return ncclSuccess;
  });
}
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  return guard(nullptr, [&] {
    comm->joinInit();
    {
      std::lock_guard<std::mutex> lock(comm->opMutex);
      ringfold::nccl::forgetGpuStaging(comm);
    }
    delete comm;
    return ncclSuccess;
  });
}
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  return guard(nullptr, [&] {
    ringfold::nccl::abortComm(comm);
    return ncclSuccess;
  });
}
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommRevoke");
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
      throw NcclError(ncclInvalidArgument, "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT");
    }
    ringfold::nccl::stopComm(comm, "ncclCommRevoke was called on rank " + std::to_string(comm->rank));
    return ncclSuccess;
  });
}
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommSplit");
    requirePtr(newcomm, "ncclCommSplit", "newcomm");
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
      throw NcclError(ncclInvalidArgument, "ncclCommSplit: color must be >= 0 or NCCL_SPLIT_NOCOLOR");
    }
    std::lock_guard<std::mutex> lock(comm->opMutex);
    comm->ready(true);
    // Every rank of the parent publishes (color, key) and reads everyone's.
    const std::string base = comm->storePrefix + "/ncclsplit" + std::to_string(comm->splits++);
    std::vector<uint8_t> mine(8);
    std::memcpy(mine.data(), &color, 4);
    std::memcpy(mine.data() + 4, &key, 4);
    comm->store->set(base + "/" + std::to_string(comm->rank), mine);
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    const auto timeout = ringfold::params::kStartTimeout.asSeconds();
    std::vector<std::pair<int, int>> members;  // (key, parent rank) of my color
    int readers = 0;                            // ranks with a color: they read every entry
    for (int r = 0; r < comm->nranks; ++r) {
      std::vector<uint8_t> v = r == comm->rank ? mine : comm->store->get(base + "/" + std::to_string(r), timeout);
      if (v.size() != 8) throw NcclError(ncclInternalError, "ncclCommSplit: malformed store entry");
      int rc, rk;
      std::memcpy(&rc, v.data(), 4);
      std::memcpy(&rk, v.data() + 4, 4);
      if (rc != NCCL_SPLIT_NOCOLOR) ++readers;
      if (rc == color) members.emplace_back(rk, r);
    }
    // The last of the ranks with a color to have read every entry deletes them (a rank without
    // one only writes its entry, which every reader waited for).
    if (comm->store->add(base + "/read", 1) == readers) comm->store->deletePrefix(base + "/");
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    for (auto& m : members) ranks.push_back(m.second);
    return splitInit(comm, newcomm, std::move(ranks), "nccl" + std::to_string(comm->splits - 1) + "c" + std::to_string(color),
                     config, "ncclCommSplit");
  });
}
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommShrink");
    requirePtr(newcomm, "ncclCommShrink", "newcomm");
    *newcomm = nullptr;
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
      throw NcclError(ncclInvalidArgument, "ncclCommShrink: bad excludeRanksList");
    }
    std::vector<bool> excluded(comm->nranks, false);
    for (int i = 0; i < excludeRanksCount; ++i) {
      const int r = excludeRanksList[i];
      if (r < 0 || r >= comm->nranks) {
        throw NcclError(ncclInvalidArgument, "ncclCommShrink: excluded rank " + std::to_string(r) + " out of range");
      }
      excluded[r] = true;
    }
    if (excluded[comm->rank]) {
      throw NcclError(ncclInvalidArgument, "ncclCommShrink: the calling rank is in excludeRanksList");
    }
    if (shrinkFlags & NCCL_SHRINK_ABORT) {
      ringfold::nccl::stopComm(comm, "ncclCommShrink(NCCL_SHRINK_ABORT) on rank " + std::to_string(comm->rank));
    }
    std::lock_guard<std::mutex> lock(comm->opMutex);
    comm->ready(true);
    std::vector<int> ranks;
    for (int r = 0; r < comm->nranks; ++r) {
      if (!excluded[r]) ranks.push_back(r);
    }
    return splitInit(comm, newcomm, std::move(ranks), "ncclshrink" + std::to_string(comm->shrinks++), config,
                     "ncclCommShrink");
  });
}
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommGetAsyncError");
    requirePtr(asyncError, "ncclCommGetAsyncError", "asyncError");
    // An idle communicator is checked for a peer's abort (its device is driven once).
    if (comm->asyncError.load() == ncclSuccess && comm->opMutex.try_lock()) {
      std::lock_guard<std::mutex> lock(comm->opMutex, std::adopt_lock);
      if (comm->comm) {
        try {
          if (!comm->comm->failed()) comm->comm->device().progress();
        } catch (...) {
        }
        if (comm->comm->failed()) {
          std::exception_ptr reason = comm->comm->device().abortReason();
          if (reason) {
            comm->recordFailure(reason);
          } else {
            comm->asyncError.store(ncclRemoteError);
            comm->setLastError("the communicator was aborted by a peer");
          }
          if (comm->asyncError.load() == ncclSuccess) comm->asyncError.store(ncclRemoteError);
        }
      }
    }
    *asyncError = static_cast<ncclResult_t>(comm->asyncError.load());
    return ncclSuccess;
  });
}
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommCount");
    requirePtr(count, "ncclCommCount", "count");
    *count = comm->nranks;
    return ncclSuccess;
  });
}
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommCuDevice");
    requirePtr(device, "ncclCommCuDevice", "device");
    *device = comm->cudaDev;
    return ncclSuccess;
  });
}
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommUserRank");
    requirePtr(rank, "ncclCommUserRank", "rank");
    *rank = comm->rank;
    return ncclSuccess;
  });
}
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommRegister");
    requirePtr(handle, "ncclCommRegister", "handle");
    *handle = new RegisteredRange{buff, size};
    return ncclSuccess;
  });
}
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommDeregister");
    requirePtr(handle, "ncclCommDeregister", "handle");
    delete static_cast<RegisteredRange*>(handle);
    return ncclSuccess;
  });
}
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommWindowRegister");
    requirePtr(win, "ncclCommWindowRegister", "win");
    *win = reinterpret_cast<ncclWindow_t>(new RegisteredRange{buff, size});
    return ncclSuccess;
  });
}
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guard(comm, [&] {
    requireComm(comm, "ncclCommWindowDeregister");
    requirePtr(win, "ncclCommWindowDeregister", "win");
    delete reinterpret_cast<RegisteredRange*>(win);
    return ncclSuccess;
  });
}

// ---- reduction operators ------------------------------------------------------------------
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  return guard(comm, [&] {
    requireComm(comm, "ncclRedOpCreatePreMulSum");
    requirePtr(op, "ncclRedOpCreatePreMulSum", "op");
    requirePtr(scalar, "ncclRedOpCreatePreMulSum", "scalar");
    const ringfold::DataType dtype = ringfold::nccl::dataTypeOf(datatype, "ncclRedOpCreatePreMulSum");
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
      throw NcclError(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid residence");
    }
    ringfold::nccl::PreMulSum p;
    p.dtype = dtype;
    p.deviceScalar = residence == ncclScalarDevice;
    p.scalarPtr = scalar;
    if (!p.deviceScalar) p.hostValue = ringfold::nccl::hostScalar(scalar, p.dtype);
    std::lock_guard<std::mutex> lock(comm->opsMutex);
    if (comm->nextOp == ncclMaxRedOp) throw NcclError(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: too many operators");
    const int id = comm->nextOp++;
    comm->preMulSums[id] = p;
    *op = static_cast<ncclRedOp_t>(id);
    return ncclSuccess;
  });
}
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guard(comm, [&] {
    requireComm(comm, "ncclRedOpDestroy");
    std::lock_guard<std::mutex> lock(comm->opsMutex);
    if (comm->preMulSums.erase(static_cast<int>(op)) == 0) {
      throw NcclError(ncclInvalidArgument, "ncclRedOpDestroy: operator " + std::to_string(static_cast<int>(op)) +
                                               " was not created by ncclRedOpCreatePreMulSum on this communicator");
    }
    return ncclSuccess;
  });
}

// ---- collectives --------------------------------------------------------------------------
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream});
}
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream});
}
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream});
}
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream});
}
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream});
}
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream});
}
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective({OpKind::kAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm, stream});
}
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream});
}
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  return collective({OpKind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream});
}
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return collective({OpKind::kSend, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream});
}
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return collective({OpKind::kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream});
}
ncclResult_t pncclGroupStart() { return ringfold::nccl::groupStart(); }
ncclResult_t pncclGroupEnd() {
  return guard(nullptr, [&] { return ringfold::nccl::groupEnd(); });
}
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  ringfold::nccl::discardGroup();
  ringfold::nccl::setGlobalLastError(
      "ncclGroupSimulateEnd: ringfold has no NCCL performance model to simulate with; the group was discarded");
  return ncclInvalidUsage;
}

// ---- NCCL's device API (nccl_device/*.h): host-side entry points ----------------------------
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  return guard(comm, [&] {
    deviceApi("ncclDevCommCreate");
    return ncclSuccess;
  });
}
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const*) {
  return guard(comm, [&] {
    deviceApi("ncclDevCommDestroy");
    return ncclSuccess;
  });
}
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t, int, ncclGinBarrierHandle_t*,
                                              ncclDevResourceRequirements_t*) {
  return guard(comm, [&] {
    deviceApi("ncclGinBarrierCreateRequirement");
    return ncclSuccess;
  });
}
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t, int, ncclLsaBarrierHandle_t*, ncclDevResourceRequirements_t*) {
  return guard(nullptr, [&] {
    deviceApi("ncclLsaBarrierCreateRequirement");
    return ncclSuccess;
  });
}
ncclResult_t pncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle_t*, ncclDevResourceRequirements_t*) {
  return guard(nullptr, [&] {
    deviceApi("ncclLLA2ACreateRequirement");
    return ncclSuccess;
  });
}
int pncclLLA2ACalcSlots(int, int) {
  ringfold::nccl::setGlobalLastError("ncclLLA2ACalcSlots: NCCL's device API is not provided by ringfold's libnccl.so.2");
  return 0;
}
// Teams: ringfold gives no rank load/store access to another's memory, so each rank's LSA team
// is itself alone, and its rail team is the whole communicator.
ncclTeam_t pncclTeamWorld(ncclComm_t comm) {
  ncclTeam_t t{1, 0, 1};
  if (comm) t = {comm->nranks, comm->rank, 1};
  return t;
}
ncclTeam_t pncclTeamLsa(ncclComm_t) { return ncclTeam_t{1, 0, 1}; }
ncclTeam_t pncclTeamRail(ncclComm_t comm) { return pncclTeamWorld(comm); }
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  return (comm ? comm->rank : 0) + (rank - team.rank) * team.stride;
}
int pncclTeamRankToLsa(ncclComm_t, ncclTeam_t team, int rank) { return (rank - team.rank) * team.stride; }

}  // extern "C"

RF_NCCL_ALIAS(ncclResult_t, ncclMemAlloc, void** ptr, size_t size)
RF_NCCL_ALIAS(ncclResult_t, ncclMemFree, void* ptr)
RF_NCCL_ALIAS(ncclResult_t, ncclGetVersion, int* version)
RF_NCCL_ALIAS(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId)
RF_NCCL_ALIAS(const char*, ncclGetErrorString, ncclResult_t result)
RF_NCCL_ALIAS(const char*, ncclGetLastError, ncclComm_t comm)
RF_NCCL_ALIAS(void, ncclResetDebugInit)
RF_NCCL_ALIAS(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
              ncclConfig_t* config)
RF_NCCL_ALIAS(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)
RF_NCCL_ALIAS(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
              ncclUniqueId* commIds, ncclConfig_t* config)
RF_NCCL_ALIAS(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist)
RF_NCCL_ALIAS(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclCommAbort, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
RF_NCCL_ALIAS(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)
RF_NCCL_ALIAS(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
              ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags)
RF_NCCL_ALIAS(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError)
RF_NCCL_ALIAS(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count)
RF_NCCL_ALIAS(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device)
RF_NCCL_ALIAS(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank)
RF_NCCL_ALIAS(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle)
RF_NCCL_ALIAS(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle)
RF_NCCL_ALIAS(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
              int winFlags)
RF_NCCL_ALIAS(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win)
RF_NCCL_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
              ncclScalarResidence_t residence, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
              cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
              cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclGroupStart)
RF_NCCL_ALIAS(ncclResult_t, ncclGroupEnd)
RF_NCCL_ALIAS(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo)
RF_NCCL_ALIAS(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
              ncclDevComm_t* outDevComm)
RF_NCCL_ALIAS(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm)
RF_NCCL_ALIAS(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team, int nBarriers,
              ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)
RF_NCCL_ALIAS(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers,
              ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)
RF_NCCL_ALIAS(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
              ncclDevResourceRequirements_t* outReq)
RF_NCCL_ALIAS(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize)
RF_NCCL_ALIAS(ncclTeam_t, ncclTeamWorld, ncclComm_t comm)
RF_NCCL_ALIAS(ncclTeam_t, ncclTeamLsa, ncclComm_t comm)
RF_NCCL_ALIAS(ncclTeam_t, ncclTeamRail, ncclComm_t comm)
RF_NCCL_ALIAS(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank)
RF_NCCL_ALIAS(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank)
