#include "transport/tcp_uring/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp_uring/device.h"
#include "transport/tcp_uring/liveness.h"
#include "transport/tcp_uring/ring_loop.h"

namespace ringfold::transport::tcp_uring {
namespace {

constexpr size_t kStagingBytes = 64 << 10;    // per socket; a small message lands in one recv
constexpr size_t kMaxBatchFrames = 32;        // frames per sendmsg
constexpr size_t kMaxBatchBytes = 256 << 10;  // payload bytes per batched sendmsg
// One recv op straight into a destination takes at most this much (MSG_WAITALL). Measured on
// loopback (tcp_uring_bench bw): 128 KiB gave 6.3 GB/s for 1 MiB messages and 4.9 GB/s for
// 64 MiB, against 4.5 and 3.2 GB/s with 4 MiB ops, and 4.9 GB/s (1 MiB) without MSG_WAITALL.
// Capping send ops the same way lost throughput, so a frame goes out in one sendmsg.
constexpr size_t kMaxDirectRecv = 128 << 10;
constexpr size_t kHeader = sizeof(FrameHeader);

}  // namespace

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

PeerLink::PeerLink(Engine& engine, int peerRank, std::vector<Socket> sockets, uint32_t firstSocketId)
    : engine_(engine), rank_(peerRank), lastHeard_(std::chrono::steady_clock::now()) {
  for (size_t i = 0; i < sockets.size(); ++i) {
    auto s = std::make_unique<SocketState>();
    s->sock = std::move(sockets[i]);
    s->id = firstSocketId + static_cast<uint32_t>(i);
    s->index = static_cast<uint32_t>(i);
    sockets_.push_back(std::move(s));
  }
  const Tuning& t = engine.tuning();
  overUnix_ = !sockets_.empty() && isUnixSocket(sockets_[0]->sock.fd());
  zeroCopy_ = t.zeroCopy != ZeroCopyMode::kOff && !overUnix_ && engine.ring().supportsOp(IORING_OP_SENDMSG_ZC);
  reportCopies_ = t.zeroCopy == ZeroCopyMode::kAuto;
  if (t.zeroCopy == ZeroCopyMode::kOn && !zeroCopy_ && !overUnix_) {
    RF_LOG(kWarning) << "RINGFOLD_ZEROCOPY=on but this kernel has no IORING_OP_SENDMSG_ZC; sends are copied";
  }
}

PeerLink::~PeerLink() {
  for (Inbound* m : active_) {
    if (m->buffer.data != nullptr && std::find(unexpected_.begin(), unexpected_.end(), m) == unexpected_.end()) {
      engine_.buffers().put(m->buffer);
    }
  }
  for (Inbound* m : unexpected_) engine_.buffers().put(m->buffer);
}

void PeerLink::start() {
  for (auto& s : sockets_) postStaging(*s);
}

// ---- sending ------------------------------------------------------------------------------

void PeerLink::postSend(RequestState& r) {
  if (gone_) return poisonGone();
  const Tuning& t = engine_.tuning();
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
    OutFrame* f = engine_.frames().get();
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
  size_t zcMin = engine_.tuning().zeroCopyMinBytes;
  if (s.control != nullptr) {
    s.batch.push_back(s.control);
    s.control = nullptr;
  } else {
    if (engine_.poisoned() || sendQueue_.empty()) return;
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
  io_uring_sqe* sqe = engine_.ring().sqe();
  if (sqe == nullptr) {
    engine_.poisonIo(rank_, "io_uring refused a submission");
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
  engine_.markUrgent();
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
  engine_.frames().put(f);
}

void PeerLink::onSend(SocketState& s, const OpId& op, int res, uint32_t flags) {
  if (op.kind == OpKind::kSendZc && (flags & IORING_CQE_F_NOTIF)) {
    OutFrame* f = engine_.frames().at(op.slot);
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
    ++engine_.frames().at(op.slot)->notifs;
    ++notifs_;
  }
  s.sendBusy = false;
  if (res < 0) {
    if (s.batchZc && (res == -EINVAL || res == -EOPNOTSUPP) && s.batchSent == 0 && !engine_.poisoned()) {
      zeroCopy_ = false;
      s.batchZc = false;
      RF_LOG(kDebug) << "zero-copy send refused (" << std::strerror(-res) << "); copying sends to rank " << rank_;
      submitBatch(s);
      return;
    }
    if (res == -ECANCELED || engine_.poisoned()) {
      s.dirty = s.dirty || s.batchSent != 0;
      finishBatch(s, true);
      if (s.dirty) dropControl(s);
      pump(s);  // a queued ABORT may still go out on a clean stream
      return;
    }
    engine_.poisonIo(rank_, "sending: " + connectionDownText(rank_, res, false, s.index, sockets_.size(), pid_,
                                                             hostUnreachable(res) && engine_.othersUnacknowledged(*this)));
    s.dirty = true;
    finishBatch(s, true);
    dropControl(s);
    return;
  }
  s.batchSent += static_cast<size_t>(res);
  bool isAbort = s.batch[0]->header.type == static_cast<uint8_t>(FrameType::kAbort);
  if (s.batchSent < s.batchBytes && engine_.poisoned() && !isAbort) {
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
  if (s.control != nullptr) engine_.frames().put(s.control);
  s.control = nullptr;
}

bool PeerLink::queueControl(SocketState& s, const FrameHeader& header, std::string text) {
  if (s.dirty || s.down || !s.sock.valid()) return false;
  if (s.control != nullptr) {
    if (s.control->header.type == static_cast<uint8_t>(FrameType::kAbort)) return false;  // an ABORT stays
    dropControl(s);  // an ABORT replaces a WAITING notice not sent yet
  }
  OutFrame* f = engine_.frames().get();
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

void PeerLink::queueWaiting(int waitedOn, std::chrono::milliseconds waited, std::chrono::milliseconds silent) {
  // Numbered, and marked with the first message id isend will give out after it (frame.h).
  const FrameHeader h{kFrameMagic, static_cast<uint8_t>(FrameType::kWaiting), 0, ++waitingSent_, nextSendId_,
                      waitedOn < 0 ? kNoRank : static_cast<uint64_t>(waitedOn), 0,
                      static_cast<uint64_t>(waited.count()), static_cast<uint64_t>(std::max<int64_t>(silent.count(), 0)),
                      0};
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

// ---- receiving ----------------------------------------------------------------------------

void PeerLink::postStaging(SocketState& s) {
  if (engine_.poisoned() || s.recvBusy) return;
  io_uring_sqe* sqe = engine_.ring().sqe();
  if (sqe == nullptr) {
    engine_.poisonIo(rank_, "io_uring refused a submission");
    return;
  }
  // After a large frame the next one is likely large too: read only its header, so that its
  // payload lands in place instead of passing through staging (a copy of up to 64 KiB a frame,
  // measured at ~5% of the CPU of a 2-rank 16 MiB allreduce on loopback). A small frame then
  // costs one more recv, which only happens while large frames stream.
  const size_t want = s.headerOnly && s.end == 0 ? kHeader : kStagingBytes - s.end;
  s.headerOnly = false;
  io_uring_prep_recv(sqe, s.sock.fd(), s.staging.get() + s.end, want, 0);
  io_uring_sqe_set_data64(sqe, packOp(OpKind::kRecvStaging, s.id, 0));
  s.recvBusy = true;
  // After whole small frames, re-arming can wait for the next submit (the caller's next isend
  // or wait), which saves a syscall on the latency path. Mid-stream it goes out at once.
  if (s.end > 0 || s.afterDirect) engine_.markUrgent();
  s.afterDirect = false;
}

void PeerLink::postDirect(SocketState& s) {
  io_uring_sqe* sqe = engine_.ring().sqe();
  if (sqe == nullptr) {
    engine_.poisonIo(rank_, "io_uring refused a submission");
    return;
  }
  size_t len = std::min(s.directLeft, kMaxDirectRecv);
  s.directBase = s.direct->dest;
  io_uring_prep_recv(sqe, s.sock.fd(), s.directBase + s.directOffset, len, MSG_WAITALL);
  io_uring_sqe_set_data64(sqe, packOp(OpKind::kRecvDirect, s.id, 0));
  s.recvBusy = true;
  engine_.markUrgent();
}

void PeerLink::onRecv(SocketState& s, bool direct, int res) {
  s.recvBusy = false;
  if (engine_.poisoned() || res == -ECANCELED) return;
  if (res <= 0) {
    onSocketDown(s, res);
    return;
  }
  lastHeard_ = std::chrono::steady_clock::now();
  heardAny_ = true;
  if (!direct) {
    s.end += static_cast<size_t>(res);
    parse(s);
  } else {
    Inbound* m = s.direct;
    landed(m, s.directBase, s.directOffset, static_cast<size_t>(res));
    s.directOffset += static_cast<size_t>(res);
    s.directLeft -= static_cast<size_t>(res);
    if (s.directLeft > 0) {
      postDirect(s);
      return;
    }
    s.direct = nullptr;
    s.afterDirect = true;
    finishIfComplete(m);
    parse(s);  // staging is empty: this posts the next staging recv
  }
  if (stalledAny_) resumeStalled();
}

// The peer closed or reset socket `s`. A peer that finished and exited closes every socket
// after its last byte, which is no failure unless something here still waits on it: the link is
// `gone` once every socket is closed (or one is reset), and only then do pending requests, or
// later ones that no buffered message satisfies, fail.
void PeerLink::onSocketDown(SocketState& s, int res) {
  s.down = true;
  bool midFrame = s.direct != nullptr || s.begin != s.end || s.stalled;
  if (downRes_ == 1) {  // the first: what the error will say (poisonGone())
    downRes_ = res;
    downSocket_ = s.index;
    downMidFrame_ = midFrame;
  }
  bool all = std::all_of(sockets_.begin(), sockets_.end(), [](auto& x) { return x->down; });
  if (res < 0 || all || midFrame) gone_ = true;
  if (midFrame || (gone_ && hasPendingWork())) poisonGone();
}

// Built when a request fails, not when a socket closes: a peer that finished closes its sockets
// at every job's end, and looking its process up may take a moment (liveness.h). Not built at
// all once the engine has failed: poisonIo would drop it (the first error stands).
void PeerLink::poisonGone() {
  if (engine_.poisoned()) return;
  const int res = downRes_ == 1 ? 0 : downRes_;
  engine_.poisonIo(rank_, connectionDownText(rank_, res, downMidFrame_, downSocket_, sockets_.size(), pid_,
                                             hostUnreachable(res) && engine_.othersUnacknowledged(*this)));
}

PeerLink::Unacknowledged PeerLink::unacknowledged() const {
  Unacknowledged out;
  for (auto& s : sockets_) {
    if (!s->sock.valid()) continue;
    const TcpSilence t = tcpSilence(s->sock.fd());
    if (!t.unacknowledged) continue;
    out.any = true;
    out.retransmits = std::max(out.retransmits, t.retransmits);
    out.sinceAck = std::max(out.sinceAck, std::chrono::milliseconds(t.sinceAckMs));
  }
  return out;
}

bool PeerLink::hasPendingWork() const {
  if (!posted_.empty() || !sendQueue_.empty()) return true;
  for (Inbound* m : active_) {
    if (m->request != nullptr) return true;
  }
  for (auto& s : sockets_) {
    for (OutFrame* f : s->batch) {
      if (f->request != nullptr) return true;
    }
  }
  return false;
}

void PeerLink::protocolError(const SocketState& s, const std::string& what) {
  engine_.poisonIo(rank_, detail::concat("protocol error on the connection to rank ", rank_, " (socket ", s.index,
                                        "): ", what, "; is rank ", rank_, " running the same ringfold version?"));
}

void PeerLink::parse(SocketState& s) {
  s.stalled = false;
  while (!engine_.poisoned()) {
    size_t avail = s.end - s.begin;
    if (avail < kHeader) break;
    FrameHeader h;
    std::memcpy(&h, s.staging.get() + s.begin, kHeader);
    if (h.magic != kFrameMagic) return protocolError(s, "bad frame magic");
    if (h.type == static_cast<uint8_t>(FrameType::kAbort)) {
      if (h.length > kMaxAbortText) return protocolError(s, "oversized ABORT frame");
      if (avail < kHeader + h.length) break;
      std::string text(reinterpret_cast<const char*>(s.staging.get() + s.begin + kHeader), h.length);
      s.begin += kHeader + h.length;
      engine_.onPeerAbort(rank_, static_cast<ErrorKind>(h.kind), text);
      return;
    }
    if (h.type == static_cast<uint8_t>(FrameType::kWaiting)) {
      if (h.length != 0) return protocolError(s, "WAITING frame with a payload");
      s.begin += kHeader;
      if (h.seq <= waitingSeen_) continue;  // overtaken on another socket by a later one
      waitingSeen_ = h.seq;
      waiting_ = {};
      if (h.tag != kNoRank) {
        waiting_ = {static_cast<int>(h.tag), std::chrono::milliseconds(h.total), std::chrono::milliseconds(h.offset),
                    std::chrono::steady_clock::now(), h.msgId};
      }
      continue;
    }
    if (h.type != static_cast<uint8_t>(FrameType::kData)) return protocolError(s, "unknown frame type");
    // A message the peer sent after its notice: it got past that wait.
    if (waiting_.waitedOn >= 0 && h.msgId >= waiting_.firstLaterMessage) waiting_ = {};
    if (h.length > h.total || h.offset > h.total - h.length) return protocolError(s, "chunk outside its message");
    Inbound* m;
    if (h.msgId < nextResolve_) {
      m = findActive(h.msgId);
      if (m == nullptr) return protocolError(s, "chunk of a message that is already complete");
    } else if (h.msgId == nextResolve_) {
      m = resolve(h);
      if (m == nullptr) return;  // mismatch: poisoned
    } else {
      s.stalled = true;  // an earlier message's first header is still on another socket
      stalledAny_ = true;
      return;
    }
    size_t take = std::min<size_t>(h.length, avail - kHeader);
    if (take > 0) {
      std::memcpy(m->dest + h.offset, s.staging.get() + s.begin + kHeader, take);
      landed(m, m->dest, h.offset, take);
    }
    s.begin += kHeader + take;
    if (take < h.length) {  // the rest goes straight to its destination
      s.begin = s.end = 0;
      s.direct = m;
      s.directOffset = h.offset + take;
      s.directLeft = h.length - take;
      s.headerOnly = h.length >= kStagingBytes;
      postDirect(s);
      return;
    }
    finishIfComplete(m);
  }
  if (engine_.poisoned()) return;
  if (s.begin > 0) {
    std::memmove(s.staging.get(), s.staging.get() + s.begin, s.end - s.begin);
    s.end -= s.begin;
    s.begin = 0;
  }
  postStaging(s);
}

void PeerLink::resumeStalled() {
  for (bool again = true; again && !engine_.poisoned();) {
    again = false;
    stalledAny_ = false;
    uint64_t before = nextResolve_;
    for (auto& s : sockets_) {
      if (s->stalled) parse(*s);
    }
    again = stalledAny_ && nextResolve_ != before;
  }
}

Inbound* PeerLink::findActive(uint64_t msgId) {
  for (Inbound* m : active_) {
    if (m->msgId == msgId) return m;
  }
  return nullptr;
}

Inbound* PeerLink::resolve(const FrameHeader& h) {
  ++nextResolve_;
  Inbound* m = engine_.inbounds().get();
  m->msgId = h.msgId;
  m->tag = h.tag;
  m->check = h.check;
  m->total = h.total;
  auto it = std::find_if(posted_.begin(), posted_.end(), [&](RequestState* r) { return r->tag == h.tag; });
  if (it != posted_.end()) {
    RequestState* r = *it;
    posted_.erase(it);
    if (r->length != h.total || r->check != h.check) {
      engine_.inbounds().put(m);
      engine_.poison(std::make_exception_ptr(CheckMismatch(rank_, h.tag, r->length, h.total, r->check, h.check)));
      return nullptr;
    }
    m->request = r;
    m->dest = r->data;
  } else {
    m->buffer = engine_.buffers().get(h.total);
    m->dest = m->buffer.data;
    unexpected_.push_back(m);
  }
  active_.push_back(m);
  return m;
}

// `len` bytes at `offset` were written at base + offset. Bytes that went into the unexpected
// buffer after a receive took the message over are moved on; those that went there before are
// remembered for the takeover.
void PeerLink::landed(Inbound* m, std::byte* base, size_t offset, size_t len) {
  m->received += len;
  if (base == m->dest) {
    if (m->request != nullptr || base == nullptr) return;
    if (!m->spans.empty() && m->spans.back().first + m->spans.back().second == offset) {
      m->spans.back().second += len;
    } else {
      m->spans.emplace_back(offset, len);
    }
  } else {
    std::memcpy(m->dest + offset, base + offset, len);
  }
}

void PeerLink::finishIfComplete(Inbound* m) {
  if (m->received != m->total) return;
  active_.erase(std::find(active_.begin(), active_.end(), m));
  RequestState* r = m->request;
  if (r == nullptr) return;  // unexpected: waits in unexpected_ for its receive
  engine_.buffers().put(m->buffer);
  r->done = true;
  engine_.inbounds().put(m);
}

void PeerLink::postRecv(RequestState& r) {
  auto it = std::find_if(unexpected_.begin(), unexpected_.end(), [&](Inbound* m) { return m->tag == r.tag; });
  if (it == unexpected_.end()) {
    if (gone_) return poisonGone();
    posted_.push_back(&r);
    return;
  }
  Inbound* m = *it;
  unexpected_.erase(it);
  if (r.length != m->total || r.check != m->check) {
    engine_.poison(std::make_exception_ptr(CheckMismatch(rank_, m->tag, r.length, m->total, r.check, m->check)));
    unexpected_.push_front(m);  // still owned here; freed with the link
    return;
  }
  m->request = &r;
  if (m->received == m->total) {
    if (m->total > 0) std::memcpy(r.data, m->buffer.data, m->total);
    engine_.buffers().put(m->buffer);
    engine_.inbounds().put(m);
    r.done = true;
    return;
  }
  // Still arriving: take it over. The buffer stays until the message completes, since a recv
  // already in flight may still write there (landed() moves those bytes on).
  for (auto [offset, len] : m->spans) std::memcpy(r.data + offset, m->buffer.data + offset, len);
  m->spans.clear();
  m->dest = r.data;
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
    io_uring_sqe* sqe = engine_.ring().sqe();
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
    engine_.frames().put(sendQueue_.front());
    sendQueue_.pop_front();
  }
  for (auto& s : sockets_) {
    for (OutFrame* f : s->batch) f->request = nullptr;
  }
  for (OutFrame* f : awaitingNotif_) f->request = nullptr;
}

}  // namespace ringfold::transport::tcp_uring
