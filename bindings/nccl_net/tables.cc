// The exported tables ncclNetPlugin_v8 .. ncclNetPlugin_v12 (net_api.h): thin adapters from each
// version's signatures to plugin.h. The library exports nothing else (exports.map).
//
// Per version: v8 passes int sizes (a negative one is refused); v10+ pass a connect config and
// profiler handles, both ignored (TCP has no traffic classes here); v11+ pass a per-communicator
// context from init(), which only carries the commId and config (finalize frees it).
// Entries left null are the documented "not supported": getDeviceMr and irecvConsumed (host
// device type only: NCCL calls them only for device-offload plugins), makeVDevice (no NIC
// fusion) and setNetAttr (no tuning hints used). regMrDmaBuf exists and refuses, since
// ptrSupport never has NCCL_PTR_DMABUF.
#include <cstring>
#include <vector>

#include "bindings/nccl_net/net_api.h"
#include "bindings/nccl_net/plugin.h"

namespace ringfold::ncclnet {

template <class P>
Result fillProperties(int dev, P* props) {
  const DeviceInfo* d = nullptr;
  if (Result r = deviceInfo(dev, &d); r != kSuccess) return r;
  if (props == nullptr) return kInternalError;
  std::memset(props, 0, sizeof(P));
  props->name = const_cast<char*>(d->name.c_str());
  props->pciPath = d->pciPath.empty() ? nullptr : const_cast<char*>(d->pciPath.c_str());
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = kPtrHost;
  props->regIsGlobal = 0;
  props->speed = d->speedMbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->netDeviceType = kDeviceHost;
  props->netDeviceVersion = kDeviceInvalidVersion;
  if constexpr (requires { props->maxP2pBytes; }) {
    props->forceFlush = 0;
    props->vProps.count = 1;
    props->vProps.devices[0] = dev;
    // 1 GiB, what NCCL itself assumes for v8 plugins: test() reports sizes as int, so no single
    // message may reach 2 GiB; NCCL cuts larger transfers.
    props->maxP2pBytes = kMaxMessageBytes;
    props->maxCollBytes = kMaxMessageBytes;
  }
  if constexpr (requires { props->maxMultiRequestSize; }) props->maxMultiRequestSize = 1;
  if constexpr (requires { props->railId; }) {
    props->railId = kIdUndefined;
    props->planeId = kIdUndefined;
  }
  return kSuccess;
}

namespace {

// init's per-communicator context (v11+).
struct Context {
  uint64_t commId;
  int trafficClass;
};

Result initV8(Logger logger) { return init(logger); }
Result initV10(Logger logger, ProfilerCallback) { return init(logger); }
Result initV11(void** context, uint64_t commId, CommConfig* config, Logger logger, ProfilerCallback) {
  Result r = init(logger);
  if (r != kSuccess) return r;
  if (context == nullptr) return kInternalError;
  *context = new Context{commId, config != nullptr ? config->trafficClass : kTrafficClassUndefined};
  return kSuccess;
}
Result finalize(void* context) {
  delete static_cast<Context*>(context);
  return kSuccess;
}

template <class P>
Result getProperties(int dev, P* props) {
  return fillProperties(dev, props);
}

Result listenV11(void*, int dev, void* handle, void** listenComm) { return listen(dev, handle, listenComm); }

Result connectV8(int dev, void* handle, void** sendComm, DeviceHandle**) { return connect(dev, handle, sendComm); }
Result connectV10(int dev, CommConfig*, void* handle, void** sendComm, DeviceHandle**) {
  return connect(dev, handle, sendComm);
}
Result connectV11(void*, int dev, void* handle, void** sendComm, DeviceHandle**) {
  return connect(dev, handle, sendComm);
}
Result acceptAll(void* listenComm, void** recvComm, DeviceHandle**) { return accept(listenComm, recvComm); }

Result isendV8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return kInternalError;
  return isend(comm, data, static_cast<size_t>(size), tag, mhandle, request);
}
Result isendV9(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return isend(comm, data, size, tag, mhandle, request);
}
Result isendV10(void* comm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  return isend(comm, data, size, tag, mhandle, request);
}

Result irecvV8(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  if (n < 1 || n > kMaxRecvs || sizes == nullptr) return kInternalError;
  size_t wide[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return kInternalError;
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return irecv(comm, n, data, wide, tags, mhandles, request);
}
Result irecvV9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return irecv(comm, n, data, sizes, tags, mhandles, request);
}
Result irecvV10(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void**, void** request) {
  return irecv(comm, n, data, sizes, tags, mhandles, request);
}

}  // namespace

}  // namespace ringfold::ncclnet

using namespace ringfold::ncclnet;

// clang-format off
extern "C" {

#define RF_NCCL_NET_EXPORT __attribute__((visibility("default")))

RF_NCCL_NET_EXPORT NetV8 ncclNetPlugin_v8 = {
    .name = "ringfold",
    .init = initV8,
    .devices = devices,
    .getProperties = getProperties<PropertiesV8>,
    .listen = listen,
    .connect = connectV8,
    .accept = acceptAll,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendV8,
    .irecv = irecvV8,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
};

RF_NCCL_NET_EXPORT NetV9 ncclNetPlugin_v9 = {
    .name = "ringfold",
    .init = initV8,
    .devices = devices,
    .getProperties = getProperties<PropertiesV9>,
    .listen = listen,
    .connect = connectV8,
    .accept = acceptAll,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendV9,
    .irecv = irecvV9,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
};

RF_NCCL_NET_EXPORT NetV10 ncclNetPlugin_v10 = {
    .name = "ringfold",
    .init = initV10,
    .devices = devices,
    .getProperties = getProperties<PropertiesV10>,
    .listen = listen,
    .connect = connectV10,
    .accept = acceptAll,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendV10,
    .irecv = irecvV10,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
};

RF_NCCL_NET_EXPORT NetV11 ncclNetPlugin_v11 = {
    .name = "ringfold",
    .init = initV11,
    .devices = devices,
    .getProperties = getProperties<PropertiesV11>,
    .listen = listenV11,
    .connect = connectV11,
    .accept = acceptAll,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendV10,
    .irecv = irecvV10,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
    .finalize = finalize,
    .setNetAttr = nullptr,
};

RF_NCCL_NET_EXPORT NetV12 ncclNetPlugin_v12 = {
    .name = "ringfold",
    .init = initV11,
    .devices = devices,
    .getProperties = getProperties<PropertiesV12>,
    .listen = listenV11,
    .connect = connectV11,
    .accept = acceptAll,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendV10,
    .irecv = irecvV10,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
    .finalize = finalize,
    .setNetAttr = nullptr,
};

#undef RF_NCCL_NET_EXPORT

}  // extern "C"
// clang-format on
