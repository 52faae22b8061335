// The emulated NIC of one process for one device, the connections between NICs and their wire
// format, and the functions the entry points and the NIC thread share. Everything marked "under
// nic->mu" expects the caller to hold that NIC's mutex.
#pragma once

#include <mutex>
#include <thread>
#include <unordered_map>

#include "objects.h"

namespace vd {

// Wire format between two NICs (one stream per requester QP; host byte order, same machine).
enum : uint32_t { kHelloMagic = 0x76644831, kMsgWrite = 1, kReplyAck = 2, kReplyNak = 3, kReplyRnr = 4 };
enum : uint32_t { kFlagImm = 1, kFlagSolicited = 2 };
struct WireHello {
  uint32_t magic, dstQpn, srcQpn, srcNode;
  uint8_t sgid[16], dgid[16];
  uint32_t sgidType, isGlobal, dlid, slid, pathMtu, rnrRetry;
};
struct WireWrite {
  uint32_t type, flags, psn, length;
  uint64_t raddr;
  uint32_t rkey, imm;
};
struct WireReply {
  uint32_t type, psn, status, pad;
};

struct Conn {
  int fd = -1;
  bool requester = false;
  Qp* qp = nullptr;  // requester: its QP; responder: the QP written into (after the hello)
  bool dead = false;  // closed and freed by the NIC thread
  std::string out;
  size_t outOff = 0;
  enum class In { kHello, kHeader, kPayload, kHeld, kDiscard, kReplies } in = In::kHello;
  char buf[sizeof(WireHello)];
  size_t have = 0;
  WireHello hello{};
  WireWrite cur{};
  uint64_t done = 0;  // payload bytes placed
  Clock::time_point heldSince{}, nextRnrNotice{};
};

struct Nic {
  Device* dev = nullptr;
  int refs = 0;
  uint16_t node = 0;  // unique among live NICs on this machine; also the LID
  int listenFd = -1;
  int wakeFd = -1;
  std::thread thread;
  bool stop = false;
  std::mutex mu;
  bool ib = false;
  ibv_mtu mtu = IBV_MTU_1024;
  bool portActive = true;
  bool portDownPending = false;
  Clock::time_point portDownAt{};
  uint64_t guid = 0;
  int gidLen = 0;
  ibv_gid gids[kGidTableLenEth]{};
  uint32_t gidType[kGidTableLenEth]{};
  bool gidValid[kGidTableLenEth]{};
  std::unordered_map<uint32_t, Qp*> qps;
  std::unordered_map<uint32_t, Mr*> lkeys, rkeys;
  uint32_t nextQpn = 0, nextKey = 0;
  std::vector<Conn*> conns;
  std::vector<Context*> contexts;
};

// nic.cc
Nic* nicAcquire(Device* dev);  // this process's NIC for dev (started on first use)
void nicRelease(Nic* nic);     // the last release stops its thread and frees it
int nicPortDownNow();          // every started NIC of this process: its port goes down now; how many
void nicWake(Nic* nic);
void pushCqe(Cq* cq, const ibv_wc& wc, bool solicited = false);  // under nic->mu
void postAsync(Context* c, ibv_async_event event);                  // under nic->mu
void qpEnterError(Qp* qp);  // flushes both queues, drops connections (under nic->mu)
void qpDropTraffic(Qp* qp);  // RESET / destroy: forget queues and connections (under nic->mu)
void killConn(Conn* conn);   // detach from its QP; the NIC thread closes it
int gidIndexOf(const Nic* nic, const uint8_t* gid, int type = -1);  // -1 when not in the table
int nodeOfGid(const uint8_t* gid);                   // -1 when not a double's GID
std::chrono::nanoseconds retryBudget(const ibv_qp_attr& attr);
std::chrono::nanoseconds rnrDelay(uint8_t minRnrTimer);

// transfer.cc: the NIC thread's work on connections (all under nic->mu)
void serviceQps(Nic* nic, Clock::time_point now, Clock::time_point& next);
void serviceConns(Nic* nic, Clock::time_point now, Clock::time_point& next);
void acceptConns(Nic* nic);
bool connWantsInput(const Conn* conn);
void connReadable(Nic* nic, Conn* conn, short revents);
void connWritable(Conn* conn);
void queueReply(Conn* conn, uint32_t type, uint32_t psn, uint32_t status);

// qp.cc
int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
void destroyQpLocked(Qp* qp);

// events.cc: the context ops behind ibv_poll_cq / ibv_req_notify_cq
int pollCq(ibv_cq* cq, int n, ibv_wc* wc);
int reqNotifyCq(ibv_cq* cq, int solicitedOnly);

// entry_points.cc
uint32_t mtuBytes(ibv_mtu mtu);  // bytes of an IBV_MTU_* code, 0 for an invalid one

inline Context* contextOf(ibv_context* ctx) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) - offsetof(verbs_context, context));
}
inline Nic* nicOf(ibv_context* ctx) { return contextOf(ctx)->nic; }

}  // namespace vd
