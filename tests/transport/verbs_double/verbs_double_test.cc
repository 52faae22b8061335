// transport_verbs_double_test: the libibverbs.so.1 test double, dlopen()ed by its full path and
// driven the way ringfold's verbs fabric drives ibverbs (docs: /work/notes/verbs_abi.md), by two
// forked processes that exchange their QP addresses through pipes. Every child runs under a
// deadline and is SIGKILLed when it passes; a child reports a failed check by exiting 1.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK(cond)                                                                                  \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "[child %d] %s:%d: check failed: %s\n", getpid(), __FILE__, __LINE__, #cond); \
      _exit(1);                                                                                      \
    }                                                                                                \
  } while (0)
#define CHECK_EQ(a, b)                                                                                 \
  do {                                                                                                 \
    long long va_ = static_cast<long long>(a), vb_ = static_cast<long long>(b);                        \
    if (va_ != vb_) {                                                                                  \
      std::fprintf(stderr, "[child %d] %s:%d: %s == %s failed: %lld vs %lld\n", getpid(), __FILE__,    \
                   __LINE__, #a, #b, va_, vb_);                                                        \
      _exit(1);                                                                                        \
    }                                                                                                  \
  } while (0)

// The double's entry points, found with dlsym as the fabric finds them.
struct Verbs {
  decltype(&ibv_get_device_list) getDeviceList;
  decltype(&ibv_free_device_list) freeDeviceList;
  decltype(&ibv_get_device_name) getDeviceName;
  decltype(&ibv_open_device) openDevice;
  decltype(&ibv_close_device) closeDevice;
  decltype(&ibv_query_device) queryDevice;
  decltype(&ibv_query_port) queryPortRaw;
  decltype(&ibv_query_gid) queryGid;
  decltype(&_ibv_query_gid_ex) queryGidEx;
  decltype(&ibv_alloc_pd) allocPd;
  decltype(&ibv_dealloc_pd) deallocPd;
  decltype(&ibv_reg_mr) regMr;
  decltype(&ibv_dereg_mr) deregMr;
  decltype(&ibv_create_comp_channel) createChannel;
  decltype(&ibv_destroy_comp_channel) destroyChannel;
  decltype(&ibv_create_cq) createCq;
  decltype(&ibv_destroy_cq) destroyCq;
  decltype(&ibv_get_cq_event) getCqEvent;
  decltype(&ibv_ack_cq_events) ackCqEvents;
  decltype(&ibv_create_qp) createQp;
  decltype(&ibv_modify_qp) modifyQp;
  decltype(&ibv_query_qp) queryQp;
  decltype(&ibv_destroy_qp) destroyQp;
  decltype(&ibv_get_async_event) getAsyncEvent;
  decltype(&ibv_ack_async_event) ackAsyncEvent;
  decltype(&ibv_event_type_str) eventTypeStr;
  decltype(&ibv_wc_status_str) wcStatusStr;

  int queryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
    return queryPortRaw(c, port, reinterpret_cast<_compat_ibv_port_attr*>(a));
  }

  static Verbs load() {
    void* lib = dlopen(VERBS_DOUBLE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) std::fprintf(stderr, "dlopen: %s\n", dlerror());
    CHECK(lib != nullptr);
    Verbs v;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) std::fprintf(stderr, "missing symbol %s\n", name);
      CHECK(fn != nullptr);
    };
    sym(v.getDeviceList, "ibv_get_device_list");
    sym(v.freeDeviceList, "ibv_free_device_list");
    sym(v.getDeviceName, "ibv_get_device_name");
    sym(v.openDevice, "ibv_open_device");
    sym(v.closeDevice, "ibv_close_device");
    sym(v.queryDevice, "ibv_query_device");
    sym(v.queryPortRaw, "ibv_query_port");
    sym(v.queryGid, "ibv_query_gid");
    sym(v.queryGidEx, "_ibv_query_gid_ex");
    sym(v.allocPd, "ibv_alloc_pd");
    sym(v.deallocPd, "ibv_dealloc_pd");
    sym(v.regMr, "ibv_reg_mr");
    sym(v.deregMr, "ibv_dereg_mr");
    sym(v.createChannel, "ibv_create_comp_channel");
    sym(v.destroyChannel, "ibv_destroy_comp_channel");
    sym(v.createCq, "ibv_create_cq");
    sym(v.destroyCq, "ibv_destroy_cq");
    sym(v.getCqEvent, "ibv_get_cq_event");
    sym(v.ackCqEvents, "ibv_ack_cq_events");
    sym(v.createQp, "ibv_create_qp");
    sym(v.modifyQp, "ibv_modify_qp");
    sym(v.queryQp, "ibv_query_qp");
    sym(v.destroyQp, "ibv_destroy_qp");
    sym(v.getAsyncEvent, "ibv_get_async_event");
    sym(v.ackAsyncEvent, "ibv_ack_async_event");
    sym(v.eventTypeStr, "ibv_event_type_str");
    sym(v.wcStatusStr, "ibv_wc_status_str");
    CHECK(dlsym(lib, "ibv_reg_dmabuf_mr") != nullptr);
    return v;
  }
};

// Pipes between the two children.
struct Link {
  int in = -1, out = -1;
  pid_t other = 0;
  template <class T>
  void send(const T& v) {
    CHECK(write(out, &v, sizeof v) == static_cast<ssize_t>(sizeof v));
  }
  template <class T>
  T recv(int ms = 10000) {
    T v;
    size_t have = 0;
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (have < sizeof v) {
      pollfd p{in, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      CHECK(left > 0 && poll(&p, 1, left) == 1);
      ssize_t r = read(in, reinterpret_cast<char*>(&v) + have, sizeof v - have);
      CHECK(r > 0);
      have += static_cast<size_t>(r);
    }
    return v;
  }
  void signal() { send('!'); }
  void wait(int ms = 10000) { CHECK(recv<char>(ms) == '!'); }
};

struct Outcome {
  int a = -1, b = -1;  // wait statuses
};

// Runs a and b in two children (b first, so that a knows b's pid) within limitMs.
Outcome runPair(const std::function<void(Link&)>& a, const std::function<void(Link&)>& b, int limitMs = 20000) {
  int ab[2], ba[2];
  EXPECT_EQ(pipe(ab), 0);
  EXPECT_EQ(pipe(ba), 0);
  pid_t pb = fork();
  if (pb == 0) {
    Link l{ab[0], ba[1], getppid()};
    close(ab[1]);
    close(ba[0]);
    b(l);
    _exit(0);
  }
  pid_t pa = fork();
  if (pa == 0) {
    Link l{ba[0], ab[1], pb};
    close(ab[0]);
    close(ba[1]);
    a(l);
    _exit(0);
  }
  for (int fd : {ab[0], ab[1], ba[0], ba[1]}) close(fd);
  Outcome o;
  auto deadline = Clock::now() + std::chrono::milliseconds(limitMs);
  int left = 2;
  while (left > 0) {
    int status = 0;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p == pa) o.a = status, --left;
    if (p == pb) o.b = status, --left;
    if (p > 0) continue;
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "children still running after " << limitMs << " ms: killed";
      if (o.a == -1) kill(pa, SIGKILL);
      if (o.b == -1) kill(pb, SIGKILL);
      deadline = Clock::now() + std::chrono::hours(1);
    }
    usleep(5000);
  }
  return o;
}

bool exitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
bool killedBy(int status, int sig) { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }

// What a peer publishes about its QP and memory.
struct Address {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
};

// One process's side: device, PD, memory, CQs (the receive CQ with a channel), one RC QP.
struct Side {
  Verbs v;
  bool ib = false;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_port_attr port{};
  std::vector<char> mem;
  ibv_mr* mr = nullptr;
  int gidIndex = 0;

  explicit Side(size_t bytes = 1 << 20, const char* linkLayer = "eth") {
    setenv("VERBS_DOUBLE_LINK_LAYER", linkLayer, 1);
    v = Verbs::load();
    int n = 0;
    ibv_device** list = v.getDeviceList(&n);
    CHECK(list && n >= 1);
    ctx = v.openDevice(list[0]);
    v.freeDeviceList(list);
    CHECK(ctx != nullptr);
    CHECK_EQ(v.queryPort(ctx, 1, &port), 0);
    ib = port.link_layer == IBV_LINK_LAYER_INFINIBAND;
    gidIndex = ib ? 0 : 3;  // RoCE v2, IPv4-mapped
    pd = v.allocPd(ctx);
    channel = v.createChannel(ctx);
    scq = v.createCq(ctx, 256, nullptr, nullptr, 0);
    rcq = v.createCq(ctx, 256, this, channel, 0);
    CHECK(pd && channel && scq && rcq);
    mem.assign(bytes, 0);
    mr = v.regMr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr != nullptr);
    ibv_qp_init_attr init{};
    init.send_cq = scq;
    init.recv_cq = rcq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 64;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = v.createQp(pd, &init);
    CHECK(qp != nullptr);
    toInit();
  }

  // Releases the device (and with it the MR) before the memory goes: the double writes through
  // the registered virtual addresses.
  ~Side() {
    if (ctx) CHECK_EQ(v.closeDevice(ctx), 0);
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  Address address() {
    Address a{};
    a.qpn = qp->qp_num;
    a.psn = 0x1234 + qp->qp_num % 1000;
    a.lid = port.lid;
    ibv_gid gid;
    CHECK_EQ(v.queryGid(ctx, 1, gidIndex, &gid), 0);
    std::memcpy(a.gid, gid.raw, 16);
    a.addr = reinterpret_cast<uintptr_t>(mem.data());
    a.rkey = mr->rkey;
    return a;
  }

  void toInit() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    CHECK_EQ(v.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  }

  ibv_qp_attr rtrAttr(const Address& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = port.active_mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = address().psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    a.ah_attr.sl = 0;
    if (ib) {
      a.ah_attr.dlid = peer.lid;
    } else {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gidIndex);
      a.ah_attr.grh.hop_limit = 64;
    }
    return a;
  }
  static constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  static constexpr int kRtsMask =
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

  void connect(const Address& peer, uint8_t timeout = 14, uint8_t retry = 7, uint8_t rnrRetry = 7) {
    ibv_qp_attr a = rtrAttr(peer);
    CHECK_EQ(v.modifyQp(qp, &a, kRtrMask), 0);
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = timeout;
    s.retry_cnt = retry;
    s.rnr_retry = rnrRetry;
    s.sq_psn = peer.psn;
    s.max_rd_atomic = 1;
    CHECK_EQ(v.modifyQp(qp, &s, kRtsMask), 0);
  }

  // Exchanges addresses with the other child and connects.
  Address pair(Link& l, uint8_t timeout = 14, uint8_t retry = 7, uint8_t rnrRetry = 7) {
    l.send(address());
    Address peer = l.recv<Address>();
    connect(peer, timeout, retry, rnrRetry);
    return peer;
  }

  void postRecv(uint64_t id) {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = id;
    CHECK_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }

  int write(uint64_t id, size_t off, size_t len, const Address& peer, size_t roff, bool imm, uint32_t immValue = 0,
            uint32_t rkey = 0, bool signaled = true) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(mem.data() + off), static_cast<uint32_t>(len), mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.imm_data = htonl(immValue);
    wr.wr.rdma.remote_addr = peer.addr + roff;
    wr.wr.rdma.rkey = rkey ? rkey : peer.rkey;
    return ibv_post_send(qp, &wr, &bad);
  }

  // The next completion of cq within ms (a failed check when none).
  ibv_wc next(ibv_cq* cq, int ms = 10000) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc{};
    while (Clock::now() < deadline) {
      int n = ibv_poll_cq(cq, 1, &wc);
      CHECK(n >= 0);
      if (n == 1) return wc;
      usleep(200);
    }
    std::fprintf(stderr, "[child %d] no completion within %d ms\n", getpid(), ms);
    CHECK(false);
    return wc;
  }

  // True when cq stays empty for ms.
  bool quiet(ibv_cq* cq, int ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc;
    while (Clock::now() < deadline) {
      if (ibv_poll_cq(cq, 1, &wc) != 0) return false;
      usleep(500);
    }
    return true;
  }

  ibv_qp_state state(ibv_qp* which = nullptr) {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    CHECK_EQ(v.queryQp(which ? which : qp, &a, IBV_QP_STATE, &init), 0);
    return a.qp_state;
  }

  ibv_async_event asyncEvent(int ms) {
    int flags = fcntl(ctx->async_fd, F_GETFL);
    fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
    pollfd p{ctx->async_fd, POLLIN, 0};
    CHECK_EQ(poll(&p, 1, ms), 1);
    ibv_async_event e{};
    CHECK_EQ(v.getAsyncEvent(ctx, &e), 0);
    return e;
  }

  void fill(size_t off, size_t len, uint32_t seed) {
    for (size_t i = 0; i < len; ++i) mem[off + i] = static_cast<char>((i * 131 + seed) >> 3);
  }
  bool holds(size_t off, size_t len, uint32_t seed) const {
    for (size_t i = 0; i < len; ++i)
      if (mem[off + i] != static_cast<char>((i * 131 + seed) >> 3)) return false;
    return true;
  }
};

void expectSuccess(const ibv_wc& wc, uint64_t id, ibv_wc_opcode opcode) {
  if (wc.status != IBV_WC_SUCCESS) std::fprintf(stderr, "[child %d] wc status %d\n", getpid(), wc.status);
  CHECK_EQ(wc.status, IBV_WC_SUCCESS);
  CHECK_EQ(wc.wr_id, id);
  CHECK_EQ(wc.opcode, opcode);
}

}  // namespace

// ---- device, port and GID queries -----------------------------------------------------------

TEST(VerbsDouble, DevicesPortsAndGidTablesDifferPerProcess) {
  auto side = [](Link& l) {
    setenv("VERBS_DOUBLE_DEVICES", "mock0,mock1:ib", 1);
    Verbs v = Verbs::load();
    int n = 0;
    ibv_device** list = v.getDeviceList(&n);
    CHECK_EQ(n, 2);
    CHECK(std::string(v.getDeviceName(list[0])) == "mock0" && std::string(v.getDeviceName(list[1])) == "mock1");
    ibv_context* eth = v.openDevice(list[0]);
    ibv_context* ib = v.openDevice(list[1]);
    v.freeDeviceList(list);
    CHECK(eth && ib);
    ibv_device_attr dev{};
    CHECK_EQ(v.queryDevice(eth, &dev), 0);
    CHECK(dev.phys_port_cnt == 1 && dev.max_qp_wr > 0 && dev.max_sge > 0 && dev.max_cqe > 0 && dev.max_mr_size > 0);
    ibv_port_attr pe{}, pi{};
    CHECK_EQ(v.queryPort(eth, 1, &pe), 0);
    CHECK_EQ(v.queryPort(ib, 1, &pi), 0);
    CHECK(v.queryPort(eth, 2, &pe) != 0);
    CHECK_EQ(pe.state, IBV_PORT_ACTIVE);
    CHECK_EQ(pe.link_layer, IBV_LINK_LAYER_ETHERNET);
    CHECK_EQ(pe.lid, 0);
    CHECK_EQ(pe.active_mtu, IBV_MTU_1024);
    CHECK_EQ(pi.link_layer, IBV_LINK_LAYER_INFINIBAND);
    CHECK(pi.lid != 0);
    CHECK_EQ(pi.active_mtu, IBV_MTU_4096);
    CHECK(pe.gid_tbl_len > 4 && pi.gid_tbl_len >= 1);
    // RoCE table: fe80 v1, v2, IPv4-mapped v1, v2, then empty entries.
    const uint32_t types[4] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2};
    ibv_gid_entry e[4];
    for (int i = 0; i < 4; ++i) {
      CHECK_EQ(v.queryGidEx(eth, 1, i, &e[i], 0, sizeof e[i]), 0);
      CHECK_EQ(e[i].gid_type, types[i]);
      ibv_gid g;
      CHECK_EQ(v.queryGid(eth, 1, i, &g), 0);
      CHECK(std::memcmp(g.raw, e[i].gid.raw, 16) == 0);
    }
    CHECK(e[0].gid.raw[0] == 0xfe && e[0].gid.raw[1] == 0x80);
    CHECK(e[3].gid.raw[10] == 0xff && e[3].gid.raw[11] == 0xff && e[3].gid.raw[12] == 127);
    ibv_gid_entry empty;
    CHECK_EQ(v.queryGidEx(eth, 1, 4, &empty, 0, sizeof empty), ENODATA);
    ibv_gid zero, g4;
    std::memset(&zero, 0, sizeof zero);
    CHECK_EQ(v.queryGid(eth, 1, 4, &g4), 0);
    CHECK(std::memcmp(&zero, &g4, sizeof zero) == 0);
    CHECK(v.queryGid(eth, 1, pe.gid_tbl_len, &g4) != 0);
    ibv_gid_entry ibGid;
    CHECK_EQ(v.queryGidEx(ib, 1, 0, &ibGid, 0, sizeof ibGid), 0);
    CHECK_EQ(ibGid.gid_type, IBV_GID_TYPE_IB);
    // The other process sees other GIDs and another LID.
    struct Ids {
      uint8_t gid3[16];
      uint16_t lid;
    } mine{}, theirs;
    std::memcpy(mine.gid3, e[3].gid.raw, 16);
    mine.lid = pi.lid;
    l.send(mine);
    theirs = l.recv<Ids>();
    CHECK(std::memcmp(mine.gid3, theirs.gid3, 16) != 0);
    CHECK(mine.lid != theirs.lid);
    CHECK_EQ(v.closeDevice(eth), 0);
    CHECK_EQ(v.closeDevice(ib), 0);
  };
  Outcome o = runPair(side, side);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

TEST(VerbsDouble, PortDownAndMtuKnobs) {
  auto down = [](Link&) {
    setenv("VERBS_DOUBLE_PORT_STATE", "down", 1);
    setenv("VERBS_DOUBLE_MTU", "2048", 1);
    Side s;
    CHECK_EQ(s.port.state, IBV_PORT_DOWN);
    CHECK_EQ(s.port.active_mtu, IBV_MTU_2048);
  };
  auto noDevices = [](Link&) {
    setenv("VERBS_DOUBLE_DEVICES", "", 1);
    Verbs v = Verbs::load();
    int n = -1;
    ibv_device** list = v.getDeviceList(&n);
    CHECK(list != nullptr);
    CHECK_EQ(n, 0);
    v.freeDeviceList(list);
  };
  Outcome o = runPair(down, noDevices);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

// ---- the QP state machine -------------------------------------------------------------------

TEST(VerbsDouble, ModifyQpFollowsTheStateMachineAndItsMasks) {
  auto one = [](Link&) {
    Side s;  // its QP is in INIT already; make a second one to walk from RESET
    ibv_qp_init_attr init{};
    init.send_cq = s.scq;
    init.recv_cq = s.rcq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    ibv_qp* qp = s.v.createQp(s.pd, &init);
    CHECK(qp != nullptr);
    CHECK_EQ(qp->state, IBV_QPS_RESET);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    CHECK_EQ(s.v.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);  // no PORT
    a.qp_state = IBV_QPS_ERR;
    CHECK_EQ(s.v.modifyQp(qp, &a, IBV_QP_STATE), EINVAL);  // RESET -> ERR is not a transition
    Address self = s.address();
    self.qpn = qp->qp_num;
    ibv_qp_attr rtr = s.rtrAttr(self);
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask), EINVAL);  // RESET -> RTR skips INIT
    a.qp_state = IBV_QPS_INIT;
    CHECK_EQ(s.v.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    CHECK_EQ(s.state(qp), IBV_QPS_INIT);
    ibv_send_wr swr{}, *sbad = nullptr;
    swr.opcode = IBV_WR_RDMA_WRITE;
    CHECK_EQ(ibv_post_send(qp, &swr, &sbad), EINVAL);  // no sends before RTS
    CHECK(sbad == &swr);
    ibv_recv_wr rwr{}, *rbad = nullptr;
    rwr.wr_id = 77;
    CHECK_EQ(ibv_post_recv(qp, &rwr, &rbad), 0);  // receives may be posted from INIT on
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = 14;
    rts.retry_cnt = 7;
    rts.rnr_retry = 7;
    rts.max_rd_atomic = 1;
    CHECK_EQ(s.v.modifyQp(qp, &rts, Side::kRtsMask), EINVAL);  // INIT -> RTS skips RTR
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask | IBV_QP_TIMEOUT), EINVAL);  // an RTS attribute
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask & ~IBV_QP_RQ_PSN), EINVAL);  // a missing one
    rtr.ah_attr.port_num = 0;
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask), EINVAL);
    rtr.ah_attr.port_num = 1;
    rtr.ah_attr.is_global = 0;
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask), EINVAL);  // RoCE needs the GRH
    rtr.ah_attr.is_global = 1;
    rtr.ah_attr.grh.sgid_index = 9;
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask), EINVAL);  // an empty GID entry
    rtr.ah_attr.grh.sgid_index = 3;
    CHECK_EQ(s.v.modifyQp(qp, &rtr, Side::kRtrMask), 0);
    CHECK_EQ(s.state(qp), IBV_QPS_RTR);
    CHECK_EQ(s.v.modifyQp(qp, &rts, Side::kRtsMask & ~IBV_QP_RETRY_CNT), EINVAL);
    rts.retry_cnt = 8;
    CHECK_EQ(s.v.modifyQp(qp, &rts, Side::kRtsMask), EINVAL);  // 3 bits
    rts.retry_cnt = 7;
    CHECK_EQ(s.v.modifyQp(qp, &rts, Side::kRtsMask), 0);
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    CHECK_EQ(s.v.queryQp(qp, &q, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_DEST_QPN, &qi), 0);
    CHECK(q.qp_state == IBV_QPS_RTS && q.timeout == 14 && q.dest_qp_num == qp->qp_num && qi.cap.max_send_wr == 4);
    a.qp_state = IBV_QPS_ERR;
    CHECK_EQ(s.v.modifyQp(qp, &a, IBV_QP_STATE), 0);
    ibv_wc wc = s.next(s.rcq);  // the posted receive flushes
    CHECK(wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.qp_num == qp->qp_num);
    CHECK_EQ(s.v.modifyQp(qp, &rts, Side::kRtsMask), EINVAL);  // ERR only leaves to RESET
    a.qp_state = IBV_QPS_RESET;
    CHECK_EQ(s.v.modifyQp(qp, &a, IBV_QP_STATE), 0);
    CHECK_EQ(s.v.destroyQp(qp), 0);
    CHECK_EQ(s.v.destroyCq(s.rcq), EBUSY);  // s.qp still uses it
  };
  Outcome o = runPair(one, [](Link&) {});
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

// ---- data movement --------------------------------------------------------------------------

class VerbsDoubleWrite : public ::testing::TestWithParam<const char*> {};

TEST_P(VerbsDoubleWrite, WritesLandInThePeersMemoryInOrder) {
  const char* linkLayer = GetParam();
  constexpr size_t kBig = (1 << 20) - 3;
  auto writer = [&](Link& l) {
    Side s(2 << 20, linkLayer);
    Address peer = s.pair(l);
    s.fill(0, 2 << 20, 7);
    l.wait();  // the target posted its receives
    CHECK_EQ(s.write(1, 5, kBig, peer, 1, false), 0);            // plain, odd offsets
    CHECK_EQ(s.write(2, 1 << 20, 4097, peer, 1 << 20, true, 0xdeadbeef), 0);
    expectSuccess(s.next(s.scq), 1, IBV_WC_RDMA_WRITE);
    expectSuccess(s.next(s.scq), 2, IBV_WC_RDMA_WRITE);
    // A chain of three, only the last signaled: one completion.
    ibv_sge sg[3];
    ibv_send_wr wr[3]{}, *bad = nullptr;
    for (int i = 0; i < 3; ++i) {
      sg[i] = {reinterpret_cast<uintptr_t>(s.mem.data() + 100 * i), 100, s.mr->lkey};
      wr[i].wr_id = 10 + i;
      wr[i].sg_list = &sg[i];
      wr[i].num_sge = 1;
      wr[i].opcode = i == 2 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr[i].send_flags = i == 2 ? IBV_SEND_SIGNALED : 0;
      wr[i].imm_data = htonl(42);
      wr[i].wr.rdma.remote_addr = peer.addr + 1536 * 1024 + 100 * i;
      wr[i].wr.rdma.rkey = peer.rkey;
      wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
    }
    CHECK_EQ(ibv_post_send(s.qp, wr, &bad), 0);
    expectSuccess(s.next(s.scq), 12, IBV_WC_RDMA_WRITE);
    CHECK_EQ(s.write(20, 0, 0, peer, 0, true, 99), 0);  // zero-length with imm, no sge
    expectSuccess(s.next(s.scq), 20, IBV_WC_RDMA_WRITE);
    CHECK(s.quiet(s.scq, 50));
    // And the other way round.
    s.postRecv(500);
    l.signal();
    ibv_wc wc = s.next(s.rcq);
    expectSuccess(wc, 500, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(ntohl(wc.imm_data) == 7 && wc.byte_len == 64 && wc.qp_num == s.qp->qp_num);
    CHECK(s.holds(0, 64, 3));
  };
  auto target = [&](Link& l) {
    Side s(2 << 20, linkLayer);
    Address peer = s.pair(l);
    for (int i = 0; i < 4; ++i) s.postRecv(100 + i);
    l.signal();
    ibv_wc wc = s.next(s.rcq);
    expectSuccess(wc, 100, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
    CHECK_EQ(ntohl(wc.imm_data), 0xdeadbeef);
    CHECK_EQ(wc.byte_len, 4097);
    CHECK_EQ(wc.qp_num, s.qp->qp_num);
    // The imm arrived after the earlier plain write landed completely.
    CHECK(s.mem[0] == 0 && s.mem[kBig + 1] == 0);
    for (size_t i = 0; i < kBig; ++i)
      CHECK(s.mem[1 + i] == static_cast<char>(((5 + i) * 131 + 7) >> 3));
    for (size_t i = 0; i < 4097; ++i)
      CHECK(s.mem[(1 << 20) + i] == static_cast<char>((((1 << 20) + i) * 131 + 7) >> 3));
    wc = s.next(s.rcq);
    expectSuccess(wc, 101, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(ntohl(wc.imm_data) == 42 && wc.byte_len == 100);
    for (size_t i = 0; i < 300; ++i)
      CHECK(s.mem[1536 * 1024 + i] == static_cast<char>((i * 131 + 7) >> 3));
    wc = s.next(s.rcq);
    expectSuccess(wc, 102, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(ntohl(wc.imm_data) == 99 && wc.byte_len == 0);
    l.wait();
    s.fill(0, 64, 3);
    CHECK_EQ(s.write(600, 0, 64, peer, 0, true, 7), 0);
    expectSuccess(s.next(s.scq), 600, IBV_WC_RDMA_WRITE);
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

INSTANTIATE_TEST_SUITE_P(LinkLayers, VerbsDoubleWrite, ::testing::Values("eth", "ib"));

TEST(VerbsDouble, WriteWithImmWaitsForAReceiveAndAnEarlyPostWaitsForRtr) {
  auto writer = [](Link& l) {
    Side s;
    l.send(s.address());
    Address peer = l.recv<Address>();
    s.connect(peer);
    s.fill(0, 256, 1);
    CHECK_EQ(s.write(1, 0, 256, peer, 0, true, 5), 0);  // the target is not even in RTR yet
    CHECK(s.quiet(s.scq, 300));                         // no receive posted there: no completion
    l.signal();
    expectSuccess(s.next(s.scq), 1, IBV_WC_RDMA_WRITE);
  };
  auto target = [](Link& l) {
    Side s;
    Address peer = l.recv<Address>();
    l.send(s.address());
    usleep(150 * 1000);
    s.connect(peer);
    l.wait();
    CHECK(s.quiet(s.rcq, 50));
    s.postRecv(9);
    ibv_wc wc = s.next(s.rcq);
    expectSuccess(wc, 9, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(ntohl(wc.imm_data) == 5 && s.holds(0, 256, 1));
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

TEST(VerbsDouble, RnrRetryBelowSevenRunsOut) {
  auto writer = [](Link& l) {
    Side s;
    Address peer = s.pair(l, 14, 7, /*rnrRetry=*/2);
    CHECK_EQ(s.write(1, 0, 8, peer, 0, true, 5), 0);
    CHECK_EQ(s.write(2, 0, 8, peer, 0, false), 0);
    ibv_wc wc = s.next(s.scq);
    CHECK(wc.wr_id == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR);
    wc = s.next(s.scq);
    CHECK(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(s.state(), IBV_QPS_ERR);
    l.signal();
  };
  auto target = [](Link& l) {
    Side s;
    s.pair(l);
    l.wait();
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

TEST(VerbsDouble, CompletionChannelWakesAPollingProcess) {
  auto writer = [](Link& l) {
    Side s;
    Address peer = s.pair(l);
    l.wait();
    usleep(100 * 1000);  // the target is asleep in poll(2) by now
    CHECK_EQ(s.write(1, 0, 32, peer, 0, true, 11), 0);
    expectSuccess(s.next(s.scq), 1, IBV_WC_RDMA_WRITE);
  };
  auto target = [](Link& l) {
    Side s;
    s.pair(l);
    s.postRecv(3);
    int fd = s.channel->fd;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ibv_cq* cq = nullptr;
    void* cqContext = nullptr;
    CHECK_EQ(s.v.getCqEvent(s.channel, &cq, &cqContext), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(ibv_req_notify_cq(s.rcq, 0), 0);
    l.signal();
    pollfd p{fd, POLLIN, 0};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK_EQ(s.v.getCqEvent(s.channel, &cq, &cqContext), 0);
    CHECK(cq == s.rcq && cqContext == &s);
    s.v.ackCqEvents(cq, 1);
    ibv_wc wc = s.next(s.rcq, 1000);
    expectSuccess(wc, 3, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK_EQ(ntohl(wc.imm_data), 11);
    CHECK_EQ(ibv_req_notify_cq(s.rcq, 0), 0);  // armed again, nothing comes: no wake-up
    CHECK_EQ(poll(&p, 1, 100), 0);
    CHECK_EQ(s.v.destroyQp(s.qp), 0);
    CHECK_EQ(s.v.destroyCq(s.rcq), 0);
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

TEST(VerbsDouble, DmabufRegistrationIsAddressedByItsIova) {
  auto writer = [](Link& l) {
    Side s;
    s.pair(l);
    Address dmabuf = l.recv<Address>();
    s.fill(0, 8192, 4);
    CHECK_EQ(s.write(1, 0, 8192, dmabuf, 100, false), 0);
    expectSuccess(s.next(s.scq), 1, IBV_WC_RDMA_WRITE);
    CHECK_EQ(s.write(2, 0, 16, dmabuf, 65536 - 8, false), 0);  // past the registered range
    ibv_wc wc = s.next(s.scq);
    CHECK(wc.wr_id == 2 && wc.status == IBV_WC_REM_ACCESS_ERR);
    l.signal();
  };
  auto target = [](Link& l) {
    Side s;
    s.pair(l);
    auto regDmabuf = reinterpret_cast<decltype(&ibv_reg_dmabuf_mr)>(
        dlsym(dlopen(VERBS_DOUBLE_LIBRARY, RTLD_NOW | RTLD_NOLOAD), "ibv_reg_dmabuf_mr"));
    int fd = memfd_create("dmabuf", 0);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 17) == 0);
    constexpr uint64_t kIova = 0x7000000000ull;
    ibv_mr* mr = regDmabuf(s.pd, 4096, 65536, kIova, fd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr != nullptr);
    CHECK(reinterpret_cast<uint64_t>(mr->addr) == kIova && mr->length == 65536);
    Address a = s.address();
    a.addr = kIova;
    a.rkey = mr->rkey;
    l.send(a);
    l.wait();
    auto* view = static_cast<char*>(mmap(nullptr, 1 << 17, PROT_READ, MAP_SHARED, fd, 0));
    CHECK(view != MAP_FAILED);
    for (size_t i = 0; i < 8192; ++i) CHECK(view[4096 + 100 + i] == static_cast<char>((i * 131 + 4) >> 3));
    CHECK(view[4096 + 99] == 0 && view[4096 + 100 + 8192] == 0);
    errno = 0;
    CHECK(regDmabuf(s.pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == nullptr && errno == EOPNOTSUPP);
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

// ---- errors ---------------------------------------------------------------------------------

TEST(VerbsDouble, BadRkeyFailsTheWriterAndFlushesWhatFollows) {
  auto writer = [](Link& l) {
    Side s;
    Address peer = s.pair(l);
    l.wait();  // the target is in RTS (a bad write would otherwise fail its RTR -> RTS)
    s.fill(0, 64, 2);
    ibv_sge sg{reinterpret_cast<uintptr_t>(s.mem.data()), 64, s.mr->lkey};
    ibv_send_wr wr[2]{}, *bad = nullptr;
    for (int i = 0; i < 2; ++i) {
      wr[i].wr_id = 1 + i;
      wr[i].sg_list = &sg;
      wr[i].num_sge = 1;
      wr[i].opcode = IBV_WR_RDMA_WRITE;
      wr[i].send_flags = IBV_SEND_SIGNALED;
      wr[i].wr.rdma.remote_addr = peer.addr;
      wr[i].wr.rdma.rkey = i == 0 ? peer.rkey ^ 0x100 : peer.rkey;
    }
    wr[0].next = &wr[1];
    CHECK_EQ(ibv_post_send(s.qp, wr, &bad), 0);
    ibv_wc wc = s.next(s.scq);
    CHECK(wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR);
    CHECK(std::string(s.v.wcStatusStr(wc.status)) == "remote access error");
    wc = s.next(s.scq);
    CHECK(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(s.state(), IBV_QPS_ERR);
    CHECK_EQ(s.write(3, 0, 8, peer, 0, false, 0, 0, /*signaled=*/false), 0);  // flushed even unsignaled
    wc = s.next(s.scq);
    CHECK(wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR);
    l.signal();
  };
  auto target = [](Link& l) {
    Side s;
    s.pair(l);
    s.postRecv(8);
    l.signal();
    ibv_async_event e = s.asyncEvent(10000);
    CHECK(e.event_type == IBV_EVENT_QP_ACCESS_ERR && e.element.qp == s.qp);
    s.v.ackAsyncEvent(&e);
    CHECK_EQ(s.state(), IBV_QPS_ERR);
    ibv_wc wc = s.next(s.rcq);
    CHECK(wc.wr_id == 8 && wc.status == IBV_WC_WR_FLUSH_ERR);
    l.wait();
    for (int i = 0; i < 64; ++i) CHECK(s.mem[i] == 0);
    CHECK_EQ(s.v.destroyQp(s.qp), 0);
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(exitedOk(o.b));
}

// The writer kills (or stops) the target itself, then writes: retry exhaustion within a bounded
// time (timeout 12: 16.8 ms x 4 tries, clamped up to the double's 250 ms floor).
void peerGoneCase(int sig) {
  auto writer = [sig](Link& l) {
    Side s;
    Address peer = s.pair(l, 12, 3);
    s.postRecv(1);
    CHECK_EQ(s.write(1, 0, 16, peer, 0, false), 0);
    expectSuccess(s.next(s.scq), 1, IBV_WC_RDMA_WRITE);  // the pair works
    l.wait();
    CHECK_EQ(kill(l.other, sig), 0);
    usleep(20 * 1000);
    CHECK_EQ(s.write(2, 0, 16, peer, 0, false), 0);
    CHECK_EQ(s.write(3, 0, 16, peer, 0, true, 1), 0);
    ibv_wc wc = s.next(s.scq, 15000);
    if (wc.status != IBV_WC_RETRY_EXC_ERR) std::fprintf(stderr, "status %s\n", s.v.wcStatusStr(wc.status));
    CHECK(wc.wr_id == 2 && wc.status == IBV_WC_RETRY_EXC_ERR);
    wc = s.next(s.scq);
    CHECK(wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR);
    wc = s.next(s.rcq);
    CHECK(wc.wr_id == 1 && wc.status == IBV_WC_WR_FLUSH_ERR);
    ibv_async_event e = s.asyncEvent(5000);
    CHECK(e.event_type == IBV_EVENT_QP_FATAL && e.element.qp == s.qp);
    CHECK(std::string(s.v.eventTypeStr(e.event_type)).size() > 0);
    CHECK_EQ(s.v.destroyQp(s.qp), EBUSY);  // the event is not acknowledged yet
    s.v.ackAsyncEvent(&e);
    CHECK_EQ(s.v.destroyQp(s.qp), 0);
    if (sig == SIGSTOP) kill(l.other, SIGKILL);
  };
  auto target = [](Link& l) {
    Side s;
    s.pair(l);
    l.signal();
    for (;;) pause();
  };
  Outcome o = runPair(writer, target);
  EXPECT_TRUE(exitedOk(o.a));
  EXPECT_TRUE(killedBy(o.b, SIGKILL));
}

TEST(VerbsDouble, KilledPeerEndsInRetryExceededAndQpFatal) { peerGoneCase(SIGKILL); }

TEST(VerbsDouble, StoppedPeerEndsInRetryExceeded) { peerGoneCase(SIGSTOP); }
