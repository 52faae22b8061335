// PeerLink (peer_link.h): receiving, parsing and matching.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp_uring/device_state.h"
#include "transport/tcp_uring/kernel_view.h"
#include "transport/tcp_uring/peer_link.h"
#include "transport/tcp_uring/peer_link_socket.h"
#include "transport/tcp_uring/uring_loop.h"

namespace ringfold::transport::tcp_uring {

// ---- receiving ----------------------------------------------------------------------------

void PeerLink::postStaging(SocketState& s) {
  if (device_.poisoned() || s.recvBusy) return;
  io_uring_sqe* sqe = device_.uring().sqe();
  if (sqe == nullptr) {
    device_.poisonIo(rank_, "io_uring refused a submission");
    return;
  }
  // After a large frame the next one is likely large too: read only its header, so that its
  // payload lands in place instead of passing through staging (a copy of up to 64 KiB a frame;
  // its cost is in docs/performance.md). A small frame then
  // costs one more recv, which only happens while large frames stream.
  const size_t want = s.headerOnly && s.end == 0 ? kHeader : kStagingBytes - s.end;
  s.headerOnly = false;
  io_uring_prep_recv(sqe, s.sock.fd(), s.staging.get() + s.end, want, 0);
  io_uring_sqe_set_data64(sqe, packOp(OpKind::kRecvStaging, s.id, 0));
  s.recvBusy = true;
  // After whole small frames, re-arming can wait for the next submit (the caller's next isend
  // or wait), which saves a syscall on the latency path. Mid-stream it goes out at once.
  if (s.end > 0 || s.afterDirect) device_.markUrgent();
  s.afterDirect = false;
}

void PeerLink::postDirect(SocketState& s) {
  io_uring_sqe* sqe = device_.uring().sqe();
  if (sqe == nullptr) {
    device_.poisonIo(rank_, "io_uring refused a submission");
    return;
  }
  size_t len = std::min(s.directLeft, kMaxDirectRecv);
  s.directBase = s.direct->dest;
  io_uring_prep_recv(sqe, s.sock.fd(), s.directBase + s.directOffset, len, MSG_WAITALL);
  io_uring_sqe_set_data64(sqe, packOp(OpKind::kRecvDirect, s.id, 0));
  s.recvBusy = true;
  device_.markUrgent();
}

void PeerLink::onRecv(SocketState& s, bool direct, int res) {
  s.recvBusy = false;
  if (device_.poisoned() || res == -ECANCELED) return;
  if (res <= 0) {
    onSocketDown(s, res);
    return;
  }
  device_.monitor().heard(rank_);
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
  // A socket stalled on a later message waits for an earlier header that only another open
  // socket can bring; once it is the last one open, it waits forever (and, no longer reading,
  // never sees its own end): that is a frame cut off too. (Found by tests/fuzz/tcp_frames_fuzz.)
  const auto open = std::count_if(sockets_.begin(), sockets_.end(), [](auto& x) { return !x->down; });
  const bool stranded = open == 1 && std::any_of(sockets_.begin(), sockets_.end(),
                                                 [](auto& x) { return !x->down && x->stalled; });
  bool midFrame = s.direct != nullptr || s.begin != s.end || s.stalled || stranded;
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
// at every job's end, and looking its process up may take a moment (kernel_view.h). Not built at
// all once the device has failed: poisonIo would drop it (the first error stands).
void PeerLink::poisonGone() {
  if (device_.poisoned()) return;
  const int res = downRes_ == 1 ? 0 : downRes_;
  device_.poisonIo(rank_, connectionDownText(rank_, res, downMidFrame_, downSocket_, sockets_.size(), pid_,
                                             hostUnreachable(res) && device_.monitor().othersUnacknowledged(rank_)));
}

liveness::Unacknowledged PeerLink::unacknowledged() const {
  liveness::Unacknowledged out;
  for (auto& s : sockets_) {
    if (!s->sock.valid()) continue;
    const TcpSilence t = tcpSilence(s->sock.fd());
    out.tracked = out.tracked || t.tracked;
    if (!t.unacknowledged) continue;
    out.any = true;
    out.unsent = out.unsent || t.unsent;
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
  device_.poisonIo(rank_, detail::concat("protocol error on the connection to rank ", rank_, " (socket ", s.index,
                                        "): ", what, "; is rank ", rank_, " running the same ringfold version?"));
}

void PeerLink::parse(SocketState& s) {
  s.stalled = false;
  while (!device_.poisoned()) {
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
      device_.onPeerAbort(rank_, static_cast<ErrorKind>(h.kind), text);
      return;
    }
    if (h.type == static_cast<uint8_t>(FrameType::kWaiting)) {
      if (h.length != 0) return protocolError(s, "WAITING frame with a payload");
      s.begin += kHeader;
      liveness::Notice n;
      n.seq = h.seq;
      n.waitedOn = h.tag == kNoRank ? -1 : static_cast<int>(h.tag);
      n.waited = std::chrono::milliseconds(h.total);
      n.silent = std::chrono::milliseconds(h.offset);
      n.firstLaterMessage = h.msgId;
      device_.monitor().onNotice(rank_, n);
      continue;
    }
    if (h.type != static_cast<uint8_t>(FrameType::kData)) return protocolError(s, "unknown frame type");
    // A message the peer sent after its notice: it got past that wait.
    device_.monitor().onMessage(rank_, h.msgId);
    if (h.length > h.total || h.offset > h.total - h.length) return protocolError(s, "chunk outside its message");
    Inbound* m;
    if (h.msgId < nextResolve_) {
      m = findActive(h.msgId);
      if (m == nullptr) return protocolError(s, "chunk of a message that is already complete");
      // The chunk was checked against its own header's total: it must be its message's (found by
      // tests/fuzz/tcp_frames_fuzz: a later chunk claiming a larger total wrote past the buffer).
      if (h.total != m->total || h.tag != m->tag || h.check != m->check) {
        return protocolError(s, detail::concat("a chunk of message ", h.msgId, " says ", h.total, " bytes with tag ",
                                               h.tag, ", its first chunk said ", m->total, " bytes with tag ", m->tag));
      }
    } else if (h.msgId == nextResolve_) {
      m = resolve(h);
      if (m == nullptr) return;  // mismatch, or no memory for it: poisoned
    } else if (std::none_of(sockets_.begin(), sockets_.end(), [&](auto& x) { return x.get() != &s && !x->down; })) {
      // No other open socket can bring the earlier message's first header (found by
      // tests/fuzz/tcp_frames_fuzz: the link waited forever, no longer reading this socket).
      return protocolError(s, detail::concat("a chunk of message ", h.msgId, " before message ", nextResolve_,
                                             "'s first header, with no other socket to bring it"));
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
  if (device_.poisoned()) return;
  if (s.begin > 0) {
    std::memmove(s.staging.get(), s.staging.get() + s.begin, s.end - s.begin);
    s.end -= s.begin;
    s.begin = 0;
  }
  postStaging(s);
}

void PeerLink::resumeStalled() {
  for (bool again = true; again && !device_.poisoned();) {
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

// Whether receive `r` takes a message of `total` bytes with `check`; an upTo receive that does
// takes the message's size as its length.
static bool accepts(RequestState& r, size_t total, uint64_t check) {
  if (r.check != check || (r.upTo ? total > r.length : total != r.length)) return false;
  r.length = total;
  return true;
}

Inbound* PeerLink::resolve(const FrameHeader& h) {
  ++nextResolve_;
  Inbound* m = device_.inbounds().get();
  m->msgId = h.msgId;
  m->tag = h.tag;
  m->check = h.check;
  m->total = h.total;
  auto it = std::find_if(posted_.begin(), posted_.end(), [&](RequestState* r) { return r->tag == h.tag; });
  if (it != posted_.end()) {
    RequestState* r = *it;
    posted_.erase(it);
    if (!accepts(*r, h.total, h.check)) {
      device_.inbounds().put(m);
      device_.poison(std::make_exception_ptr(CheckMismatch(rank_, h.tag, r->length, h.total, r->check, h.check)));
      return nullptr;
    }
    m->request = r;
    m->dest = r->data;
  } else {
    // Buffered until its receive comes: a size no memory here can hold fails the link, with the
    // size in the message, instead of the process (found by tests/fuzz/tcp_frames_fuzz: a
    // corrupt or hostile header asked for 32 GiB on a 24 GiB machine).
    try {
      m->buffer = device_.buffers().get(h.total);
    } catch (const std::bad_alloc&) {
      device_.inbounds().put(m);
      device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a message of ", h.total,
                                             " bytes before this rank posted its receive, and there is no memory "
                                             "to hold it until then (this host has ", hostMemoryBytes(), " bytes)"));
      return nullptr;
    }
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
  device_.buffers().put(m->buffer);
  r->done = true;
  device_.inbounds().put(m);
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
  if (!accepts(r, m->total, m->check)) {
    device_.poison(std::make_exception_ptr(CheckMismatch(rank_, m->tag, r.length, m->total, r.check, m->check)));
    unexpected_.push_front(m);  // still owned here; freed with the link
    return;
  }
  m->request = &r;
  if (m->received == m->total) {
    if (m->total > 0) std::memcpy(r.data, m->buffer.data, m->total);
    device_.buffers().put(m->buffer);
    device_.inbounds().put(m);
    r.done = true;
    return;
  }
  // Still arriving: take it over. The buffer stays until the message completes, since a recv
  // already in flight may still write there (landed() moves those bytes on).
  for (auto [offset, len] : m->spans) std::memcpy(r.data + offset, m->buffer.data + offset, len);
  m->spans.clear();
  m->dest = r.data;
}

}  // namespace ringfold::transport::tcp_uring
