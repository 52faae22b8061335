// The NCCL net plugin's implementation, one version-neutral function per table entry; tables.cc
// adapts them to ncclNet_v8 .. v12 (net_api.h).
//
// Objects handed to NCCL (all opaque to it):
//   ListenComm  a Listener (handshake.h); accept() polls it until the sender's sockets are in.
//   Comm        one direction of one connection (receiver rank 0, sender rank 1), carried as the
//               listener's RINGFOLD_NCCL_NET_TRANSPORT chose (the handle says which): a
//               tcp_uring PairLink over the handshaken sockets, or an rdma PairLink
//               (transport/rdma/pair.h) set up over the one handshaken socket, which then
//               stays open as the peer's heartbeat; and a pool of Requests.
//   Request     an isend, a grouped irecv of up to kMaxRecvs buffers (one transport receive per
//               buffer, tag by tag: both transports match by tag in message order, which is
//               NCCL's rule), or a flush (always complete: host memory needs none).
//   MemHandle   what regMr returns: the range and its type (host only).
// In-progress connects live in the caller's handle buffer (NCCL calls connect() again with the
// same handle until a comm comes back), as NCCL's own socket transport does; an rdma
// connection's start-up (its blobs, then its hellos) also runs across those calls, and across
// accept() calls on the listening side, so neither ever blocks.
//
// Errors: no exception leaves this layer. IoError (the peer died, reset, sent ABORT, or the
// kernel gave up after RINGFOLD_TIMEOUT of unacknowledged data) -> kRemoteError; a message
// larger than its receive (CheckMismatch) -> kInvalidUsage; CUDA or dma-buf memory, too many
// grouped receives, a wrong object -> kInternalError; anything else -> kSystemError. Each is
// logged through NCCL's logger (WARN), or ringfold's without one.
//
// Threads: NCCL may call setup (listen/connect/accept/regMr) and data calls (isend/irecv/test)
// on different threads, but never the same comm from two threads at once; objects share no
// mutable state except the one-time init and the logger.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bindings/nccl_net/handshake.h"
#include "bindings/nccl_net/net_api.h"

namespace ringfold::ncclnet {

constexpr int kMaxRecvs = 8;                          // buffers of one grouped irecv (NCCL's IB transport uses 8)
constexpr size_t kMaxMessageBytes = size_t{1} << 30;  // maxP2pBytes, maxCollBytes (tables.cc)

// What getProperties reports, before it is cut to a version's struct.
struct DeviceInfo {
  std::string name;     // interface name
  std::string address;  // IPv4 the device listens on
  std::string pciPath;  // realpath of /sys/class/net/<name>/device; empty for a virtual one
  int speedMbps = 0;
  int sockets = 1;  // TCP connections per plugin connection
  Carrier carrier = Carrier::kTcp;  // RINGFOLD_NCCL_NET_TRANSPORT's choice
  std::string carrierNote;          // why auto chose tcp
};

Result init(Logger logger);
Result devices(int* count);
Result deviceInfo(int dev, const DeviceInfo** info);
template <class P>
Result fillProperties(int dev, P* props);  // PropertiesV8 .. V12 (tables.cc)
Result listen(int dev, void* handle, void** listenComm);
Result connect(int dev, void* handle, void** sendComm);
Result accept(void* listenComm, void** recvComm);
Result regMr(void* comm, void* data, size_t size, int type, void** mhandle);
Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
Result deregMr(void* comm, void* mhandle);
Result isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
Result irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles, void** request);
Result iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
Result test(void* request, int* done, int* sizes);
Result closeSend(void* sendComm);
Result closeRecv(void* recvComm);
Result closeListen(void* listenComm);

}  // namespace ringfold::ncclnet
