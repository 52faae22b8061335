// The emulated NIC of one process for one device: its node number, GID table, listening socket,
// thread, and the helpers every entry point shares (completions, async events, QP error state).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nic.h"

namespace vd {
namespace {

constexpr int kMaxDevices = 64;
constexpr uint16_t kMaxNode = 0xbfff;  // unicast LIDs

struct Registry {
  pid_t pid = 0;
  Nic* nics[kMaxDevices]{};
  uint16_t lastNode[kMaxDevices]{};  // a reopened device keeps its GIDs when the node is free
};

std::mutex& registryMu() {
  static auto* mu = new std::mutex;
  return *mu;
}

Registry& registry() {
  static auto* r = new Registry;
  if (r->pid != getpid()) {  // a forked child: the parent's NICs (and their threads) are not ours
    *r = Registry{};
    r->pid = getpid();
  }
  return *r;
}

long envLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return end && *end == 0 ? x : fallback;
}

ibv_mtu mtuFromEnv(bool ib) {
  switch (envLong("VERBS_DOUBLE_MTU", ib ? 4096 : 1024)) {
    case 256: case 1: return IBV_MTU_256;
    case 512: case 2: return IBV_MTU_512;
    case 2048: case 4: return IBV_MTU_2048;
    case 4096: case 5: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

socklen_t socketName(uint16_t node, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  int n = std::snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "verbs-double.%u.%u",
                        static_cast<unsigned>(getuid()), static_cast<unsigned>(node));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// Interface identifier 02:76:64:ff:fe:<dev>:<node hi>:<node lo> ("vd" in the OUI).
void linkLocal(ibv_gid* gid, int dev, uint16_t node) {
  static const uint8_t kPrefix[13] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x76, 0x64, 0xff, 0xfe};
  std::memcpy(gid->raw, kPrefix, sizeof kPrefix);
  gid->raw[13] = static_cast<uint8_t>(dev);
  gid->raw[14] = static_cast<uint8_t>(node >> 8);
  gid->raw[15] = static_cast<uint8_t>(node);
}

void ipv4Mapped(ibv_gid* gid, int dev, uint16_t node) {
  std::memset(gid->raw, 0, sizeof gid->raw);
  gid->raw[10] = gid->raw[11] = 0xff;
  gid->raw[12] = 127;
  gid->raw[13] = static_cast<uint8_t>(0x40 | (dev & 0x3f));
  gid->raw[14] = static_cast<uint8_t>(node >> 8);
  gid->raw[15] = static_cast<uint8_t>(node);
}

void buildGids(Nic* nic) {
  int dev = nic->dev->index;
  nic->guid = 0x027664fffe000000ull | (uint64_t(dev & 0xff) << 16) | nic->node;
  if (nic->ib) {
    nic->gidLen = kGidTableLenIb;
    linkLocal(&nic->gids[0], dev, nic->node);
    nic->gidType[0] = IBV_GID_TYPE_IB;
    nic->gidValid[0] = true;
    return;
  }
  nic->gidLen = kGidTableLenEth;
  linkLocal(&nic->gids[0], dev, nic->node);
  linkLocal(&nic->gids[1], dev, nic->node);
  ipv4Mapped(&nic->gids[2], dev, nic->node);
  ipv4Mapped(&nic->gids[3], dev, nic->node);
  for (int i = 0; i < 4; ++i) {
    nic->gidType[i] = i % 2 == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    nic->gidValid[i] = true;
  }
}

bool claimNode(Nic* nic, uint16_t preferred) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  uint16_t start = preferred ? preferred
                             : static_cast<uint16_t>((uint32_t(getpid()) * 7u + nic->dev->index * 131u) % kMaxNode + 1);
  for (uint32_t i = 0; i < kMaxNode; ++i) {
    auto node = static_cast<uint16_t>((start - 1 + i) % kMaxNode + 1);
    sockaddr_un addr;
    socklen_t len = socketName(node, &addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      if (listen(fd, 256) != 0) break;
      nic->node = node;
      nic->listenFd = fd;
      return true;
    }
    if (errno != EADDRINUSE) break;
  }
  close(fd);
  return false;
}

void portGoesDown(Nic* nic) {
  nic->portDownPending = false;
  nic->portActive = false;
  for (Conn* conn : nic->conns) killConn(conn);
  for (Context* c : nic->contexts) {
    ibv_async_event e{};
    e.element.port_num = 1;
    e.event_type = IBV_EVENT_PORT_ERR;
    postAsync(c, e);
  }
}

void run(Nic* nic) {
  std::vector<pollfd> fds;
  std::vector<Conn*> who;
  std::unique_lock<std::mutex> lk(nic->mu);
  while (!nic->stop) {
    Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::milliseconds(500);
    if (nic->portDownPending) {
      if (now >= nic->portDownAt)
        portGoesDown(nic);
      else
        next = std::min(next, nic->portDownAt);
    }
    serviceQps(nic, now, next);
    serviceConns(nic, now, next);
    for (auto it = nic->conns.begin(); it != nic->conns.end();) {
      if (!(*it)->dead) {
        ++it;
        continue;
      }
      close((*it)->fd);
      delete *it;
      it = nic->conns.erase(it);
    }
    fds.assign({{nic->wakeFd, POLLIN, 0}, {nic->listenFd, POLLIN, 0}});
    who.clear();
    for (Conn* conn : nic->conns) {
      short events = connWantsInput(conn) ? POLLIN : 0;
      if (conn->outOff < conn->out.size()) events |= POLLOUT;
      fds.push_back({conn->fd, events, 0});
      who.push_back(conn);
    }
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(next - now).count();
    int ms = wait <= 0 ? 0 : static_cast<int>(std::min<long long>((wait + 999) / 1000, 500));
    lk.unlock();
    poll(fds.data(), fds.size(), ms);
    lk.lock();
    if (fds[0].revents) {
      uint64_t v;
      ssize_t r = read(nic->wakeFd, &v, sizeof v);
      (void)r;
    }
    if (fds[1].revents & POLLIN) acceptConns(nic);
    for (size_t i = 0; i < who.size(); ++i) {
      short re = fds[i + 2].revents;
      if (who[i]->dead || re == 0) continue;
      if (re & POLLOUT) connWritable(who[i]);
      if (!who[i]->dead && (re & (POLLIN | POLLHUP | POLLERR))) connReadable(nic, who[i], re);
    }
  }
}

void stopThread(Nic* nic) {
  {
    std::lock_guard<std::mutex> g(nic->mu);
    nic->stop = true;
  }
  nicWake(nic);
  if (nic->thread.joinable()) nic->thread.join();
}

// Threads must not outlive the code they run: stop them when the library is unloaded or the
// process exits with devices still open.
__attribute__((destructor)) void stopAllNics() {
  std::lock_guard<std::mutex> g(registryMu());
  Registry& r = registry();
  for (Nic*& nic : r.nics)
    if (nic) stopThread(nic);
}

}  // namespace

Nic* nicAcquire(Device* dev) {
  std::lock_guard<std::mutex> g(registryMu());
  Registry& r = registry();
  if (dev->index >= kMaxDevices) {
    errno = ENODEV;
    return nullptr;
  }
  Nic*& slot = r.nics[dev->index];
  if (slot) {
    ++slot->refs;
    return slot;
  }
  auto* nic = new Nic;
  nic->dev = dev;
  nic->ib = dev->ib;
  nic->mtu = mtuFromEnv(dev->ib);
  const char* state = std::getenv("VERBS_DOUBLE_PORT_STATE");
  nic->portActive = !(state && std::strcmp(state, "down") == 0);
  long downAfter = envLong("VERBS_DOUBLE_PORT_DOWN_AFTER_MS", -1);
  if (downAfter >= 0 && nic->portActive) {
    nic->portDownPending = true;
    nic->portDownAt = Clock::now() + std::chrono::milliseconds(downAfter);
  }
  if (!claimNode(nic, r.lastNode[dev->index])) {
    delete nic;
    errno = EADDRNOTAVAIL;
    return nullptr;
  }
  r.lastNode[dev->index] = nic->node;
  nic->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  buildGids(nic);
  nic->nextQpn = (uint32_t(nic->node) * 0x100 + 0x40) & 0xffffff;
  nic->nextKey = uint32_t(nic->node) << 12;  // keys differ between processes too
  nic->refs = 1;
  nic->thread = std::thread(run, nic);
  slot = nic;
  return nic;
}

void nicRelease(Nic* nic) {
  {
    std::lock_guard<std::mutex> g(registryMu());
    Registry& r = registry();
    if (--nic->refs > 0) return;
    for (Nic*& slot : r.nics)
      if (slot == nic) slot = nullptr;
  }
  stopThread(nic);
  for (Conn* conn : nic->conns) {
    close(conn->fd);
    delete conn;
  }
  close(nic->listenFd);
  close(nic->wakeFd);
  delete nic;
}

int nicPortDownNow() {
  std::lock_guard<std::mutex> g(registryMu());
  int n = 0;
  for (Nic* nic : registry().nics) {
    if (!nic) continue;
    {
      std::lock_guard<std::mutex> lk(nic->mu);
      if (!nic->portActive) continue;
      nic->portDownPending = true;
      nic->portDownAt = Clock::now();
    }
    nicWake(nic);
    ++n;
  }
  return n;
}

void nicWake(Nic* nic) {
  uint64_t one = 1;
  ssize_t r = write(nic->wakeFd, &one, sizeof one);
  (void)r;
}

void pushCqe(Cq* cq, const ibv_wc& wc, bool solicited) {
  if (cq->ring.size() >= cq->cap) {
    if (!cq->overrun) {
      cq->overrun = true;
      std::fprintf(stderr, "verbs double: CQ %p overrun (%zu entries): completions lost\n",
                   static_cast<void*>(&cq->cq), cq->cap);
      ibv_async_event e{};
      e.element.cq = &cq->cq;
      e.event_type = IBV_EVENT_CQ_ERR;
      postAsync(cq->c, e);
    }
    return;
  }
  cq->ring.push_back(wc);
  bool fire = cq->armed == 1 || (cq->armed == 2 && (solicited || wc.status != IBV_WC_SUCCESS));
  if (!fire) return;
  cq->armed = 0;
  if (!cq->channel) return;
  char byte = 'c';
  if (write(cq->channel->writeFd, &byte, 1) == 1) cq->channel->events.push_back(cq);
}

void postAsync(Context* c, ibv_async_event event) {
  char byte = 'a';
  if (write(c->asyncWrite, &byte, 1) == 1) c->async.push_back(event);
}

void killConn(Conn* conn) {
  if (conn->dead) return;
  if (Qp* qp = conn->qp) {
    if (conn->requester) {
      qp->out = nullptr;
      qp->outVoid = true;  // what was sent, and what will be, reaches no one
    } else {
      std::erase(qp->in, conn);
    }
  }
  conn->qp = nullptr;
  conn->dead = true;
}

void qpEnterError(Qp* qp) {
  if (qp->qp.state == IBV_QPS_ERR) return;
  qp->qp.state = IBV_QPS_ERR;
  qp->attr.qp_state = IBV_QPS_ERR;
  for (const SendWr& wr : qp->sq) {
    ibv_wc wc{};
    wc.wr_id = wr.wrId;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = qp->qp.qp_num;
    pushCqe(qp->scq, wc);
  }
  qp->sq.clear();
  qp->sent = 0;
  for (uint64_t id : qp->rq) {
    ibv_wc wc{};
    wc.wr_id = id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    pushCqe(qp->rcq, wc);
  }
  qp->rq.clear();
  if (qp->out) killConn(qp->out);
  while (!qp->in.empty()) killConn(qp->in.back());
}

void qpDropTraffic(Qp* qp) {
  qp->sq.clear();
  qp->sent = 0;
  qp->rq.clear();
  if (qp->out) killConn(qp->out);
  while (!qp->in.empty()) killConn(qp->in.back());
  qp->outVoid = false;
  for (Cq* cq : {qp->scq, qp->rcq})
    std::erase_if(cq->ring, [&](const ibv_wc& wc) { return wc.qp_num == qp->qp.qp_num; });
}

int gidIndexOf(const Nic* nic, const uint8_t* gid, int type) {
  for (int i = 0; i < nic->gidLen; ++i)
    if (nic->gidValid[i] && std::memcmp(nic->gids[i].raw, gid, 16) == 0 && (type < 0 || int(nic->gidType[i]) == type))
      return i;
  return -1;
}

int nodeOfGid(const uint8_t* g) {
  static const uint8_t kPrefix[13] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x76, 0x64, 0xff, 0xfe};
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  bool ours = std::memcmp(g, kPrefix, sizeof kPrefix) == 0 ||
              (std::memcmp(g, kMapped, sizeof kMapped) == 0 && g[12] == 127 && (g[13] & 0xc0) == 0x40);
  int node = (g[14] << 8) | g[15];
  return ours && node >= 1 && node <= kMaxNode ? node : -1;
}

std::chrono::nanoseconds retryBudget(const ibv_qp_attr& attr) {
  using std::chrono::milliseconds;
  using std::chrono::nanoseconds;
  static const nanoseconds cap = milliseconds(std::max(250L, envLong("VERBS_DOUBLE_RETRY_CAP_MS", 10000)));
  if (attr.timeout == 0) return cap;  // 0 = wait forever in the spec; bounded here
  nanoseconds perTry(int64_t(4096) << attr.timeout);
  nanoseconds total = perTry * (attr.retry_cnt + 1);
  return std::clamp<nanoseconds>(total, milliseconds(250), cap);
}

std::chrono::nanoseconds rnrDelay(uint8_t code) {
  // IB spec table 45: the RNR NAK timer field, in microseconds.
  static const uint32_t kMicros[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                                       160,    240,   320,   480,   640,   960,    1280,   1920,
                                       2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                                       40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(kMicros[code & 31]);
}

}  // namespace vd
