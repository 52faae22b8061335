// Entry points that NCCL 2.30.7 (the nvidia-nccl-cu13 wheel PyTorch 2.15 pins) exports beyond
// the 2.28.9 nccl.h this library is built against, so that a torch built against 2.30 finds
// every symbol it imports under LD_PRELOAD. Their declarations are not in the 2.28 header: they
// are declared here with C linkage and the parameters this file reads (the others are
// ignored, which the x86-64 and AArch64 C calling conventions allow).
//
// ncclWinGetUserPtr works (it returns the registered address) and ncclParamDumpAll prints
// nothing; everything else is a feature ringfold does not have (growing or suspending a
// communicator, one-sided signals, device pointers of symmetric windows, NCCL's parameter
// store, the device API's GIN queues): it returns ncclInvalidUsage and ncclGetLastError says
// which function and why.
#include <nccl.h>

#include <string>

#include "bindings/nccl/state.h"

namespace {

ncclResult_t notProvided(ncclComm_t comm, const char* fn, const char* what) {
  const std::string text = std::string(fn) + ": " + what + " is not provided by ringfold's libnccl.so.2";
  if (comm) {
    comm->setLastError(text);
  } else {
    ringfold::nccl::setGlobalLastError(text);
  }
  return ncclInvalidUsage;
}

constexpr const char* kGrow = "growing a communicator (ncclCommGrow and its unique id)";
constexpr const char* kSuspend = "suspending a communicator's memory";
constexpr const char* kStats = "NCCL's memory statistics";
constexpr const char* kSignals = "one-sided signals (ncclPutSignal/ncclSignal/ncclWaitSignal)";
constexpr const char* kDevice = "NCCL's device API (symmetric-window device pointers, GIN queues, properties)";
constexpr const char* kParams = "NCCL's parameter store (ringfold reads its settings from RINGFOLD_* variables)";

}  // namespace

#define RF_NCCL_ALIAS(ret, name, ...) \
  extern "C" ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));

extern "C" {

ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId*) { return notProvided(comm, "ncclCommGetUniqueId", kGrow); }
ncclResult_t pncclCommGrow(ncclComm_t comm, int, const ncclUniqueId*, int, ncclComm_t* newcomm, ncclConfig_t*) {
  if (newcomm) *newcomm = nullptr;
  return notProvided(comm, "ncclCommGrow", kGrow);
}
ncclResult_t pncclCommSuspend(ncclComm_t comm, int) { return notProvided(comm, "ncclCommSuspend", kSuspend); }
ncclResult_t pncclCommResume(ncclComm_t comm) { return notProvided(comm, "ncclCommResume", kSuspend); }
ncclResult_t pncclCommMemStats(ncclComm_t comm, int, uint64_t*) { return notProvided(comm, "ncclCommMemStats", kStats); }
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  if (comm == nullptr || win == nullptr || outUserPtr == nullptr) {
    ringfold::nccl::setGlobalLastError("ncclWinGetUserPtr: comm, win and outUserPtr must not be NULL");
    return ncclInvalidArgument;
  }
  *outUserPtr = reinterpret_cast<ringfold::nccl::RegisteredRange*>(win)->buff;
  return ncclSuccess;
}
ncclResult_t pncclPutSignal(const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t, int, int, unsigned int,
                            ncclComm_t comm, cudaStream_t) {
  return notProvided(comm, "ncclPutSignal", kSignals);
}
ncclResult_t pncclSignal(int, int, int, unsigned int, ncclComm_t comm, cudaStream_t) {
  return notProvided(comm, "ncclSignal", kSignals);
}
ncclResult_t pncclWaitSignal(int, void*, ncclComm_t comm, cudaStream_t) {
  return notProvided(comm, "ncclWaitSignal", kSignals);
}
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, void*) { return notProvided(comm, "ncclCommQueryProperties", kDevice); }
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void**) {
  return notProvided(nullptr, "ncclGetLsaMultimemDevicePointer", kDevice);
}
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t, size_t, void*, void**) {
  return notProvided(nullptr, "ncclGetMultimemDevicePointer", kDevice);
}
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void**) {
  return notProvided(nullptr, "ncclGetLsaDevicePointer", kDevice);
}
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void**) {
  return notProvided(nullptr, "ncclGetPeerDevicePointer", kDevice);
}
ncclResult_t pncclGinOutboxCreateRequirement(int, int, void*, void*) {
  return notProvided(nullptr, "ncclGinOutboxCreateRequirement", kDevice);
}
ncclResult_t pncclGinInboxA2ACreateRequirement() { return notProvided(nullptr, "ncclGinInboxA2ACreateRequirement", kDevice); }
ncclResult_t pncclParamBind(void*, const char*) { return notProvided(nullptr, "ncclParamBind", kParams); }
ncclResult_t pncclParamGetI8(void*, void*) { return notProvided(nullptr, "ncclParamGetI8", kParams); }
ncclResult_t pncclParamGetI16(void*, void*) { return notProvided(nullptr, "ncclParamGetI16", kParams); }
ncclResult_t pncclParamGetI32(void*, void*) { return notProvided(nullptr, "ncclParamGetI32", kParams); }
ncclResult_t pncclParamGetI64(void*, void*) { return notProvided(nullptr, "ncclParamGetI64", kParams); }
ncclResult_t pncclParamGetU8(void*, void*) { return notProvided(nullptr, "ncclParamGetU8", kParams); }
ncclResult_t pncclParamGetU16(void*, void*) { return notProvided(nullptr, "ncclParamGetU16", kParams); }
ncclResult_t pncclParamGetU32(void*, void*) { return notProvided(nullptr, "ncclParamGetU32", kParams); }
ncclResult_t pncclParamGetU64(void*, void*) { return notProvided(nullptr, "ncclParamGetU64", kParams); }
ncclResult_t pncclParamGetStr(void*, const char**) { return notProvided(nullptr, "ncclParamGetStr", kParams); }
ncclResult_t pncclParamGet(void*, void*, int, int*) { return notProvided(nullptr, "ncclParamGet", kParams); }
ncclResult_t pncclParamGetParameter(const char*, const char**, int*) {
  return notProvided(nullptr, "ncclParamGetParameter", kParams);
}
ncclResult_t pncclParamGetAllParameterKeys(const char***, int*) {
  return notProvided(nullptr, "ncclParamGetAllParameterKeys", kParams);
}
void pncclParamDumpAll(void) {}

}  // extern "C"

RF_NCCL_ALIAS(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* id)
RF_NCCL_ALIAS(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* id, int rank,
              ncclComm_t* newcomm, ncclConfig_t* config)
RF_NCCL_ALIAS(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
RF_NCCL_ALIAS(ncclResult_t, ncclCommResume, ncclComm_t comm)
RF_NCCL_ALIAS(ncclResult_t, ncclCommMemStats, ncclComm_t comm, int stat, uint64_t* value)
RF_NCCL_ALIAS(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr)
RF_NCCL_ALIAS(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclWaitSignal, int nDesc, void* descs, ncclComm_t comm, cudaStream_t stream)
RF_NCCL_ALIAS(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, void* props)
RF_NCCL_ALIAS(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset, void** outPtr)
RF_NCCL_ALIAS(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset, void* multimem,
              void** outPtr)
RF_NCCL_ALIAS(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank, void** outPtr)
RF_NCCL_ALIAS(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer, void** outPtr)
RF_NCCL_ALIAS(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int sizeLog2, void* outHandle, void* outReq)
RF_NCCL_ALIAS(ncclResult_t, ncclGinInboxA2ACreateRequirement)
RF_NCCL_ALIAS(ncclResult_t, ncclParamBind, void* out, const char* key)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetI8, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetI16, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetI32, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetI64, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetU8, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetU16, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetU32, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetU64, void* h, void* out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetStr, void* h, const char** out)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGet, void* h, void* out, int maxLen, int* len)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen)
RF_NCCL_ALIAS(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen)
RF_NCCL_ALIAS(void, ncclParamDumpAll, void)
