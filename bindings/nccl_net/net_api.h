// NCCL's network-plugin ABI (the "ncclNet" function tables), declared here in our own words.
//
// Source of the facts: NVIDIA/nccl v2.30.7 (makefiles/version.mk 2.30.7), plugins/net/README.md,
// plugins/net/example/nccl/{net.h,net_v8.h..net_v12.h,net_device.h,err.h,common.h} and
// src/plugin/net.cc, which looks for the symbols ncclNetPlugin_v12, _v11, ... _v6 in that order
// in libnccl-net-<NCCL_NET_PLUGIN>.so. NCCL 2.30 knows v6..v12; this plugin provides v8..v12.
// NCCL's headers are not used: these are plain C-layout structs that must match them byte for
// byte. tests/bindings/nccl_net/layout_test.cc checks every size and offset relied on against
// the values printed by a probe compiled with NCCL's own example headers (listed there).
//
// What changed between versions (only what matters to a plugin):
//   v8  init(logger); isend/irecv sizes are int; properties without vProps/maxP2pBytes.
//   v9  isend/irecv sizes become size_t; properties gain forceFlush, vProps (4 devices),
//       maxP2pBytes, maxCollBytes; table gains makeVDevice.
//   v10 init gains a profiler callback; connect gains a per-comm config (traffic class);
//       isend/irecv gain profiler handles.
//   v11 init returns a per-communicator context (commId, config) that listen/connect take;
//       properties gain maxMultiRequestSize; table gains finalize(ctx) and setNetAttr.
//   v12 vProps holds 8 devices; properties gain railId and planeId.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringfold::ncclnet {

// ncclResult_t: every plugin function returns one of these (an int-sized C enum).
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,    // the kernel or the network failed
  kInternalError = 3,  // NCCL used the plugin wrongly, or something unsupported was asked for
  kInvalidArgument = 4,
  kInvalidUsage = 5,  // most likely the user's mistake (e.g. a message larger than its receive)
  kRemoteError = 6,   // the peer failed or went away
};

// Log levels and subsystem flags of NCCL's logger (ncclDebugLogLevel, ncclDebugLogSubSys).
enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
constexpr unsigned long kLogSubsysInit = 1;
constexpr unsigned long kLogSubsysNet = 16;
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* format, ...);
// ncclProfilerCallback_t; ignored by this plugin.
using ProfilerCallback = Result (*)(void** eventHandle, int type, void* pHandle, int64_t pluginId, void* extra);

constexpr size_t kHandleMaxSize = 128;             // NCCL_NET_HANDLE_MAXSIZE: bytes of a listen handle
constexpr int kPtrHost = 0x1;                      // NCCL_PTR_HOST
constexpr int kPtrCuda = 0x2;                      // NCCL_PTR_CUDA
constexpr int kPtrDmaBuf = 0x4;                    // NCCL_PTR_DMABUF
constexpr int kMaxRequests = 32;                   // NCCL_NET_MAX_REQUESTS (per comm, times maxRecvs on send)
constexpr uint64_t kMaxNetSizeBytes = 1ull << 40;  // NCCL_MAX_NET_SIZE_BYTES (1 TB)
constexpr intptr_t kOptionalRecvCompletion = 0x1;  // NCCL_NET_OPTIONAL_RECV_COMPLETION in *request
constexpr int kTrafficClassUndefined = -1;         // NCCL_NET_TRAFFIC_CLASS_UNDEF
constexpr int16_t kIdUndefined = -1;               // NCCL_NET_ID_UNDEF (railId, planeId)

// ncclNetDeviceType and the device-offload handle (ncclNetDeviceHandle_v7..v12_t, all the same).
enum DeviceType : int { kDeviceHost = 0, kDeviceUnpack = 1, kDeviceGinProxy = 2, kDeviceGinGdaki = 3 };
constexpr int kDeviceInvalidVersion = 0;  // NCCL_NET_DEVICE_INVALID_VERSION
struct DeviceHandle {
  DeviceType type;
  int version;
  void* handle;
  size_t size;
  int needsProxyProgress;
};

// A virtual NIC made of several physical ones (ncclNetVDeviceProps_v9..v11_t: 4, v12: 8).
template <int N>
struct VirtualDevice {
  int count;
  int devices[N];
};

// ncclNetCommConfig_v10..v12_t.
struct CommConfig {
  int trafficClass;
};

// ncclNetAttr_v11/v12_t (setNetAttr): hints about the communication to come.
struct CommAttr {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
};
struct NetAttr {
  CommAttr send, recv;
  uint32_t op, algo, proto;
};

// ncclNetProperties_v8_t.
struct PropertiesV8 {
  char* name;       // for logs
  char* pciPath;    // the device's directory in /sys, or null for a virtual interface
  uint64_t guid;    // devices sharing a guid share a port
  int ptrSupport;   // kPtrHost | kPtrCuda | kPtrDmaBuf
  int regIsGlobal;  // registrations outlive their comm (a cache)
  int speed;        // Mbit/s
  int port;
  float latency;  // microseconds
  int maxComms;
  int maxRecvs;  // buffers of one grouped irecv
  DeviceType netDeviceType;
  int netDeviceVersion;
};

// ncclNetProperties_v9_t and _v10_t (identical).
struct PropertiesV9 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;  // ask NCCL to flush every receive
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VirtualDevice<4> vProps;
  size_t maxP2pBytes;  // NCCL cuts larger point-to-point transfers
  size_t maxCollBytes;
};
using PropertiesV10 = PropertiesV9;

// ncclNetProperties_v11_t.
struct PropertiesV11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VirtualDevice<4> vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};

// ncclNetProperties_v12_t.
struct PropertiesV12 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VirtualDevice<8> vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
};

// The function tables, in NCCL's order ("comm" is a send or receive comm, "request" what
// isend/irecv/iflush returned; plugins/net/README.md says what each entry must do).

// ncclNet_v8_t.
struct NetV8 {
  const char* name;
  Result (*init)(Logger logger);
  Result (*devices)(int* count);
  Result (*getProperties)(int dev, PropertiesV8* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** deviceMhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
};

// ncclNet_v9_t.
struct NetV9 {
  const char* name;
  Result (*init)(Logger logger);
  Result (*devices)(int* count);
  Result (*getProperties)(int dev, PropertiesV9* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** deviceMhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* dev, VirtualDevice<4>* props);
};

// ncclNet_v10_t.
struct NetV10 {
  const char* name;
  Result (*init)(Logger logger, ProfilerCallback profiler);
  Result (*devices)(int* count);
  Result (*getProperties)(int dev, PropertiesV10* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, CommConfig* config, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** pHandles,
                  void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** deviceMhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* dev, VirtualDevice<4>* props);
};

// ncclNet_v11_t (T = PropertiesV11, V = VirtualDevice<4>) and ncclNet_v12_t (PropertiesV12,
// VirtualDevice<8>): the same entries.
template <class Properties, class VDevice>
struct NetV11Like {
  const char* name;
  Result (*init)(void** context, uint64_t commId, CommConfig* config, Logger logger, ProfilerCallback profiler);
  Result (*devices)(int* count);
  Result (*getProperties)(int dev, Properties* props);
  Result (*listen)(void* context, int dev, void* handle, void** listenComm);
  Result (*connect)(void* context, int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** pHandles,
                  void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** deviceMhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* dev, VDevice* props);
  Result (*finalize)(void* context);
  Result (*setNetAttr)(void* context, NetAttr* attr);
};
using NetV11 = NetV11Like<PropertiesV11, VirtualDevice<4>>;
using NetV12 = NetV11Like<PropertiesV12, VirtualDevice<8>>;

}  // namespace ringfold::ncclnet
