// The verbs objects of the libibverbs.so.1 test double (the whole picture and the environment
// knobs are described at the top of entry_points.cc).
//
// Every verbs object is a struct whose first member is the rdma-core struct the caller sees
// (Context: a verbs_context, callers hold its embedded ibv_context), so pointers convert both
// ways. Their mutable state is guarded by the mutex of the NIC they belong to (nic.h), taken by
// the caller's thread in every entry point and by the NIC thread.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace vd {

using Clock = std::chrono::steady_clock;

constexpr int kGidTableLenEth = 16;  // 4 populated: fe80 v1, fe80 v2, IPv4-mapped v1, v2
constexpr int kGidTableLenIb = 8;    // 1 populated: fe80::<port GUID>
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxSge = 32;
constexpr int kMaxCqe = 4194303;
constexpr uint32_t kMaxInline = 256;
constexpr uint64_t kMaxMrSize = 1ull << 40;
constexpr uint32_t kMaxMessage = 1u << 31;
constexpr int kCompVectors = 4;

struct Device {
  ibv_device dev;  // first: what callers hold
  const void* providerOps = nullptr;  // where rdma-core's verbs_device has its ops: none here
  int index = 0;
  bool ib = false;  // InfiniBand link layer (else Ethernet / RoCE)
};

struct Nic;
struct Pd;
struct Cq;
struct Channel;
struct Conn;

// A verbs_context (as rdma-core's providers make), every extended op unset: the header's inline
// extended calls then answer EOPNOTSUPP / fall back to the exported entry points.
struct Context {
  verbs_context v;  // first; callers hold &v.context
  Nic* nic = nullptr;
  int asyncWrite = -1;                    // write end of the pipe whose read end is ctx.async_fd
  std::deque<ibv_async_event> async;      // queued, one pipe byte each (a destroyed object's are erased)
  uint32_t asyncFetched = 0, asyncAcked = 0;  // unaffiliated (port/device) events
  std::vector<Pd*> pds;  // what ibv_close_device releases if the caller did not
  std::vector<Cq*> cqs;
  std::vector<Channel*> channels;
};

struct Pd {
  ibv_pd pd;
  Context* c = nullptr;
  int users = 0;  // MRs and QPs
};

struct Mr {
  ibv_mr mr;
  Pd* pd = nullptr;
  uint64_t iova = 0;  // what WRs name (the address for ibv_reg_mr, iova for dma-buf)
  char* ptr = nullptr;
  size_t len = 0;
  int access = 0;
  void* map = nullptr;  // dma-buf mapping
  size_t mapLen = 0;
};

struct Channel {
  ibv_comp_channel ch;
  Context* c = nullptr;
  int writeFd = -1;
  std::deque<Cq*> events;  // one pipe byte each; nullptr = its CQ was destroyed
  int cqs = 0;
};

struct Cq {
  ibv_cq cq;
  Context* c = nullptr;
  Channel* channel = nullptr;
  std::deque<ibv_wc> ring;
  size_t cap = 0;
  int armed = 0;  // 0 no, 1 next completion, 2 next solicited or error completion
  bool overrun = false;
  uint32_t compFetched = 0, compAcked = 0, asyncFetched = 0, asyncAcked = 0;
  int qps = 0;
};

struct SendWr {
  uint64_t wrId = 0;
  bool signaled = false;
  bool withImm = false;
  bool solicited = false;
  uint32_t imm = 0;  // network byte order, as posted
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  std::vector<ibv_sge> sges;
  std::string inlined;
  bool isInline = false;
  uint32_t length = 0;
  uint32_t psn = 0;
  bool localError = false;  // an sge failed its lkey check: completes with LOC_PROT_ERR
};

struct Qp {
  ibv_qp qp;  // first
  Context* c = nullptr;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  ibv_qp_cap cap{};
  bool sigAll = false;
  ibv_qp_attr attr{};  // what ibv_query_qp reports
  // requester
  std::deque<SendWr> sq;  // posted, not completed; [0, sent) are on the wire, unacknowledged
  size_t sent = 0;
  uint32_t nextPsn = 0;
  Conn* out = nullptr;
  bool outVoid = false;  // no path to the responder: whatever is sent is lost
  Clock::time_point lastActivity{};
  Clock::time_point connectRetryAt{};
  bool sqdNotified = false;
  // responder
  std::deque<uint64_t> rq;  // posted receive wr_ids
  uint32_t expectedPsn = 0;
  std::vector<Conn*> in;
  uint32_t asyncFetched = 0, asyncAcked = 0;
};

}  // namespace vd
