// One socket of a PeerLink and the sizes its protocol works with (private to peer_link*.cc).
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <memory>
#include <vector>

#include "transport/tcp_uring/peer_link.h"

namespace ringfold::transport::tcp_uring {

constexpr size_t kStagingBytes = 64 << 10;    // per socket; a small message lands in one recv
constexpr size_t kMaxBatchFrames = 32;        // frames per sendmsg
constexpr size_t kMaxBatchBytes = 256 << 10;  // payload bytes per batched sendmsg
// One recv op straight into a destination takes at most this much (MSG_WAITALL): smaller ops
// stay in cache (figures in docs/performance.md). Capping send ops the same way lost
// throughput, so a frame goes out in one sendmsg.
constexpr size_t kMaxDirectRecv = 128 << 10;
constexpr size_t kHeader = sizeof(FrameHeader);


struct PeerLink::SocketState {
  Socket sock;
  uint32_t id = 0;     // device-wide
  uint32_t index = 0;  // among this peer's sockets
  // send side
  bool sendBusy = false;
  bool batchZc = false;
  bool dirty = false;  // a cancelled send left the stream mid-frame
  std::vector<OutFrame*> batch;
  std::vector<iovec> iov;
  size_t iovFirst = 0;
  msghdr msg{};
  size_t batchBytes = 0, batchSent = 0;
  OutFrame* control = nullptr;  // an ABORT or WAITING frame to send at the next frame boundary
  // recv side
  bool recvBusy = false;
  bool stalled = false;
  bool down = false;  // the peer closed or reset this socket
  bool afterDirect = false;
  bool headerOnly = false;  // the next staging recv reads one header (after a large frame)
  std::unique_ptr<std::byte[]> staging{new std::byte[kStagingBytes]};
  size_t begin = 0, end = 0;
  Inbound* direct = nullptr;
  std::byte* directBase = nullptr;  // the destination the posted direct recv writes into
  size_t directOffset = 0, directLeft = 0;
};

}  // namespace ringfold::transport::tcp_uring
