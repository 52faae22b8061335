// fabric_verbs: the Fabric (fabric.h) over ibverbs reliable-connected queue pairs, with
// libibverbs.so.1 dlopen'ed (verbs_api.h), every pure decision in verbs_config.h, and the choice
// of device and port in verbs_device.h.
//
// What open() builds: on the first (device, port) that RINGFOLD_IB_HCA allows, that is ACTIVE
// and whose link layer is InfiniBand or Ethernet (RoCE): one context, one protection domain, one
// completion channel (waitFd()), one CQ shared by every QP, and for each peer lanes() RC QPs
// (RINGFOLD_IB_QPS_PER_CONNECTION, 1..16) in INIT. insertPeer() moves the peer's QPs to RTR and
// RTS with the numbers of verbs_config's qpAttributes(). It throws Error naming the reason:
// "libibverbs.so.1 not found", "no RDMA devices found", "no device matches RINGFOLD_IB_HCA=...",
// "mlx5_0:1 is DOWN".
//
// Specifics of this fabric within the Fabric contract
//   * Contexts: a post's context becomes the work request's wr_id; kNoContext is reserved (posts
//     with it are refused with -EINVAL). A kError that belongs to no post (a failed receive, an
//     asynchronous QP/port/device event) carries kNoContext; its peer is -1 when no QP is named.
//   * Send queues: each QP takes at most a fixed number of unfinished writes (from the device's
//     limits); a post past that returns -EAGAIN, as does a provider's ENOMEM.
//   * Receives: postImmReceives(peer, n) raises the peer's room by n, and every lane of the peer
//     keeps `room` receives posted (capped by the QP's receive queue), so an immediate may arrive
//     on any lane without an RNR stall; a kImmediate lowers the room and the count of the lane it
//     arrived on, and the protocol's postImmReceives(peer, 1) refills exactly that lane.
//   * Immediates travel in network byte order and come back in host order.
//   * poll() also reads the context's asynchronous events (every 10 ms, and in armWait()): a
//     fatal QP event, a port error on this port, a CQ error or a fatal device error becomes a
//     kError naming the event.
//   * MemoryKind::kCuda registers through dma-buf (libcuda.so.1's cuMemGetHandleForAddressRange
//     and ibv_reg_dmabuf_mr); without either, registerMemory throws InvalidArgument ("... stage
//     through host memory"). A registration of 0 bytes has no MR (handle null, keys 0).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma::verbs {

constexpr uint64_t kNoContext = UINT64_MAX;

// Opens the verbs fabric for `rank` of `size` (see above); throws Error when it cannot run here.
std::unique_ptr<Fabric> open(int rank, int size);

// Whether open() would find a port, without building anything (opens and closes the devices'
// contexts only). `why` says which port (true) or why not (false).
bool usable(std::string& why);

}  // namespace ringfold::transport::rdma::verbs
