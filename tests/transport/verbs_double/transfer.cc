// The NIC thread's work on connections: a requester QP streams its WRs to the responder's NIC,
// which places the bytes, completes immediates, and acknowledges (see entry_points.cc).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "nic.h"

namespace vd {
namespace {

constexpr size_t kOutHighWater = 4u << 20;  // serialized but unsent bytes per connection
constexpr size_t kRecvChunk = 1u << 20;
constexpr auto kRnrNoticeEvery = std::chrono::milliseconds(50);

uint32_t packets(uint32_t length, uint32_t mtu) {
  return mtu == 0 || length == 0 ? 1 : (length + mtu - 1) / mtu;
}

bool isMapped(const uint8_t* gid) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid, kMapped, sizeof kMapped) == 0;
}

bool qpAccepts(const Qp* qp) {
  auto s = qp->qp.state;
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

// >0 bytes, 0 the peer closed (or an error), -1 nothing now.
ssize_t recvSome(int fd, void* buf, size_t len) {
  ssize_t r = recv(fd, buf, len, MSG_DONTWAIT);
  if (r > 0) return r;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
  return 0;
}

void compact(Conn* conn) {
  if (conn->outOff == conn->out.size()) {
    conn->out.clear();
    conn->outOff = 0;
  } else if (conn->outOff > (1u << 20)) {
    conn->out.erase(0, conn->outOff);
    conn->outOff = 0;
  }
}

void failHead(Qp* qp, ibv_wc_status status, bool fatal) {
  const SendWr& wr = qp->sq.front();
  ibv_wc wc{};
  wc.wr_id = wr.wrId;
  wc.status = status;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.qp_num = qp->qp.qp_num;
  wc.vendor_err = 0x80 + status;
  qp->sq.pop_front();
  if (qp->sent > 0) --qp->sent;
  pushCqe(qp->scq, wc);
  qpEnterError(qp);
  if (fatal) {
    ibv_async_event e{};
    e.element.qp = &qp->qp;
    e.event_type = IBV_EVENT_QP_FATAL;
    postAsync(qp->c, e);
  }
}

void connectOut(Nic* nic, Qp* qp, Clock::time_point now) {
  const ibv_ah_attr& ah = qp->attr.ah_attr;
  int node = -1;
  if (nic->ib)
    node = ah.dlid >= 1 && ah.dlid <= 0xbfff ? ah.dlid : -1;
  else if (ah.is_global)
    node = nodeOfGid(ah.grh.dgid.raw);
  if (!nic->portActive || node < 0) {
    qp->outVoid = true;
    return;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    qp->connectRetryAt = now + std::chrono::milliseconds(2);
    return;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  int n = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "verbs-double.%u.%u",
                        static_cast<unsigned>(getuid()), static_cast<unsigned>(node));
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    close(fd);
    if (err == EAGAIN || err == EINTR)
      qp->connectRetryAt = now + std::chrono::milliseconds(2);  // the listener's backlog is full
    else
      qp->outVoid = true;  // nobody has that GID / LID
    return;
  }
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  auto* conn = new Conn;
  conn->fd = fd;
  conn->requester = true;
  conn->qp = qp;
  conn->in = Conn::In::kReplies;
  WireHello h{};
  h.magic = kHelloMagic;
  h.dstQpn = qp->attr.dest_qp_num;
  h.srcQpn = qp->qp.qp_num;
  h.srcNode = nic->node;
  int sgid = ah.is_global ? ah.grh.sgid_index : 0;
  std::memcpy(h.sgid, nic->gids[sgid].raw, 16);
  std::memcpy(h.dgid, ah.grh.dgid.raw, 16);
  h.sgidType = nic->gidType[sgid];
  h.isGlobal = ah.is_global;
  h.dlid = ah.dlid;
  h.slid = nic->ib ? nic->node : 0;
  h.pathMtu = qp->attr.path_mtu;
  h.rnrRetry = qp->attr.rnr_retry;
  conn->out.append(reinterpret_cast<const char*>(&h), sizeof h);
  nic->conns.push_back(conn);
  qp->out = conn;
}

// Checks the WR's local keys and, when there is a connection, appends it to the stream.
bool serialize(Nic* nic, Qp* qp, const SendWr& wr) {
  std::vector<std::pair<const char*, size_t>> pieces;
  if (wr.isInline) {
    pieces.emplace_back(wr.inlined.data(), wr.inlined.size());
  } else {
    for (const ibv_sge& s : wr.sges) {
      if (s.length == 0) continue;
      auto it = nic->lkeys.find(s.lkey);
      if (it == nic->lkeys.end()) return false;
      const Mr* mr = it->second;
      if (mr->pd != qp->pd || s.addr < mr->iova || s.addr - mr->iova > mr->len || s.length > mr->len - (s.addr - mr->iova))
        return false;
      pieces.emplace_back(mr->ptr + (s.addr - mr->iova), s.length);
    }
  }
  Conn* conn = qp->out;
  if (!conn) return true;
  WireWrite w{};
  w.type = kMsgWrite;
  w.flags = (wr.withImm ? uint32_t(kFlagImm) : 0u) | (wr.solicited ? uint32_t(kFlagSolicited) : 0u);
  w.psn = wr.psn;
  w.length = wr.length;
  w.raddr = wr.raddr;
  w.rkey = wr.rkey;
  w.imm = wr.imm;
  conn->out.append(reinterpret_cast<const char*>(&w), sizeof w);
  for (auto& [p, n] : pieces) conn->out.append(p, n);
  return true;
}

void sendMore(Nic* nic, Qp* qp, Clock::time_point now, Clock::time_point& next) {
  if (qp->sent >= qp->sq.size()) return;
  if (!qp->out && !qp->outVoid) {
    if (now < qp->connectRetryAt) {
      next = std::min(next, qp->connectRetryAt);
      return;
    }
    connectOut(nic, qp, now);
    if (!qp->out && !qp->outVoid) {
      next = std::min(next, qp->connectRetryAt);
      return;
    }
  }
  while (qp->sent < qp->sq.size()) {
    SendWr& wr = qp->sq[qp->sent];
    if (wr.localError) break;
    if (qp->out && qp->out->out.size() - qp->out->outOff > kOutHighWater) break;
    // A path MTU above the link's: such packets are dropped on the way, retransmissions too.
    if (qp->attr.path_mtu > nic->mtu && wr.length > mtuBytes(nic->mtu) && qp->out) killConn(qp->out);
    wr.psn = qp->nextPsn;
    if (!serialize(nic, qp, wr)) {
      wr.localError = true;
      break;
    }
    qp->nextPsn = (qp->nextPsn + packets(wr.length, mtuBytes(qp->attr.path_mtu))) & 0xffffff;
    if (qp->sent == 0) qp->lastActivity = now;
    ++qp->sent;
  }
  if (qp->out) connWritable(qp->out);
}

void completeImm(Conn* conn) {
  Qp* qp = conn->qp;
  ibv_wc wc{};
  wc.wr_id = qp->rq.front();
  qp->rq.pop_front();
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  wc.byte_len = conn->cur.length;
  wc.imm_data = conn->cur.imm;
  wc.qp_num = qp->qp.qp_num;
  wc.src_qp = conn->hello.srcQpn;
  wc.wc_flags = IBV_WC_WITH_IMM | (conn->hello.isGlobal ? IBV_WC_GRH : 0);
  wc.slid = static_cast<uint16_t>(conn->hello.slid);
  wc.sl = qp->attr.ah_attr.sl;
  pushCqe(qp->rcq, wc, conn->cur.flags & kFlagSolicited);
}

void finishMessage(Conn* conn) {
  Qp* qp = conn->qp;
  const WireWrite& w = conn->cur;
  qp->expectedPsn = (w.psn + packets(w.length, mtuBytes(static_cast<ibv_mtu>(conn->hello.pathMtu)))) & 0xffffff;
  conn->in = Conn::In::kHeader;
  if (w.flags & kFlagImm) {
    if (qp->rq.empty()) {  // receiver not ready: hold it (RNR NAKs) until a receive is posted
      conn->in = Conn::In::kHeld;
      conn->heldSince = Clock::now();
      conn->nextRnrNotice = conn->heldSince;
      return;
    }
    completeImm(conn);
  }
  queueReply(conn, kReplyAck, w.psn, 0);
}

const Mr* writable(Nic* nic, const Qp* qp, uint32_t rkey, uint64_t addr, uint64_t len) {
  if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) return nullptr;
  auto it = nic->rkeys.find(rkey);
  if (it == nic->rkeys.end()) return nullptr;
  const Mr* mr = it->second;
  if (mr->pd != qp->pd || !(mr->access & IBV_ACCESS_REMOTE_WRITE)) return nullptr;
  if (addr < mr->iova || addr - mr->iova > mr->len || len > mr->len - (addr - mr->iova)) return nullptr;
  return mr;
}

void accessError(Conn* conn) {
  Qp* qp = conn->qp;
  queueReply(conn, kReplyNak, conn->cur.psn, IBV_WC_REM_ACCESS_ERR);
  std::erase(qp->in, conn);  // stays open to deliver the NAK; ignores what follows
  conn->qp = nullptr;
  conn->in = Conn::In::kDiscard;
  qpEnterError(qp);
  ibv_async_event e{};
  e.element.qp = &qp->qp;
  e.event_type = IBV_EVENT_QP_ACCESS_ERR;
  postAsync(qp->c, e);
}

bool acceptHello(Nic* nic, Conn* conn) {
  const WireHello& h = conn->hello;
  if (h.magic != kHelloMagic || !nic->portActive) return false;
  auto it = nic->qps.find(h.dstQpn);
  if (it == nic->qps.end() || it->second->qp.state == IBV_QPS_ERR) return false;
  if (nic->ib) {
    if (h.dlid != nic->node || (h.isGlobal && gidIndexOf(nic, h.dgid) < 0)) return false;
  } else {
    // The same GID value sits at a RoCE v1 and a v2 index: the packet's type must have one.
    if (!h.isGlobal || gidIndexOf(nic, h.dgid, static_cast<int>(h.sgidType)) < 0) return false;
    if (h.sgidType == IBV_GID_TYPE_ROCE_V2 && isMapped(h.sgid) != isMapped(h.dgid)) return false;
  }
  conn->qp = it->second;
  it->second->in.push_back(conn);
  conn->in = Conn::In::kHeader;
  return true;
}

void startMessage(Nic* nic, Conn* conn) {
  Qp* qp = conn->qp;
  const WireWrite& w = conn->cur;
  // A PSN out of sequence, or packets longer than this QP's path MTU: dropped, so the
  // requester's retries run out.
  bool tooLong = conn->hello.pathMtu > uint32_t(qp->attr.path_mtu) && w.length > mtuBytes(qp->attr.path_mtu);
  if (w.type != kMsgWrite || w.psn != qp->expectedPsn || tooLong) {
    killConn(conn);
    return;
  }
  if (w.length > 0 && !writable(nic, qp, w.rkey, w.raddr, w.length)) {
    accessError(conn);
    return;
  }
  conn->done = 0;
  if (w.length == 0)
    finishMessage(conn);
  else
    conn->in = Conn::In::kPayload;
}

void readResponder(Nic* nic, Conn* conn) {
  for (;;) {
    switch (conn->in) {
      case Conn::In::kHello:
      case Conn::In::kHeader: {
        bool hello = conn->in == Conn::In::kHello;
        if (!hello && !qpAccepts(conn->qp)) return;  // not in RTR yet: packets wait
        size_t need = hello ? sizeof(WireHello) : sizeof(WireWrite);
        ssize_t r = recvSome(conn->fd, conn->buf + conn->have, need - conn->have);
        if (r == 0) return killConn(conn);
        if (r < 0) return;
        conn->have += static_cast<size_t>(r);
        if (conn->have < need) continue;
        conn->have = 0;
        if (hello) {
          std::memcpy(&conn->hello, conn->buf, sizeof conn->hello);
          if (!acceptHello(nic, conn)) return killConn(conn);
        } else {
          std::memcpy(&conn->cur, conn->buf, sizeof conn->cur);
          startMessage(nic, conn);
          if (conn->dead) return;
        }
        continue;
      }
      case Conn::In::kPayload: {
        const WireWrite& w = conn->cur;
        const Mr* mr = writable(nic, conn->qp, w.rkey, w.raddr, w.length);
        if (!mr) return accessError(conn);  // deregistered while the write was landing
        char* dst = mr->ptr + (w.raddr - mr->iova) + conn->done;
        ssize_t r = recvSome(conn->fd, dst, std::min<uint64_t>(w.length - conn->done, kRecvChunk));
        if (r == 0) return killConn(conn);
        if (r < 0) return;
        conn->done += static_cast<uint64_t>(r);
        if (conn->done == w.length) finishMessage(conn);
        continue;
      }
      case Conn::In::kDiscard: {
        char scratch[65536];
        ssize_t r = recvSome(conn->fd, scratch, sizeof scratch);
        if (r == 0) return killConn(conn);
        if (r < 0) return;
        continue;
      }
      default:
        return;
    }
  }
}

void readReplies(Conn* conn) {
  for (;;) {
    ssize_t r = recvSome(conn->fd, conn->buf + conn->have, sizeof(WireReply) - conn->have);
    if (r == 0) return killConn(conn);
    if (r < 0) return;
    conn->have += static_cast<size_t>(r);
    if (conn->have < sizeof(WireReply)) continue;
    conn->have = 0;
    WireReply rep;
    std::memcpy(&rep, conn->buf, sizeof rep);
    Qp* qp = conn->qp;
    if (!qp) return killConn(conn);
    qp->lastActivity = Clock::now();
    if (rep.type == kReplyRnr) continue;
    if (qp->sent == 0 || qp->sq.front().psn != rep.psn) {
      std::fprintf(stderr, "verbs double: QP %u: reply for PSN %u out of order\n", qp->qp.qp_num, rep.psn);
      return killConn(conn);
    }
    if (rep.type == kReplyNak) return failHead(qp, static_cast<ibv_wc_status>(rep.status), false);
    SendWr wr = std::move(qp->sq.front());
    qp->sq.pop_front();
    --qp->sent;
    if (wr.signaled) {
      ibv_wc wc{};
      wc.wr_id = wr.wrId;
      wc.status = IBV_WC_SUCCESS;
      wc.opcode = IBV_WC_RDMA_WRITE;
      wc.byte_len = wr.length;
      wc.qp_num = qp->qp.qp_num;
      pushCqe(qp->scq, wc);
    }
  }
}

}  // namespace

void serviceQps(Nic* nic, Clock::time_point now, Clock::time_point& next) {
  for (auto& [num, qp] : nic->qps) {
    auto state = qp->qp.state;
    if (state == IBV_QPS_RTS) sendMore(nic, qp, now, next);
    if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) continue;
    if (qp->sent == 0 && !qp->sq.empty() && qp->sq.front().localError) {
      failHead(qp, IBV_WC_LOC_PROT_ERR, false);
      continue;
    }
    if (qp->sent > 0) {
      Clock::time_point deadline = qp->lastActivity + retryBudget(qp->attr);
      if (now >= deadline) {
        failHead(qp, IBV_WC_RETRY_EXC_ERR, true);
        continue;
      }
      next = std::min(next, deadline);
    }
    if (state == IBV_QPS_SQD && qp->sent == 0 && !qp->sqdNotified && qp->attr.en_sqd_async_notify) {
      qp->sqdNotified = true;
      ibv_async_event e{};
      e.element.qp = &qp->qp;
      e.event_type = IBV_EVENT_SQ_DRAINED;
      postAsync(qp->c, e);
    }
  }
}

void serviceConns(Nic* nic, Clock::time_point now, Clock::time_point& next) {
  for (Conn* conn : nic->conns) {
    if (conn->dead || conn->in != Conn::In::kHeld) continue;
    Qp* qp = conn->qp;
    if (!qp->rq.empty()) {
      completeImm(conn);
      queueReply(conn, kReplyAck, conn->cur.psn, 0);
      conn->in = Conn::In::kHeader;
      continue;
    }
    uint32_t retries = conn->hello.rnrRetry;
    Clock::time_point expiry = conn->heldSince + rnrDelay(qp->attr.min_rnr_timer) * retries;
    if (retries != 7 && now >= expiry) {
      queueReply(conn, kReplyNak, conn->cur.psn, IBV_WC_RNR_RETRY_EXC_ERR);
      conn->in = Conn::In::kDiscard;
      continue;
    }
    if (now >= conn->nextRnrNotice) {
      queueReply(conn, kReplyRnr, conn->cur.psn, 0);  // keeps the requester's retry timer quiet
      conn->nextRnrNotice = now + kRnrNoticeEvery;
    }
    next = std::min(next, conn->nextRnrNotice);
    if (retries != 7) next = std::min(next, expiry);
  }
}

void acceptConns(Nic* nic) {
  for (;;) {
    int fd = accept4(nic->listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (!nic->portActive) {
      close(fd);
      continue;
    }
    auto* conn = new Conn;
    conn->fd = fd;
    nic->conns.push_back(conn);
  }
}

bool connWantsInput(const Conn* conn) {
  switch (conn->in) {
    case Conn::In::kHeld:
      return false;
    case Conn::In::kHeader:
    case Conn::In::kPayload:
      return conn->qp && qpAccepts(conn->qp);
    default:
      return true;
  }
}

void connReadable(Nic* nic, Conn* conn, short revents) {
  if (conn->requester) return readReplies(conn);
  if (!connWantsInput(conn)) {
    if (revents & (POLLHUP | POLLERR)) killConn(conn);  // the requester is gone
    return;
  }
  readResponder(nic, conn);
}

void connWritable(Conn* conn) {
  while (conn->outOff < conn->out.size()) {
    ssize_t r = send(conn->fd, conn->out.data() + conn->outOff, conn->out.size() - conn->outOff,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      conn->outOff += static_cast<size_t>(r);
      if (conn->requester && conn->qp) conn->qp->lastActivity = Clock::now();  // the peer takes bytes
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    // The peer closed: first read what it said before (a NAK), then give up on the stream.
    if (conn->requester && conn->qp) readReplies(conn);
    killConn(conn);
    return;
  }
  compact(conn);
}

void queueReply(Conn* conn, uint32_t type, uint32_t psn, uint32_t status) {
  WireReply rep{type, psn, status, 0};
  conn->out.append(reinterpret_cast<const char*>(&rep), sizeof rep);
  connWritable(conn);
}

}  // namespace vd
