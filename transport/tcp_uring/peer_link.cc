// PeerLink (peer_link.h): set-up, sending, dispatch and failure.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp_uring/device_state.h"
#include "transport/tcp_uring/kernel_view.h"
#include "transport/tcp_uring/peer_link.h"
#include "transport/tcp_uring/peer_link_socket.h"
#include "transport/tcp_uring/uring_loop.h"

namespace ringfold::transport::tcp_uring {

PeerLink::PeerLink(DeviceState& device, int peerRank, std::vector<Socket> sockets, uint32_t firstSocketId)
    : device_(device), rank_(peerRank) {
  for (size_t i = 0; i < sockets.size(); ++i) {
    auto s = std::make_unique<SocketState>();
    s->sock = std::move(sockets[i]);
    s->id = firstSocketId + static_cast<uint32_t>(i);
    s->index = static_cast<uint32_t>(i);
    sockets_.push_back(std::move(s));
  }
  const Tuning& t = device.tuning();
  overUnix_ = !sockets_.empty() && isUnixSocket(sockets_[0]->sock.fd());
  zeroCopy_ = t.zeroCopy != ZeroCopyMode::kOff && !overUnix_ && device.uring().supportsOp(IORING_OP_SENDMSG_ZC);
  reportCopies_ = t.zeroCopy == ZeroCopyMode::kAuto;
  if (t.zeroCopy == ZeroCopyMode::kOn && !zeroCopy_ && !overUnix_) {
    RF_LOG(kWarning) << "RINGFOLD_ZEROCOPY=on but this kernel has no IORING_OP_SENDMSG_ZC; sends are copied";
  }
}

PeerLink::~PeerLink() {
  for (Inbound* m : active_) {
    if (m->buffer.data != nullptr && std::find(unexpected_.begin(), unexpected_.end(), m) == unexpected_.end()) {
      device_.buffers().put(m->buffer);
    }
  }
  for (Inbound* m : unexpected_) device_.buffers().put(m->buffer);
}

void PeerLink::start() {
  for (auto& s : sockets_) postStaging(*s);
}

// ---- sending ------------------------------------------------------------------------------

void PeerLink::postSend(RequestState& r) {
  if (gone_) return poisonGone();
  const Tuning& t = device_.tuning();
  size_t chunks = 1;
  if (r.length >= t.stripeMinBytes && sockets_.size() > 1) {
    chunks = std::max(sockets_.size(), (r.length + t.stripeChunkBytes - 1) / t.stripeChunkBytes);
  }
  size_t chunk = (r.length + chunks - 1) / chunks;
  chunk = (chunk + 4095) & ~size_t{4095};
  uint64_t id = nextSendId_++;
  size_t offset = 0;
  do {
    size_t len = std::min(chunk, r.length - offset);
    OutFrame* f = device_.frames().get();
    f->header = FrameHeader{kFrameMagic, static_cast<uint8_t>(FrameType::kData), 0, 0, id, r.tag, r.check,
                            r.length, offset, len};
    f->payload = r.data + offset;
    f->request = &r;
    sendQueue_.push_back(f);
    ++r.pendingFrames;
    offset += len;
  } while (offset < r.length);
  for (auto& s : sockets_) {
    if (!s->sendBusy) pump(*s);
    if (sendQueue_.empty()) break;
  }
}

void PeerLink::pump(SocketState& s) {
  if (s.sendBusy || !s.batch.empty() || s.down) return;
  size_t zcMin = device_.tuning().zeroCopyMinBytes;
  if (s.control != nullptr) {
    s.batch.push_back(s.control);
    s.control = nullptr;
  } else {
    if (device_.poisoned() || sendQueue_.empty()) return;
    size_t bytes = 0;
    while (!sendQueue_.empty() && s.batch.size() < kMaxBatchFrames) {
      OutFrame* f = sendQueue_.front();
      size_t len = f->header.length;
      if (!s.batch.empty() && (bytes + len > kMaxBatchBytes || (zeroCopy_ && len >= zcMin))) break;
      s.batch.push_back(f);
      sendQueue_.pop_front();
      bytes += len;
      if (zeroCopy_ && len >= zcMin) break;  // a zero-copy frame goes alone
    }
  }
  s.batchZc = zeroCopy_ && s.batch.size() == 1 && s.batch[0]->header.length >= zcMin;
  s.iov.clear();
  s.iovFirst = 0;
  s.batchBytes = 0;
  s.batchSent = 0;
  for (OutFrame* f : s.batch) {
    s.iov.push_back({&f->header, kHeader});
    if (f->header.length > 0) s.iov.push_back({const_cast<std::byte*>(f->payload), f->header.length});
    s.batchBytes += kHeader + f->header.length;
  }
  submitBatch(s);
}

void PeerLink::submitBatch(SocketState& s) {
  io_uring_sqe* sqe = device_.uring().sqe();
  if (sqe == nullptr) {
    device_.poisonIo(rank_, "io_uring refused a submission");
    return;
  }
  s.msg = msghdr{};
  s.msg.msg_iov = s.iov.data() + s.iovFirst;
  s.msg.msg_iovlen = s.iov.size() - s.iovFirst;
  if (s.batchZc) {
    io_uring_prep_sendmsg_zc(sqe, s.sock.fd(), &s.msg, MSG_WAITALL | MSG_NOSIGNAL);
    if (reportCopies_) sqe->ioprio |= IORING_SEND_ZC_REPORT_USAGE;
    io_uring_sqe_set_data64(sqe, packOp(OpKind::kSendZc, s.id, s.batch[0]->index));
  } else {
    io_uring_prep_sendmsg(sqe, s.sock.fd(), &s.msg, MSG_WAITALL | MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, packOp(OpKind::kSend, s.id, 0));
  }
  s.sendBusy = true;
  device_.markUrgent();
}

void PeerLink::finishBatch(SocketState& s, bool forget) {
  for (OutFrame* f : s.batch) {
    f->sent = true;
    if (forget) f->request = nullptr;
    if (f->notifs > 0) {
      awaitingNotif_.push_back(f);
    } else {
      releaseFrame(f);
    }
  }
  s.batch.clear();
}

void PeerLink::releaseFrame(OutFrame* f) {
  if (!f->sent || f->notifs > 0) return;
  if (RequestState* r = f->request; r != nullptr && --r->pendingFrames == 0) r->done = true;
  device_.frames().put(f);
}

void PeerLink::onSend(SocketState& s, const OpId& op, int res, uint32_t flags) {
  if (op.kind == OpKind::kSendZc && (flags & IORING_CQE_F_NOTIF)) {
    OutFrame* f = device_.frames().at(op.slot);
    if (reportCopies_ && zeroCopy_ && (static_cast<uint32_t>(res) & IORING_NOTIF_USAGE_ZC_COPIED)) {
      zeroCopy_ = false;
      RF_LOG(kDebug) << "zero-copy sends to rank " << rank_
                     << " were copied by the kernel anyway (loopback or a NIC without scatter-gather); "
                        "sending with copies from now on";
    }
    --notifs_;
    if (--f->notifs == 0 && f->sent) {
      awaitingNotif_.erase(std::find(awaitingNotif_.begin(), awaitingNotif_.end(), f));
      releaseFrame(f);
    }
    return;
  }
  if (op.kind == OpKind::kSendZc && (flags & IORING_CQE_F_MORE)) {
    ++device_.frames().at(op.slot)->notifs;
    ++notifs_;
  }
  s.sendBusy = false;
  if (res < 0) {
    if (s.batchZc && (res == -EINVAL || res == -EOPNOTSUPP) && s.batchSent == 0 && !device_.poisoned()) {
      zeroCopy_ = false;
      s.batchZc = false;
      RF_LOG(kDebug) << "zero-copy send refused (" << std::strerror(-res) << "); copying sends to rank " << rank_;
      submitBatch(s);
      return;
    }
    if (res == -ECANCELED || device_.poisoned()) {
      s.dirty = s.dirty || s.batchSent != 0;
      finishBatch(s, true);
      if (s.dirty) dropControl(s);
      pump(s);  // a queued ABORT may still go out on a clean stream
      return;
    }
    device_.poisonIo(rank_, "sending: " + connectionDownText(rank_, res, false, s.index, sockets_.size(), pid_,
                                                             hostUnreachable(res) && device_.monitor().othersUnacknowledged(rank_)));
    s.dirty = true;
    finishBatch(s, true);
    dropControl(s);
    return;
  }
  s.batchSent += static_cast<size_t>(res);
  bool isAbort = s.batch[0]->header.type == static_cast<uint8_t>(FrameType::kAbort);
  if (s.batchSent < s.batchBytes && device_.poisoned() && !isAbort) {
    s.dirty = true;  // the rest of this frame will never follow
    finishBatch(s, true);
    return;
  }
  if (s.batchSent < s.batchBytes) {  // short send: resume after what went out
    size_t skip = static_cast<size_t>(res);
    while (skip > 0) {
      iovec& v = s.iov[s.iovFirst];
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        ++s.iovFirst;
      } else {
        v.iov_base = static_cast<char*>(v.iov_base) + skip;
        v.iov_len -= skip;
        skip = 0;
      }
    }
    submitBatch(s);
    return;
  }
  finishBatch(s, false);
  pump(s);
}

void PeerLink::dropControl(SocketState& s) {
  if (s.control != nullptr) device_.frames().put(s.control);
  s.control = nullptr;
}

bool PeerLink::queueControl(SocketState& s, const FrameHeader& header, std::string text) {
  if (s.dirty || s.down || !s.sock.valid()) return false;
  if (s.control != nullptr) {
    if (s.control->header.type == static_cast<uint8_t>(FrameType::kAbort)) return false;  // an ABORT stays
    dropControl(s);  // an ABORT replaces a WAITING notice not sent yet
  }
  OutFrame* f = device_.frames().get();
  f->text = std::move(text);
  f->header = header;
  f->payload = reinterpret_cast<const std::byte*>(f->text.data());
  s.control = f;
  pump(s);
  return true;
}

void PeerLink::queueAbort(ErrorKind kind, const std::string& text) {
  std::string t = text.substr(0, kMaxAbortText);
  for (auto& s : sockets_) {
    queueControl(*s, FrameHeader{kFrameMagic, static_cast<uint8_t>(FrameType::kAbort), static_cast<uint8_t>(kind),
                                 0, 0, 0, 0, t.size(), 0, t.size()},
                 t);
  }
}

void PeerLink::queueWaiting(const liveness::Notice& n) {
  // Numbered by the monitor, and marked with the first message id isend will give out after it.
  const FrameHeader h{kFrameMagic, static_cast<uint8_t>(FrameType::kWaiting), 0, n.seq, nextSendId_,
                      n.waitedOn < 0 ? kNoRank : static_cast<uint64_t>(n.waitedOn), 0,
                      static_cast<uint64_t>(n.waited.count()),
                      static_cast<uint64_t>(std::max<int64_t>(n.silent.count(), 0)), 0};
  for (auto& s : sockets_) {
    if (queueControl(*s, h, {})) return;  // one socket is enough
  }
}

bool PeerLink::abortsPending() const {
  for (auto& s : sockets_) {
    if (s->down || s->dirty) continue;  // it will never go out
    if (s->control != nullptr && s->control->header.type == static_cast<uint8_t>(FrameType::kAbort)) return true;
    for (OutFrame* f : s->batch) {
      if (f->header.type == static_cast<uint8_t>(FrameType::kAbort)) return true;
    }
  }
  return false;
}

// ---- dispatch and failure -----------------------------------------------------------------

void PeerLink::onCompletion(uint32_t index, const OpId& op, int res, uint32_t flags) {
  SocketState& s = *sockets_[index];
  switch (op.kind) {
    case OpKind::kRecvStaging: onRecv(s, false, res); break;
    case OpKind::kRecvDirect: onRecv(s, true, res); break;
    case OpKind::kSend:
    case OpKind::kSendZc: onSend(s, op, res, flags); break;
    case OpKind::kCancel: break;
  }
}

void PeerLink::cancelAll() {
  for (auto& s : sockets_) {
    if (!s->sendBusy && !s->recvBusy) continue;
    io_uring_sqe* sqe = device_.uring().sqe();
    if (sqe == nullptr) return;
    io_uring_prep_cancel_fd(sqe, s->sock.fd(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, packOp(OpKind::kCancel, s->id, 0));
  }
}

bool PeerLink::busy(bool countNotifications) const {
  for (auto& s : sockets_) {
    if (s->sendBusy || s->recvBusy) return true;
  }
  return countNotifications && notifs_ > 0;
}

void PeerLink::shutdownSockets() {
  for (auto& s : sockets_) {
    if (s->sock.valid()) ::shutdown(s->sock.fd(), SHUT_RDWR);
    s->dirty = true;
  }
}

void PeerLink::closeSockets() {
  for (auto& s : sockets_) s->sock.reset();
}

void PeerLink::forgetRequests() {
  posted_.clear();
  for (Inbound* m : active_) {
    m->request = nullptr;
    m->dest = m->buffer.data;  // never a caller's region again
  }
  for (Inbound* m : unexpected_) m->request = nullptr;
  while (!sendQueue_.empty()) {
    device_.frames().put(sendQueue_.front());
    sendQueue_.pop_front();
  }
  for (auto& s : sockets_) {
    for (OutFrame* f : s->batch) f->request = nullptr;
  }
  for (OutFrame* f : awaitingNotif_) f->request = nullptr;
}

}  // namespace ringfold::transport::tcp_uring
