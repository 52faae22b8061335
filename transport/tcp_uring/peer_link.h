// PeerLink: the tcp_uring protocol between this rank and one peer, over that peer's sockets.
//
// Vocabulary (wire format: frame.h)
//   send queue : frames of posted isends, in message-id order. A socket whose send side is idle
//                takes the next frames: one large frame alone (zero-copy when enabled), or a
//                batch of small frames in one sendmsg (header and payload of each as iovecs).
//                One send op in flight per socket keeps each stream in order; short sends resume.
//   zero-copy  : a frame of at least RINGFOLD_ZEROCOPY_MIN_BYTES goes out with SENDMSG_ZC (header
//                and payload as iovecs); its request completes on the notification CQE, not the
//                send CQE. Under RINGFOLD_ZEROCOPY=auto the sends ask the kernel to report copies,
//                and the first notification saying the data was copied anyway (loopback, NICs
//                without scatter-gather) turns zero-copy off for that peer; EINVAL/EOPNOTSUPP
//                resends the frame with a plain sendmsg and turns it off too. A peer joined by
//                Unix sockets (same host) never uses it: those have no zero-copy path.
//   staging    : each socket always has one recv posted into its staging buffer, so a small
//                message (header + payload) lands with one completion; the payload part of a
//                large frame that did not fit is received straight into its destination.
//   resolving  : messages are matched to receives in message-id order (FIFO per tag follows).
//                A header whose id is ahead of the next unresolved one parks its socket until
//                the missing header arrives on another socket (no copy, no per-tag state). A
//                resolved message goes to the first posted receive with its tag, or into a
//                pooled unexpected buffer that a later receive copies out.
//   poisoned   : after any failure nothing new is sent or parsed; in-flight ops are cancelled
//                and drained before an error reaches the caller, so no kernel op still touches a
//                region the caller then frees.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/tcp_uring/connection.h"
#include "transport/tcp_uring/frame.h"
#include "transport/tcp_uring/socket.h"
#include "transport/tcp_uring/uring_loop.h"

namespace ringfold::transport::tcp_uring {

class DeviceState;

class PeerLink {
 public:
  PeerLink(DeviceState& device, int peerRank, std::vector<Socket> sockets, uint32_t firstSocketId);
  ~PeerLink();
  int rank() const { return rank_; }
  size_t socketCount() const { return sockets_.size(); }
  bool overUnix() const { return overUnix_; }  // a same-host peer joined by Unix sockets
  // The peer's pid when this process can look it up (same kernel and pid namespace), else 0.
  void setPid(int pid) { pid_ = pid; }
  int pid() const { return pid_; }
  // What the kernel says about data sent to this peer (TCP_INFO; Unix sockets: never).
  liveness::Unacknowledged unacknowledged() const;

  void start();                        // posts the first staging recvs
  void postSend(RequestState& request);
  void postRecv(RequestState& request);
  // A completion for socket `index` of this peer.
  void onCompletion(uint32_t index, const OpId& op, int res, uint32_t flags);

  // ABORT frames: one per socket whose stream is at a frame boundary, after its current op.
  void queueAbort(ErrorKind kind, const std::string& text);
  bool abortsPending() const;
  // A liveness notice to this peer: a WAITING frame on one socket (frame.h), marked with the
  // next message id. Best effort: skipped if no socket can take it.
  void queueWaiting(const liveness::Notice& notice);
  void cancelAll();                    // queues an async cancel for every socket with ops in flight
  // Any op still in flight; with countNotifications, also zero-copy notifications still due.
  bool busy(bool countNotifications) const;
  void shutdownSockets();              // last resort when cancelled ops do not complete
  void closeSockets();
  void forgetRequests();               // after poisoning: drop every pointer to a RequestState

 private:
  struct SocketState;
  void pump(SocketState& s);
  // Puts an ABORT or WAITING frame in the socket's control slot; false if it cannot go there.
  bool queueControl(SocketState& s, const FrameHeader& header, std::string text);
  void dropControl(SocketState& s);
  void submitBatch(SocketState& s);
  void onSend(SocketState& s, const OpId& op, int res, uint32_t flags);
  void releaseFrame(OutFrame* f);
  void finishBatch(SocketState& s, bool forget);
  void postStaging(SocketState& s);
  void postDirect(SocketState& s);
  void onRecv(SocketState& s, bool direct, int res);
  void parse(SocketState& s);
  Inbound* resolve(const FrameHeader& h);
  Inbound* findActive(uint64_t msgId);
  void finishIfComplete(Inbound* m);
  void landed(Inbound* m, std::byte* base, size_t offset, size_t len);
  void resumeStalled();
  void protocolError(const SocketState& s, const std::string& what);
  void onSocketDown(SocketState& s, int res);
  // Fails the device with why the link went down (built only then: it may look the peer's
  // process up).
  void poisonGone();
  bool hasPendingWork() const;

  DeviceState& device_;
  int rank_;
  std::vector<std::unique_ptr<SocketState>> sockets_;
  std::deque<OutFrame*> sendQueue_;
  uint64_t nextSendId_ = 0;
  uint64_t nextResolve_ = 0;
  std::deque<RequestState*> posted_;   // receives not yet matched, in posting order
  std::deque<Inbound*> unexpected_;    // messages not yet matched, in message-id order
  std::vector<Inbound*> active_;       // resolved messages still arriving
  std::vector<OutFrame*> awaitingNotif_;  // sent zero-copy frames whose notification is due
  size_t notifs_ = 0;
  bool zeroCopy_ = false;
  bool overUnix_ = false;
  bool reportCopies_ = false;
  bool stalledAny_ = false;
  bool gone_ = false;          // the peer closed every socket, or reset one
  int downRes_ = 1;            // the first socket down: its recv result (0 closed, -errno), 1: none
  uint32_t downSocket_ = 0;
  bool downMidFrame_ = false;
  int pid_ = 0;
};

}  // namespace ringfold::transport::tcp_uring
