#include "transport/rdma/fabric_verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/rdma/verbs_api.h"
#include "transport/rdma/verbs_config.h"
#include "transport/rdma/verbs_device.h"

namespace ringfold::transport::rdma::verbs {
namespace {

constexpr size_t kMaxWrite = size_t{1} << 30;
constexpr int kSendWrPerQp = 256;
constexpr int kRecvWrPerQp = 512;
constexpr int64_t kMaxCqEntries = int64_t{1} << 20;  // 64 MiB of CQEs at most
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr auto kAsyncEvery = std::chrono::milliseconds(10);

void setNonBlocking(int fd, const std::string& what) {
  int flags = fcntl(fd, F_GETFL);
  RF_CHECK_ERRNO(flags, what);
  RF_CHECK_ERRNO(fcntl(fd, F_SETFL, flags | O_NONBLOCK), what);
}

class VerbsFabric final : public Fabric {
 public:
  VerbsFabric(const Api& api, int rank, int size) : api_(api), rank_(rank), size_(size) {}
  ~VerbsFabric() override { close(); }

  void setup();

  const char* kind() const override { return "verbs"; }
  std::string describe() const override;
  int lanes() const override { return lanes_; }
  bool writesOrdered() const override { return true; }
  size_t maxWriteBytes() const override {
    return portAttr_.max_msg_sz == 0 ? kMaxWrite : std::min<size_t>(kMaxWrite, portAttr_.max_msg_sz);
  }
  std::string localAddress(int peer) override;
  void insertPeer(int peer, const std::string& address) override;
  Registration registerMemory(void* data, size_t size, MemoryKind kind) override;
  void deregister(const Registration& registration) noexcept override;
  int postWrite(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                RemoteAddress remote, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, false, 0, context);
  }
  int postWriteImm(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                   RemoteAddress remote, uint32_t imm, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, true, imm, context);
  }
  void postImmReceives(int peer, int count) override;
  int poll(Completion* out, int max) override;
  bool armWait() override;
  int waitFd() const override { return channel_ != nullptr && !closed_ ? channel_->fd : -1; }
  void close() noexcept override;

 private:
  struct Lane {
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;
    int sends = 0;        // posted writes not completed yet
    int receives = 0;     // posted receives not consumed yet
    bool failed = false;  // an error was reported for this QP: later receive errors are noise
  };
  struct Peer {
    std::vector<Lane> lanes;
    bool connected = false;
    int room = 0;  // immediates the protocol made room for and has not consumed
  };

  std::string where() const { return device_ + ":" + std::to_string(port_); }
  std::string toRank(int peer) const { return peer >= 0 ? "on the QP to rank " + std::to_string(peer) + ", " : "on "; }
  std::vector<GidEntry> readGids();
  void createQps();
  int post(int peer, int lane, const void* local, size_t length, const Registration& reg, RemoteAddress remote,
           bool withImm, uint32_t imm, uint64_t context);
  void postReceives(int peer, int lane, int count);
  bool convert(const ibv_wc& wc, Completion& out);
  void drainChannel();
  void checkAsync();
  void fail(int peer, std::string text) {
    Completion c;
    c.type = Completion::Type::kError;
    c.peer = peer;
    c.context = kNoContext;
    c.error = std::move(text);
    pending_.push_back(std::move(c));
  }
  Registration registerCuda(void* data, size_t size);

  const Api& api_;
  const int rank_, size_;
  int lanes_ = 1;
  std::string device_;
  int port_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_device_attr deviceAttr_{};
  ibv_port_attr portAttr_{};
  LocalPort local_;
  GidType gidType_ = GidType::kUnknown;
  QpParams params_;
  int maxSendWr_ = kSendWrPerQp, maxRecvWr_ = kRecvWrPerQp;
  std::vector<Peer> peers_;
  std::unordered_map<uint32_t, std::pair<int, int>> byQpNum_;  // qp_num -> (peer, lane)
  std::unordered_set<ibv_mr*> mrs_;
  std::deque<Completion> pending_;
  std::chrono::steady_clock::time_point nextAsyncCheck_{};
  bool armed_ = false;
  bool closed_ = false;
  bool warnedRecvCap_ = false;
};

}  // namespace

void VerbsFabric::setup() {
  RF_ENFORCE(size_ >= 1 && rank_ >= 0 && rank_ < size_, "verbs fabric: rank ", rank_, " of ", size_);
  params_ = QpParams::fromEnv();
  GidPolicy policy = GidPolicy::fromEnv();
  int64_t lanes = params::kIbQpsPerConnection.asInt();
  if (lanes < 1 || lanes > kMaxLanes) {
    RF_THROW(InvalidArgument, params::kIbQpsPerConnection.name, "=", lanes, " is out of range (1..", kMaxLanes, ")");
  }
  lanes_ = static_cast<int>(lanes);
  PortPick pick;
  std::string why;
  if (!findPort(api_, HcaSpec::fromEnv(), true, pick, why)) RF_THROW(Error, "verbs fabric: ", why);
  ctx_ = pick.context;
  device_ = pick.device;
  port_ = pick.port;
  deviceAttr_ = pick.deviceAttr;
  portAttr_ = pick.portAttr;
  setNonBlocking(ctx_->async_fd, "verbs fabric: the async event fd of " + where());

  local_.linkLayer = static_cast<LinkLayer>(portAttr_.link_layer);
  local_.port = static_cast<uint8_t>(port_);
  local_.lid = portAttr_.lid;
  local_.activeMtu = static_cast<uint8_t>(portAttr_.active_mtu);
  if (local_.activeMtu < IBV_MTU_256 || local_.activeMtu > IBV_MTU_4096) {
    RF_LOG(kWarning) << "verbs fabric: " << where() << " reports active MTU code " << int{local_.activeMtu}
                     << "; using 1024 bytes";
    local_.activeMtu = IBV_MTU_1024;
  }
  local_.grhRequired = (portAttr_.flags & IBV_QPF_GRH_REQUIRED) != 0;
  std::vector<GidEntry> gids = readGids();
  GidChoice gid = selectGid(local_.linkLayer, gids, policy, where());
  if (!gid.preferred) {
    RF_LOG(kWarning) << "verbs fabric: " << gid.note;
  }
  local_.gidIndex = gid.index;
  if (static_cast<size_t>(gid.index) < gids.size()) {
    local_.gid = gids[gid.index].raw;
    gidType_ = gids[gid.index].type;
  }

  errno = 0;
  pd_ = api_.allocPd(ctx_);
  if (pd_ == nullptr) RF_THROW(Error, "verbs fabric: ibv_alloc_pd on ", where(), " failed: ", errnoText(errno));
  channel_ = api_.createCompChannel(ctx_);
  if (channel_ == nullptr) {
    RF_THROW(Error, "verbs fabric: ibv_create_comp_channel on ", where(), " failed: ", errnoText(errno));
  }
  setNonBlocking(channel_->fd, "verbs fabric: the completion channel of " + where());

  // One CQ for every QP, large enough that it can never overrun: each QP contributes its whole
  // send and receive queues. When the device's CQ limit is smaller, the queues shrink to fit.
  if (deviceAttr_.max_qp_wr > 0) {
    maxSendWr_ = std::min(maxSendWr_, deviceAttr_.max_qp_wr);
    maxRecvWr_ = std::min(maxRecvWr_, deviceAttr_.max_qp_wr);
  }
  int64_t qps = int64_t{size_ - 1} * lanes_;
  int64_t maxCqe = deviceAttr_.max_cqe > 0 ? std::min<int64_t>(deviceAttr_.max_cqe, kMaxCqEntries) : kMaxCqEntries;
  if (qps * (maxSendWr_ + maxRecvWr_) > maxCqe) {
    int64_t perQp = maxCqe / qps;
    if (perQp < 4) {
      RF_THROW(Error, "verbs fabric: ", qps, " QPs do not fit one CQ of ", maxCqe, " entries on ", where(), " (lower ",
               params::kIbQpsPerConnection.name, ")");
    }
    maxSendWr_ = static_cast<int>(std::max<int64_t>(1, perQp / 5));
    maxRecvWr_ = static_cast<int>(perQp - maxSendWr_);
  }
  int cqSize = static_cast<int>(std::max<int64_t>(1, qps * (maxSendWr_ + maxRecvWr_)));
  cq_ = api_.createCq(ctx_, cqSize, nullptr, channel_, 0);
  if (cq_ == nullptr) {
    RF_THROW(Error, "verbs fabric: ibv_create_cq of ", cqSize, " entries on ", where(), " failed: ", errnoText(errno));
  }
  createQps();
  nextAsyncCheck_ = std::chrono::steady_clock::now() + kAsyncEvery;
  RF_LOG(kInfo) << "verbs fabric: " << describe() << ", " << lanes_ << " QP(s) per peer, " << maxSendWr_ << " writes / "
                << maxRecvWr_ << " receives per QP, CQ of " << cqSize;
}

std::vector<GidEntry> VerbsFabric::readGids() {
  std::vector<GidEntry> table(static_cast<size_t>(std::clamp(portAttr_.gid_tbl_len, 0, 1024)));
  const bool roce = local_.linkLayer == LinkLayer::kEthernet;
  for (size_t i = 0; i < table.size(); ++i) {
    ibv_gid gid;
    std::memset(&gid, 0, sizeof(gid));
    if (api_.queryGid(ctx_, static_cast<uint8_t>(port_), static_cast<int>(i), &gid) != 0) continue;
    std::memcpy(table[i].raw.data(), gid.raw, sizeof(gid.raw));
    if (!roce) {
      table[i].type = GidType::kIb;
    } else if (gidIsZero(table[i].raw)) {
      continue;
    } else if (api_.queryGidEx != nullptr) {
      ibv_gid_entry entry;
      std::memset(&entry, 0, sizeof(entry));
      if (api_.queryGidEx(ctx_, static_cast<uint32_t>(port_), static_cast<uint32_t>(i), &entry, 0, sizeof(entry)) ==
          0) {
        table[i].type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoceV2
                        : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1
                                                                 : GidType::kUnknown;
      }
    } else {
      std::ifstream in("/sys/class/infiniband/" + device_ + "/ports/" + std::to_string(port_) + "/gid_attrs/types/" +
                       std::to_string(i));
      std::string text;
      if (in && std::getline(in, text)) table[i].type = gidTypeFromText(text);
    }
  }
  return table;
}

void VerbsFabric::createQps() {
  std::random_device seed;
  std::mt19937 psns(seed());
  QpAttributes init;
  init.port = static_cast<uint8_t>(port_);
  init.accessFlags = kAccess;
  peers_.resize(static_cast<size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    peers_[peer].lanes.resize(static_cast<size_t>(lanes_));
    for (int l = 0; l < lanes_; ++l) {
      ibv_qp_init_attr attr;
      std::memset(&attr, 0, sizeof(attr));
      attr.send_cq = cq_;
      attr.recv_cq = cq_;
      attr.qp_type = IBV_QPT_RC;
      attr.cap.max_send_wr = static_cast<uint32_t>(maxSendWr_);
      attr.cap.max_recv_wr = static_cast<uint32_t>(maxRecvWr_);
      attr.cap.max_send_sge = 1;
      attr.cap.max_recv_sge = 1;
      attr.sq_sig_all = 0;
      errno = 0;
      ibv_qp* qp = api_.createQp(pd_, &attr);
      if (qp == nullptr) {
        RF_THROW(Error, "verbs fabric: ibv_create_qp for rank ", peer, " (lane ", l, ") on ", where(),
                 " failed: ", errnoText(errno), " (", byQpNum_.size(), " QPs made; the device allows ",
                 deviceAttr_.max_qp, ")");
      }
      Lane& lane = peers_[peer].lanes[l];
      lane.qp = qp;
      lane.psn = psns() & 0xffffff;
      byQpNum_[qp->qp_num] = {peer, l};
      ibv_qp_attr qpAttr;
      int mask = fillQpAttr(init, QpStep::kInit, qpAttr);
      int rc = api_.modifyQp(qp, &qpAttr, mask);
      if (rc != 0) {
        RF_THROW(Error, "verbs fabric: moving the QP for rank ", peer, " to INIT on ", where(),
                 " failed: ", rcText(rc));
      }
    }
  }
}

std::string VerbsFabric::describe() const {
  std::string mtu = "MTU " + std::to_string(128 << local_.activeMtu);
  if (local_.linkLayer == LinkLayer::kInfiniBand) {
    return where() + " InfiniBand LID " + std::to_string(local_.lid) + " " + mtu;
  }
  std::string type = gidType_ == GidType::kRoceV1 ? "RoCE v1" : gidType_ == GidType::kRoceV2 ? "RoCE v2" : "RoCE";
  return where() + " " + type + " GID " + std::to_string(local_.gidIndex) + " (" + gidText(local_.gid) + ") " + mtu;
}

std::string VerbsFabric::localAddress(int peer) {
  RF_ENFORCE(peer >= 0 && peer < size_ && peer != rank_ && !closed_, "verbs fabric: localAddress(", peer, ") on rank ",
             rank_, " of ", size_);
  PeerAddress address;
  address.fromRank = static_cast<uint32_t>(rank_);
  address.toRank = static_cast<uint32_t>(peer);
  for (const Lane& lane : peers_[peer].lanes) {
    QpAddress q;
    q.qpNum = lane.qp->qp_num;
    q.psn = lane.psn;
    q.lid = local_.lid;
    q.gid = local_.gid;
    q.port = local_.port;
    q.mtu = local_.activeMtu;
    q.linkLayer = local_.linkLayer;
    address.qps.push_back(q);
  }
  return encodeAddress(address);
}

void VerbsFabric::insertPeer(int peer, const std::string& bytes) {
  RF_ENFORCE(peer >= 0 && peer < size_ && peer != rank_ && !closed_, "verbs fabric: insertPeer(", peer, ") on rank ",
             rank_, " of ", size_);
  Peer& p = peers_[peer];
  if (p.connected) RF_THROW(InvalidArgument, "verbs fabric: insertPeer(rank ", peer, ") called twice");
  PeerAddress address;
  try {
    address = decodeAddress(bytes);
  } catch (const InvalidArgument& e) {
    RF_THROW(InvalidArgument, "verbs fabric: the address of rank ", peer, ": ", e.what());
  }
  if (address.fromRank != static_cast<uint32_t>(peer) || address.toRank != static_cast<uint32_t>(rank_)) {
    RF_THROW(InvalidArgument, "verbs fabric: the address given for rank ", peer, " was made by rank ", address.fromRank,
             " for rank ", address.toRank, " (this is rank ", rank_, ")");
  }
  if (address.qps.size() != static_cast<size_t>(lanes_)) {
    RF_THROW(InvalidArgument, "verbs fabric: rank ", peer, " has ", address.qps.size(),
             " QPs per connection, this rank ", lanes_, ": set ", params::kIbQpsPerConnection.name,
             " alike on every rank");
  }
  for (int l = 0; l < lanes_; ++l) {
    Lane& lane = p.lanes[l];
    QpAttributes attributes;
    try {
      attributes = qpAttributes(local_, lane.psn, address.qps[l], params_);
    } catch (const InvalidArgument& e) {
      RF_THROW(InvalidArgument, "verbs fabric: rank ", peer, " cannot be reached from ", where(), ": ", e.what());
    }
    for (QpStep step : {QpStep::kRtr, QpStep::kRts}) {
      ibv_qp_attr qpAttr;
      int mask = fillQpAttr(attributes, step, qpAttr);
      int rc = api_.modifyQp(lane.qp, &qpAttr, mask);
      if (rc != 0) {
        RF_THROW(Error, "verbs fabric: moving the QP to rank ", peer, " (lane ", l, ") to ",
                 step == QpStep::kRtr ? "RTR" : "RTS", " on ", where(), " failed: ", rcText(rc),
                 step == QpStep::kRtr ? " (a wrong GID index or an unreachable peer address?)" : "");
      }
    }
    ibv_qp_attr state;
    ibv_qp_init_attr initAttr;
    std::memset(&state, 0, sizeof(state));
    std::memset(&initAttr, 0, sizeof(initAttr));
    if (api_.queryQp(lane.qp, &state, IBV_QP_STATE, &initAttr) == 0 && state.qp_state != IBV_QPS_RTS) {
      RF_THROW(Error, "verbs fabric: the QP to rank ", peer, " on ", where(), " is in state ",
               static_cast<int>(state.qp_state), " after the move to RTS");
    }
  }
  p.connected = true;
}

Registration VerbsFabric::registerMemory(void* data, size_t size, MemoryKind kind) {
  RF_ENFORCE(!closed_, "verbs fabric: registerMemory after close");
  if (size == 0) {
    Registration r;
    r.data = data;
    r.remoteBase = reinterpret_cast<uint64_t>(data);
    return r;
  }
  if (kind == MemoryKind::kCuda) return registerCuda(data, size);
  errno = 0;
  ibv_mr* mr = api_.regMr(pd_, data, size, kAccess);
  if (mr == nullptr) {
    int err = errno;
    RF_THROW(
        Error, "verbs fabric: ibv_reg_mr of ", size, " bytes at ", data, " on ", where(), " failed: ", errnoText(err),
        err == ENOMEM || err == EPERM || err == EAGAIN ? " (is the locked-memory limit, ulimit -l, too low?)" : "");
  }
  mrs_.insert(mr);
  Registration r;
  r.handle = mr;
  r.lkey = mr->lkey;
  r.rkey = mr->rkey;
  r.remoteBase = reinterpret_cast<uint64_t>(data);
  r.data = data;
  r.size = size;
  return r;
}

Registration VerbsFabric::registerCuda(void* data, size_t size) {
  auto refuse = [&](const std::string& why) {
    RF_THROW(InvalidArgument, "verbs fabric: GPU memory cannot be registered here (", why,
             "); stage through host memory");
  };
  if (api_.regDmabufMr == nullptr) refuse(api_.library + " has no ibv_reg_dmabuf_mr");
  std::string why;
  CuGetHandle exportRange = cudaDmaBufExport(why);
  if (exportRange == nullptr) refuse(why);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t address = reinterpret_cast<uint64_t>(data);
  const uint64_t base = address & ~(page - 1);
  const uint64_t length = (address + size - base + page - 1) / page * page;
  int fd = -1;
  int cu = exportRange(&fd, base, length, kCuRangeHandleDmaBufFd, 0);
  if (cu != 0 || fd < 0) {
    refuse("cuMemGetHandleForAddressRange gave CUresult " + std::to_string(cu) +
           ": the driver or the kernel has no dma-buf export for this memory");
  }
  errno = 0;
  ibv_mr* mr = api_.regDmabufMr(pd_, 0, length, base, fd, kAccess);
  int err = errno;
  ::close(fd);  // the MR holds its own reference to the dma-buf
  if (mr == nullptr) refuse("ibv_reg_dmabuf_mr on " + where() + " failed: " + errnoText(err));
  mrs_.insert(mr);
  Registration r;
  r.handle = mr;
  r.lkey = mr->lkey;
  r.rkey = mr->rkey;
  r.remoteBase = address;  // the MR's iova is the virtual address of its first page
  r.data = data;
  r.size = size;
  return r;
}

void VerbsFabric::deregister(const Registration& registration) noexcept {
  auto* mr = static_cast<ibv_mr*>(registration.handle);
  if (mr == nullptr || mrs_.erase(mr) == 0) return;  // empty, or already released by close()
  int rc = api_.deregMr(mr);
  if (rc != 0) {
    RF_LOG(kWarning) << "verbs fabric: ibv_dereg_mr on " << where() << " failed: " << rcText(rc);
  }
}

int VerbsFabric::post(int peer, int lane, const void* local, size_t length, const Registration& reg,
                      RemoteAddress remote, bool withImm, uint32_t imm, uint64_t context) {
  if (closed_) return -EBADF;
  if (peer < 0 || peer >= size_ || peer == rank_ || lane < 0 || lane >= lanes_ || context == kNoContext) {
    return -EINVAL;
  }
  Peer& p = peers_[peer];
  if (!p.connected) return -ENOTCONN;
  if (length > maxWriteBytes()) return -EMSGSIZE;
  const auto* bytes = static_cast<const char*>(local);
  const auto* regBytes = static_cast<const char*>(reg.data);
  if (length > 0 && (reg.handle == nullptr || bytes < regBytes || bytes + length > regBytes + reg.size)) {
    return -EINVAL;  // not inside the registration it names
  }
  Lane& l = p.lanes[lane];
  if (l.sends >= maxSendWr_) return -EAGAIN;
  ibv_sge sge;
  sge.addr = reinterpret_cast<uint64_t>(local);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = reg.lkey;
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = context;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = withImm ? htonl(imm) : 0;
  wr.wr.rdma.remote_addr = remote.address;
  wr.wr.rdma.rkey = static_cast<uint32_t>(remote.rkey);
  ibv_send_wr* bad = nullptr;
  int rc = Api::postSend(l.qp, &wr, &bad);
  if (rc != 0) {
    int err = rc > 0 ? rc : (errno != 0 ? errno : EIO);
    return err == ENOMEM ? -EAGAIN : -err;
  }
  ++l.sends;
  return 0;
}

void VerbsFabric::postImmReceives(int peer, int count) {
  RF_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, "verbs fabric: postImmReceives(", peer, ")");
  if (closed_ || count <= 0) return;
  Peer& p = peers_[peer];
  p.room += count;
  if (p.room > maxRecvWr_ && !warnedRecvCap_) {
    warnedRecvCap_ = true;
    RF_LOG(kWarning) << "verbs fabric: room for " << p.room << " immediates from rank " << peer << " but a QP holds "
                     << maxRecvWr_ << " receives: writes beyond that wait in RNR retries";
  }
  for (int l = 0; l < lanes_; ++l) {
    int want = std::min(p.room, maxRecvWr_) - p.lanes[l].receives;
    if (want > 0) postReceives(peer, l, want);
  }
}

void VerbsFabric::postReceives(int peer, int lane, int count) {
  Lane& l = peers_[peer].lanes[lane];
  ibv_recv_wr wrs[64];
  while (count > 0) {
    int n = std::min(count, 64);
    for (int i = 0; i < n; ++i) {
      std::memset(&wrs[i], 0, sizeof(wrs[i]));
      wrs[i].wr_id = kNoContext;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    int rc = Api::postRecv(l.qp, wrs, &bad);
    if (rc == 0) {
      l.receives += n;
    } else if (bad != nullptr && bad >= wrs && bad < wrs + n) {
      l.receives += static_cast<int>(bad - wrs);  // those before the one that failed were posted
    }
    if (rc != 0) {
      fail(peer, "ibv_post_recv failed (" + rcText(rc) + ") " + toRank(peer) + where());
      return;
    }
    count -= n;
  }
}

bool VerbsFabric::convert(const ibv_wc& wc, Completion& out) {
  auto it = byQpNum_.find(wc.qp_num);
  int peer = it != byQpNum_.end() ? it->second.first : -1;
  Lane* lane = it != byQpNum_.end() ? &peers_[peer].lanes[it->second.second] : nullptr;
  const bool receive = wc.wr_id == kNoContext;
  if (lane != nullptr && receive) {
    lane->receives = std::max(0, lane->receives - 1);
    peers_[peer].room = std::max(0, peers_[peer].room - 1);
  } else if (lane != nullptr) {
    lane->sends = std::max(0, lane->sends - 1);
  }
  out = Completion{};
  out.peer = peer;
  if (wc.status != IBV_WC_SUCCESS) {
    if (receive && lane != nullptr && lane->failed) return false;  // flushed after a reported error
    if (lane != nullptr) lane->failed = true;
    out.type = Completion::Type::kError;
    out.context = wc.wr_id;
    char vendor[32];
    std::snprintf(vendor, sizeof(vendor), "0x%x", wc.vendor_err);
    const char* status = api_.wcStatusStr(wc.status);
    out.error =
        std::string(status ? status : "work request failed") + " (vendor_err " + vendor + ") " + toRank(peer) + where();
    if (wc.status == IBV_WC_RETRY_EXC_ERR) out.error += ": the peer did not acknowledge (gone, or unreachable)";
    if (wc.status == IBV_WC_REM_ACCESS_ERR) out.error += ": the peer refused the key or range";
    return true;
  }
  if (receive) {
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) return false;
    out.type = Completion::Type::kImmediate;
    out.imm = ntohl(wc.imm_data);
    return true;
  }
  out.type = Completion::Type::kWriteDone;
  out.context = wc.wr_id;
  return true;
}

void VerbsFabric::drainChannel() {
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  unsigned events = 0;
  while (api_.getCqEvent(channel_, &cq, &cqContext) == 0) ++events;  // the fd is non-blocking
  if (events > 0) api_.ackCqEvents(cq_, events);
}

void VerbsFabric::checkAsync() {
  ibv_async_event event;
  while (api_.getAsyncEvent(ctx_, &event) == 0) {  // the fd is non-blocking
    const char* nameC = api_.eventTypeStr(event.event_type);
    std::string name = nameC ? nameC : "async event " + std::to_string(event.event_type);
    switch (event.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR: {
        auto it = event.element.qp ? byQpNum_.find(event.element.qp->qp_num) : byQpNum_.end();
        int peer = it != byQpNum_.end() ? it->second.first : -1;
        if (it != byQpNum_.end()) peers_[peer].lanes[it->second.second].failed = true;
        fail(peer, name + " " + toRank(peer) + where());
        break;
      }
      case IBV_EVENT_PORT_ERR:
        if (event.element.port_num == port_) fail(-1, name + " on " + where() + ": the port went down");
        break;
      case IBV_EVENT_CQ_ERR:
      case IBV_EVENT_DEVICE_FATAL: fail(-1, name + " on " + where()); break;
      default: RF_LOG(kDebug) << "verbs fabric: " << name << " on " << where();
    }
    api_.ackAsyncEvent(&event);
  }
  nextAsyncCheck_ = std::chrono::steady_clock::now() + kAsyncEvery;
}

int VerbsFabric::poll(Completion* out, int max) {
  if (closed_ || max <= 0) return 0;
  if (armed_) {
    armed_ = false;
    drainChannel();
  }
  if (std::chrono::steady_clock::now() >= nextAsyncCheck_) checkAsync();
  int n = 0;
  while (n < max && !pending_.empty()) {
    out[n++] = std::move(pending_.front());
    pending_.pop_front();
  }
  ibv_wc wcs[32];
  while (n < max) {
    int want = std::min(max - n, 32);
    int got = Api::pollCq(cq_, want, wcs);
    if (got < 0) {
      out[n] = Completion{};
      out[n].type = Completion::Type::kError;
      out[n].context = kNoContext;
      out[n++].error = "ibv_poll_cq failed (" + std::to_string(got) + ") on " + where();
      break;
    }
    for (int i = 0; i < got; ++i) {
      if (convert(wcs[i], out[n])) ++n;
    }
    if (got < want) break;
  }
  return n;
}

bool VerbsFabric::armWait() {
  if (closed_) return false;
  checkAsync();
  if (!pending_.empty()) return false;
  int rc = Api::reqNotifyCq(cq_, 0);
  if (rc != 0) {
    fail(-1, "ibv_req_notify_cq failed (" + rcText(rc) + ") on " + where());
    return false;
  }
  armed_ = true;
  // A completion that arrived before the arm raises no event: look once more.
  ibv_wc wcs[16];
  int got = Api::pollCq(cq_, 16, wcs);
  for (int i = 0; i < got; ++i) {
    Completion c;
    if (convert(wcs[i], c)) pending_.push_back(std::move(c));
  }
  return got == 0;
}

void VerbsFabric::close() noexcept {
  if (closed_) return;
  closed_ = true;
  for (Peer& p : peers_) {
    for (Lane& l : p.lanes) {
      if (l.qp != nullptr && api_.destroyQp(l.qp) != 0) {
        RF_LOG(kWarning) << "verbs fabric: ibv_destroy_qp failed";
      }
      l.qp = nullptr;
    }
  }
  byQpNum_.clear();
  if (cq_ != nullptr) {
    drainChannel();  // ibv_destroy_cq waits for every event it delivered to be acknowledged
    if (api_.destroyCq(cq_) != 0) {
      RF_LOG(kWarning) << "verbs fabric: ibv_destroy_cq failed on " << where();
    }
    cq_ = nullptr;
  }
  if (channel_ != nullptr && api_.destroyCompChannel(channel_) != 0) {
    RF_LOG(kWarning) << "verbs fabric: ibv_destroy_comp_channel failed on " << where();
  }
  channel_ = nullptr;
  for (ibv_mr* mr : mrs_) api_.deregMr(mr);
  mrs_.clear();
  if (pd_ != nullptr && api_.deallocPd(pd_) != 0) {
    RF_LOG(kWarning) << "verbs fabric: ibv_dealloc_pd failed";
  }
  pd_ = nullptr;
  if (ctx_ != nullptr && api_.closeDevice(ctx_) != 0) {
    RF_LOG(kWarning) << "verbs fabric: ibv_close_device failed";
  }
  ctx_ = nullptr;
  pending_.clear();
}

std::unique_ptr<Fabric> open(int rank, int size) {
  std::string why;
  const Api* api = verbsApi(why);
  if (api == nullptr) RF_THROW(Error, "verbs fabric: ", why);
  auto fabric = std::make_unique<VerbsFabric>(*api, rank, size);
  fabric->setup();  // on a throw, the destructor releases what was made
  return fabric;
}

bool usable(std::string& why) {
  const Api* api = verbsApi(why);
  if (api == nullptr) return false;
  HcaSpec spec;
  try {
    spec = HcaSpec::fromEnv();
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
  PortPick pick;
  if (!findPort(*api, spec, false, pick, why)) return false;
  why = pick.device + ":" + std::to_string(pick.port) + " is ACTIVE (" +
        linkLayerName(static_cast<LinkLayer>(pick.portAttr.link_layer)) + ")";
  return true;
}

}  // namespace ringfold::transport::rdma::verbs
