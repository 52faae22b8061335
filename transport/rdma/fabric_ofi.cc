// The ofi fabric: one libfabric FI_EP_RDM endpoint per rank (see fabric_ofi.h for the choices).
#include "transport/rdma/fabric_ofi.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/rdma/ofi_api.h"

namespace ringfold::transport::rdma::ofi {
namespace {

constexpr const char* kDefaultProviders = "efa,verbs;ofi_rxm,tcp;ofi_rxm";
// A post that meets -FI_EAGAIN reads the CQ and tries again this many times before -EAGAIN.
constexpr int kPostRetries = 8;
// Completions read from the CQ at a time.
constexpr int kCqBatch = 32;
// Writes are called ordered only if the provider orders the data of writes at least this large
// (the protocol's slots are 16 KiB; its chunks are cut to maxWriteBytes()).
constexpr uint64_t kMinOrderedWriteBytes = 64 * 1024;
// How long posts to a peer that was connected, with none of our writes to it in flight, may meet
// only -FI_EAGAIN before the peer is declared unreachable (capped by RINGFOLD_TIMEOUT).
constexpr std::chrono::milliseconds kLostConnectionGrace{5000};

using Clock = std::chrono::steady_clock;

// libfabric's functions that are not inlines over ops tables (ofi_api.h); open() loads them first.
const Api& api() {
  std::string why;
  const Api* a = ofiApi(&why);
  if (a == nullptr) RF_THROW(Error, "ofi fabric: ", why);
  return *a;
}

struct InfoFree {
  void operator()(fi_info* info) const { api().freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

std::string fiText(long rc) {
  return detail::concat(api().strerror(static_cast<int>(rc < 0 ? -rc : rc)), " (", rc, ")");
}

// libfabric's codes below FI_ERRNO_OFFSET are errno values; the others become -EIO.
int toErrno(long rc) {
  long e = -rc;
  return e > 0 && e < FI_ERRNO_OFFSET ? static_cast<int>(-e) : -EIO;
}

// The non-empty, blank-trimmed parts of `text` between `sep`s.
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// What fi_getinfo offers for `provider` with our needs as hints; sets *why when nothing.
InfoPtr query(const std::string& provider, bool wantSource, bool wantHmem, std::string* why) {
  InfoPtr hints(api().dupinfo(nullptr));  // fi_allocinfo()
  RF_ENFORCE(hints != nullptr, "fi_allocinfo");
  hints->ep_attr->type = FI_EP_RDM;
  // FI_MSG: only used to post the receives that immediates consume under FI_RX_CQ_DATA.
  hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG;
  if (wantSource) hints->caps |= FI_SOURCE;
  if (wantHmem) hints->caps |= FI_HMEM;
  // Modes we can live with: every op context is an Op starting with fi_context2.
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | (wantHmem ? FI_MR_HMEM : 0);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* info = nullptr;
  int rc = api().getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints.get(), &info);
  if (rc != 0 || info == nullptr) {
    *why = detail::concat("no reliable-datagram endpoint with RMA writes", wantSource ? " and FI_SOURCE" : "",
                          wantHmem ? " and FI_HMEM" : "", ": fi_getinfo ", fiText(rc));
    return nullptr;
  }
  return InfoPtr(info);
}

struct Choice {
  InfoPtr info;
  bool rankInData = false;  // sender's rank in the upper 32 bits of the CQ data
};

// How a provider can carry immediates and name their sender (fabric_ofi.h), or why it cannot.
Choice choose(const std::string& provider, std::string* why) {
  std::vector<bool> hmemTries = hardwareProvider(provider) ? std::vector<bool>{true, false} : std::vector<bool>{false};
  for (bool hmem : hmemTries) {
    InfoPtr info = query(provider, false, hmem, why);
    if (!info) continue;
    size_t dataBytes = info->domain_attr->cq_data_size;
    if (dataBytes >= 8) return {std::move(info), true};
    if (dataBytes < 4) {
      *why = detail::concat("carries ", dataBytes, " bytes of remote CQ data (the protocol needs 4)");
      return {};
    }
    if (std::strstr(info->fabric_attr->prov_name, "ofi_rxm") != nullptr) {
      *why =
          "carries 4 bytes of CQ data and ofi_rxm gives no source address for remote writes, so the sender "
          "of an immediate cannot be known (use RINGFOLD_RDMA_FABRIC=verbs on such machines)";
      return {};
    }
    info = query(provider, true, hmem, why);
    if (info) return {std::move(info), false};
  }
  return {};
}

// One posted operation: its fi_context2 first, so that op_context == the Op.
struct Op {
  fi_context2 fiContext;
  uint64_t context = 0;
  int peer = -1;
  bool receive = false;
};

// What the fabric knows of the connection to one peer (see "Unreachable peers" in the header).
struct PeerState {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  bool connected = false;                         // a post to it was accepted once
  int inFlight = 0;                               // accepted writes not completed yet
  std::optional<Clock::time_point> refusedSince;  // first -EAGAIN returned since the last accepted post
};

class OfiFabric final : public Fabric {
 public:
  OfiFabric(int rank, int size) : rank_(rank), size_(size), peers_(size) {}
  ~OfiFabric() override { close(); }

  void start(Choice choice);

  const char* kind() const override { return "ofi"; }
  std::string describe() const override { return describe_; }
  int lanes() const override { return 1; }
  bool writesOrdered() const override { return ordered_; }
  size_t maxWriteBytes() const override { return maxWrite_; }

  std::string localAddress(int) override { return name_; }
  void insertPeer(int peer, const std::string& address) override;

  Registration registerMemory(void* data, size_t size, MemoryKind kind) override;
  void deregister(const Registration& registration) noexcept override;

  int postWrite(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                RemoteAddress remote, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, std::nullopt, context);
  }
  int postWriteImm(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                   RemoteAddress remote, uint32_t imm, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, imm, context);
  }
  void postImmReceives(int peer, int count) override;

  int poll(Completion* out, int max) override;
  bool armWait() override;
  int waitFd() const override { return waitFd_; }
  void close() noexcept override;

 private:
  int post(int peer, int lane, const void* local, size_t length, const Registration& localReg, RemoteAddress remote,
           std::optional<uint32_t> imm, uint64_t context);
  Op* takeOp(int peer, uint64_t context, bool receive);
  void releaseOp(Op* op) { freeOps_.push_back(op); }
  // Reads up to `budget` CQ entries into pending_.
  void readCq(int budget);
  void translate(const fi_cq_data_entry& entry, fi_addr_t source);
  void readError();
  int senderOf(uint64_t data, fi_addr_t source) const;
  void postReceives();
  // -EAGAIN, or 0 with a kError queued when `peer` has refused posts for too long.
  int refused(int peer, uint64_t context);
  void pushError(int peer, uint64_t context, std::string text) {
    pending_.push_back(Completion{Completion::Type::kError, peer, 0, context, std::move(text)});
  }
  void writeEnded(const Op* op) {
    if (op->peer >= 0 && op->peer < size_) --peers_[op->peer].inFlight;
  }

  const int rank_;
  const int size_;
  InfoPtr info_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool closed_ = false;

  bool rankInData_ = false;  // else the source address names the sender
  bool rxCqData_ = false;    // FI_RX_CQ_DATA: immediates consume posted receives
  bool provKey_ = false;
  bool virtAddr_ = false;
  bool mrEndpoint_ = false;
  bool hmem_ = false;
  bool ordered_ = false;
  size_t maxWrite_ = 0;
  int waitFd_ = -1;
  std::string name_;
  std::string describe_;

  std::chrono::milliseconds connectTimeout_{0};  // RINGFOLD_TIMEOUT
  std::chrono::milliseconds lostGrace_{0};
  std::vector<PeerState> peers_;
  std::unordered_map<fi_addr_t, int> rankOf_;
  std::unordered_set<fid_mr*> mrs_;
  uint64_t nextKey_ = 1;
  std::deque<Op> opStore_;  // stable addresses
  std::vector<Op*> freeOps_;
  std::deque<Completion> pending_;
  int receivesOwed_ = 0;
};

#define RF_OFI_CHECK(call, what)                                                  \
  do {                                                                            \
    int rf_rc_ = static_cast<int>(call);                                          \
    if (rf_rc_ != 0) RF_THROW(Error, "ofi fabric: ", what, ": ", fiText(rf_rc_)); \
  } while (0)

void OfiFabric::start(Choice choice) {
  info_ = std::move(choice.info);
  rankInData_ = choice.rankInData;
  fi_info* info = info_.get();
  connectTimeout_ = params::kTimeout.asSeconds();
  lostGrace_ = std::min(connectTimeout_, kLostConnectionGrace);
  const uint64_t mrMode = info->domain_attr->mr_mode;
  rxCqData_ = (info->mode & FI_RX_CQ_DATA) != 0 || (info->rx_attr->mode & FI_RX_CQ_DATA) != 0;
  provKey_ = (mrMode & FI_MR_PROV_KEY) != 0;
  virtAddr_ = (mrMode & FI_MR_VIRT_ADDR) != 0;
  mrEndpoint_ = (mrMode & FI_MR_ENDPOINT) != 0;
  hmem_ = (info->caps & FI_HMEM) != 0;
  RF_ENFORCE(info->domain_attr->mr_key_size <= 8, "ofi fabric: ", info->fabric_attr->prov_name, " needs ",
             info->domain_attr->mr_key_size, "-byte raw memory keys");

  // Ordering. The protocol needs: a write-with-imm is placed at the peer only after every
  // earlier write on the same endpoint to that peer. In libfabric terms that is FI_ORDER_WAW
  // (writes, writedata included, are processed at the target in the order they were posted)
  // for data of up to ep_attr->max_order_waw_size bytes. tcp;ofi_rxm offers both without
  // limit (one TCP stream per pair carries the operations in order), verbs RC as well, EFA only
  // for small sizes. We ask for exactly the write ordering we rely on (other order bits can
  // cost a provider work) and then cut writes to the ordered size.
  uint64_t waw = FI_ORDER_WAW;
#ifdef FI_ORDER_RMA_WAW
  waw |= FI_ORDER_RMA_WAW;  // libfabric >= 1.17 may name RMA ordering apart
#endif
  maxWrite_ = info->ep_attr->max_msg_size;
  uint64_t order = info->tx_attr->msg_order & waw;
  if (order != 0 && info->ep_attr->max_order_waw_size >= kMinOrderedWriteBytes) {
    ordered_ = true;
    maxWrite_ = std::min<uint64_t>(maxWrite_, info->ep_attr->max_order_waw_size);
  } else {
    order = FI_ORDER_NONE;
  }
  info->tx_attr->msg_order = order;
  info->rx_attr->msg_order = order;
  RF_ENFORCE(maxWrite_ > 0, "ofi fabric: provider reports max_msg_size 0");

  RF_OFI_CHECK(api().fabric(info->fabric_attr, &fabric_, nullptr), "fi_fabric");
  RF_OFI_CHECK(fi_domain(fabric_, info, &domain_, nullptr), "fi_domain");

  fi_av_attr avAttr{};
  avAttr.type = info->domain_attr->av_type;
  avAttr.count = static_cast<size_t>(size_);
  RF_OFI_CHECK(fi_av_open(domain_, &avAttr, &av_, nullptr), "fi_av_open");

  // The CQ with an fd to sleep on where the provider has one; else FI_WAIT_NONE.
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_DATA;
  cqAttr.wait_obj = FI_WAIT_FD;
  cqAttr.size = info->tx_attr->size + info->rx_attr->size;
  int rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr);
  if (rc != 0) {
    RF_LOG(kInfo) << "ofi fabric: no FI_WAIT_FD completion queue (" << fiText(rc) << "), polling instead";
    cq_ = nullptr;
    cqAttr.wait_obj = FI_WAIT_NONE;
    RF_OFI_CHECK(fi_cq_open(domain_, &cqAttr, &cq_, nullptr), "fi_cq_open");
  } else {
    int fd = -1;
    rc = fi_control(&cq_->fid, FI_GETWAIT, &fd);
    if (rc == 0 && fd >= 0) {
      waitFd_ = fd;
    } else {
      RF_LOG(kInfo) << "ofi fabric: FI_GETWAIT gave no fd (" << fiText(rc) << "), polling instead";
    }
  }

  RF_OFI_CHECK(fi_endpoint(domain_, info, &ep_, nullptr), "fi_endpoint");
  RF_OFI_CHECK(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
  RF_OFI_CHECK(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
  RF_OFI_CHECK(fi_enable(ep_), "fi_enable");

  size_t nameLen = 0;
  rc = fi_getname(&ep_->fid, nullptr, &nameLen);
  RF_ENFORCE(rc == -FI_ETOOSMALL && nameLen > 0, "ofi fabric: fi_getname: ", fiText(rc));
  name_.assign(nameLen, '\0');
  RF_OFI_CHECK(fi_getname(&ep_->fid, name_.data(), &nameLen), "fi_getname");
  name_.resize(nameLen);

  describe_ =
      detail::concat(info->fabric_attr->prov_name, " on ", info->domain_attr->name, " (", info->fabric_attr->name, ")");
  RF_LOG(kInfo) << "ofi fabric: " << describe_ << "; sender by " << (rankInData_ ? "rank in CQ data" : "FI_SOURCE")
                << ", cq_data_size " << info->domain_attr->cq_data_size << ", mr_mode "
                << api().tostr(&info->domain_attr->mr_mode, FI_TYPE_MR_MODE) << ", mode "
                << api().tostr(&info->mode, FI_TYPE_MODE) << ", writes " << (ordered_ ? "ordered" : "unordered")
                << ", max write " << maxWrite_ << ", wait fd " << waitFd_;
}

void OfiFabric::insertPeer(int peer, const std::string& address) {
  RF_ENFORCE(!closed_, "ofi fabric: insertPeer after close");
  RF_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, "ofi fabric: bad peer ", peer);
  PeerState& state = peers_[peer];
  if (state.addr != FI_ADDR_NOTAVAIL) {
    fi_addr_t old = state.addr;
    rankOf_.erase(old);
    fi_av_remove(av_, &old, 1, 0);
    state = PeerState{};
  }
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(av_, address.data(), 1, &addr, 0, nullptr);
  if (rc != 1 || addr == FI_ADDR_NOTAVAIL) {
    throw IoError(peer, detail::concat("ofi fabric: fi_av_insert of rank ", peer, "'s address (", address.size(),
                                       " bytes) failed: ", rc < 0 ? fiText(rc) : std::string("not inserted")));
  }
  state.addr = addr;
  rankOf_[addr] = peer;
}

Registration OfiFabric::registerMemory(void* data, size_t size, MemoryKind kind) {
  RF_ENFORCE(!closed_, "ofi fabric: registerMemory after close");
  const char* prov = info_->fabric_attr->prov_name;
  if (kind == MemoryKind::kCuda && !hmem_) {
    RF_THROW(InvalidArgument, "ofi fabric: ", prov,
             " cannot register GPU memory (no FI_HMEM); stage through host memory");
  }
  iovec iov{data, size};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_WRITE | FI_REMOTE_WRITE;
  attr.requested_key = provKey_ ? 0 : nextKey_++;
  attr.iface = kind == MemoryKind::kCuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
  fid_mr* mr = nullptr;
  int rc = fi_mr_regattr(domain_, &attr, 0, &mr);
  if (rc != 0) {
    if (kind == MemoryKind::kCuda) {
      RF_THROW(InvalidArgument, "ofi fabric: ", prov, " cannot register GPU memory at ", data, " (", size,
               " bytes): ", fiText(rc), "; stage through host memory");
    }
    RF_THROW(Error, "ofi fabric: fi_mr_regattr of ", size, " bytes at ", data, ": ", fiText(rc));
  }
  if (mrEndpoint_) {
    rc = fi_mr_bind(mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      fi_close(&mr->fid);
      RF_THROW(Error, "ofi fabric: binding a registration to the endpoint: ", fiText(rc));
    }
  }
  mrs_.insert(mr);
  Registration reg;
  reg.handle = mr;
  reg.desc = fi_mr_desc(mr);
  reg.rkey = fi_mr_key(mr);
  reg.remoteBase = virtAddr_ ? reinterpret_cast<uint64_t>(data) : 0;
  reg.data = data;
  reg.size = size;
  return reg;
}

void OfiFabric::deregister(const Registration& registration) noexcept {
  auto* mr = static_cast<fid_mr*>(registration.handle);
  if (mr == nullptr || mrs_.erase(mr) == 0) return;  // unknown, or released by close()
  int rc = fi_close(&mr->fid);
  if (rc != 0) {
    RF_LOG(kWarning) << "ofi fabric: closing a registration: " << fiText(rc);
  }
}

Op* OfiFabric::takeOp(int peer, uint64_t context, bool receive) {
  Op* op;
  if (freeOps_.empty()) {
    op = &opStore_.emplace_back();
  } else {
    op = freeOps_.back();
    freeOps_.pop_back();
  }
  std::memset(&op->fiContext, 0, sizeof(op->fiContext));
  op->context = context;
  op->peer = peer;
  op->receive = receive;
  return op;
}

int OfiFabric::post(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                    RemoteAddress remote, std::optional<uint32_t> imm, uint64_t context) {
  if (closed_) return -ESHUTDOWN;
  if (peer < 0 || peer >= size_ || peer == rank_ || lane != 0 || length > maxWrite_) return -EINVAL;
  PeerState& state = peers_[peer];
  fi_addr_t dest = state.addr;
  if (dest == FI_ADDR_NOTAVAIL) return -ENOTCONN;
  Op* op = takeOp(peer, context, false);
  void* buf = const_cast<void*>(local);
  for (int attempt = 0;; ++attempt) {
    ssize_t rc;
    if (imm) {
      uint64_t data = rankInData_ ? (uint64_t(rank_) + 1) << 32 | *imm : *imm;
      rc = fi_writedata(ep_, buf, length, localReg.desc, data, dest, remote.address, remote.rkey, &op->fiContext);
    } else {
      rc = fi_write(ep_, buf, length, localReg.desc, dest, remote.address, remote.rkey, &op->fiContext);
    }
    if (rc == 0) {
      state.connected = true;
      state.refusedSince.reset();
      ++state.inFlight;
      return 0;
    }
    if (rc != -FI_EAGAIN) {
      releaseOp(op);
      RF_LOG(kDebug) << "ofi fabric: write to rank " << peer << " refused: " << fiText(rc);
      return toErrno(rc);
    }
    if (attempt == kPostRetries) break;
    // ofi_rxm connects lazily and libfabric queues fill: progress, then try again.
    readCq(kCqBatch);
  }
  releaseOp(op);
  return refused(peer, context);
}

int OfiFabric::refused(int peer, uint64_t context) {
  PeerState& state = peers_[peer];
  const auto now = Clock::now();
  if (!state.refusedSince) state.refusedSince = now;
  // With our writes to the peer in flight, -EAGAIN may be a full queue behind a slow reader;
  // with none, it is the connection: never made yet (the peer must poll to accept it), or lost
  // and being made again, which ofi_rxm does silently, refused or not, for ever.
  const bool lost = state.connected && state.inFlight == 0;
  const auto limit = lost ? lostGrace_ : connectTimeout_;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - *state.refusedSince);
  if (waited < limit) return -EAGAIN;
  pushError(
      peer, context,
      detail::concat("ofi fabric: rank ", peer, " unreachable: every write to it refused for ", waited.count() / 1000.0,
                     " s (", lost ? "its connection was lost" : "no connection", "; the provider reports no more)"));
  return 0;
}

void OfiFabric::postImmReceives(int, int count) {
  if (!rxCqData_ || closed_ || count <= 0) return;
  receivesOwed_ += count;
  postReceives();
}

void OfiFabric::postReceives() {
  while (receivesOwed_ > 0) {
    Op* op = takeOp(-1, 0, true);
    ssize_t rc = fi_recv(ep_, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &op->fiContext);
    if (rc != 0) {
      releaseOp(op);
      if (rc != -FI_EAGAIN) {
        RF_LOG(kWarning) << "ofi fabric: posting a receive for immediates: " << fiText(rc);
      }
      return;  // owed ones are posted at the next poll()
    }
    --receivesOwed_;
  }
}

int OfiFabric::senderOf(uint64_t data, fi_addr_t source) const {
  if (rankInData_) {
    uint64_t tagged = data >> 32;
    return tagged >= 1 && tagged <= static_cast<uint64_t>(size_) ? static_cast<int>(tagged - 1) : -1;
  }
  auto it = rankOf_.find(source);
  return it == rankOf_.end() ? -1 : it->second;
}

void OfiFabric::translate(const fi_cq_data_entry& entry, fi_addr_t source) {
  auto* op = static_cast<Op*>(entry.op_context);
  // One of our writes (some providers flag it FI_REMOTE_CQ_DATA too when it carried data).
  if ((entry.flags & (FI_REMOTE_WRITE | FI_RECV)) == 0 && op != nullptr && !op->receive) {
    Completion c;
    c.type = Completion::Type::kWriteDone;
    c.peer = op->peer;
    c.context = op->context;
    writeEnded(op);
    releaseOp(op);
    pending_.push_back(std::move(c));
    return;
  }
  // A remote event. Only under FI_RX_CQ_DATA does it carry a context: the receive it consumed.
  if (rxCqData_ && op != nullptr && op->receive) {
    releaseOp(op);
    if ((entry.flags & FI_REMOTE_CQ_DATA) == 0) ++receivesOwed_;  // a message, not ours
  }
  if ((entry.flags & FI_REMOTE_CQ_DATA) == 0) return;
  Completion c;
  c.type = Completion::Type::kImmediate;
  c.imm = static_cast<uint32_t>(entry.data);
  c.peer = senderOf(entry.data, source);
  if (c.peer < 0) {
    RF_LOG(kWarning) << "ofi fabric: an immediate from an unknown sender (imm " << c.imm << ")";
  }
  pending_.push_back(std::move(c));
}

void OfiFabric::readError() {
  fi_cq_err_entry err{};
  ssize_t rc = fi_cq_readerr(cq_, &err, 0);
  if (rc == -FI_EAGAIN) return;
  if (rc < 0) return pushError(-1, 0, detail::concat("ofi fabric: fi_cq_readerr: ", fiText(rc)));
  char buf[256] = {};
  const char* detailText = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
  std::string why = detail::concat(api().strerror(err.err));
  if (detailText != nullptr && detailText[0] != '\0') why += detail::concat(" (", detailText, ")");
  auto* op = static_cast<Op*>(err.op_context);
  if (op != nullptr && !op->receive) {
    writeEnded(op);
    pushError(op->peer, op->context, detail::concat("ofi fabric: write to rank ", op->peer, " failed: ", why));
    releaseOp(op);
    return;
  }
  if (op != nullptr) {  // one of our receives for immediates
    releaseOp(op);
    if (err.err == FI_ECANCELED) return;
    ++receivesOwed_;
  }
  pushError(-1, 0, detail::concat("ofi fabric: completion error outside any write: ", why));
}

void OfiFabric::readCq(int budget) {
  fi_cq_data_entry entries[kCqBatch];
  fi_addr_t sources[kCqBatch];
  while (budget > 0) {
    int want = std::min(budget, kCqBatch);
    ssize_t got = rankInData_ ? fi_cq_read(cq_, entries, want) : fi_cq_readfrom(cq_, entries, want, sources);
    if (got == -FI_EAGAIN) return;
    if (got == -FI_EAVAIL) {
      readError();
      --budget;
      continue;
    }
    if (got < 0) return pushError(-1, 0, detail::concat("ofi fabric: fi_cq_read: ", fiText(got)));
    for (ssize_t i = 0; i < got; ++i) translate(entries[i], rankInData_ ? FI_ADDR_NOTAVAIL : sources[i]);
    budget -= static_cast<int>(got);
    if (got < want) return;
  }
}

int OfiFabric::poll(Completion* out, int max) {
  if (closed_) return 0;
  if (receivesOwed_ > 0) postReceives();
  int have = static_cast<int>(pending_.size());
  readCq(std::max(max - have, 1));  // reads at least one entry: polling is what drives progress
  int n = 0;
  while (n < max && !pending_.empty()) {
    out[n++] = std::move(pending_.front());
    pending_.pop_front();
  }
  return n;
}

bool OfiFabric::armWait() {
  if (closed_ || !pending_.empty()) return false;
  if (waitFd_ < 0) {
    readCq(kCqBatch);
    return pending_.empty();
  }
  fid* fids[1] = {&cq_->fid};
  return fi_trywait(fabric_, fids, 1) == FI_SUCCESS;
}

void OfiFabric::close() noexcept {
  if (closed_) return;
  closed_ = true;
  auto closeFid = [](fid* f, const char* what) {
    if (f == nullptr) return;
    int rc = fi_close(f);
    if (rc != 0) {
      RF_LOG(kWarning) << "ofi fabric: closing the " << what << ": " << fiText(rc);
    }
  };
  for (fid_mr* mr : mrs_) closeFid(&mr->fid, "registration");
  mrs_.clear();
  if (ep_ != nullptr) closeFid(&ep_->fid, "endpoint");
  if (cq_ != nullptr) closeFid(&cq_->fid, "completion queue");
  if (av_ != nullptr) closeFid(&av_->fid, "address vector");
  if (domain_ != nullptr) closeFid(&domain_->fid, "domain");
  if (fabric_ != nullptr) closeFid(&fabric_->fid, "fabric");
  ep_ = nullptr, cq_ = nullptr, av_ = nullptr, domain_ = nullptr, fabric_ = nullptr;
  waitFd_ = -1;
  pending_.clear();
}

}  // namespace

bool hardwareProvider(const std::string& providerName) {
  static const char* const kHardware[] = {"efa", "verbs", "psm", "psm2", "psm3", "opx",
                                          "cxi", "usnic", "gni", "ucx",  "bgq",  "mlx"};
  for (std::string part : split(providerName, ';')) {
    std::transform(part.begin(), part.end(), part.begin(), [](unsigned char ch) { return std::tolower(ch); });
    for (const char* name : kHardware) {
      if (part == name) return true;
    }
  }
  return false;
}

std::unique_ptr<Fabric> open(int rank, int size) {
  RF_ENFORCE(size >= 1 && rank >= 0 && rank < size, "ofi fabric: bad rank ", rank, " of ", size);
  std::string wanted = params::kOfiProvider.str();
  std::string source = wanted.empty() ? std::string("the default list") : detail::concat("'", wanted, "'");
  if (wanted.empty()) wanted = kDefaultProviders;
  std::string reasons;
  for (const std::string& provider : split(wanted, ',')) {
    std::string why;
    Choice choice = choose(provider, &why);
    if (!choice.info) {
      reasons += detail::concat("\n  ", provider, ": ", why);
      continue;
    }
    auto fabric = std::make_unique<OfiFabric>(rank, size);
    try {
      fabric->start(std::move(choice));
      return fabric;
    } catch (const Error& e) {
      reasons += detail::concat("\n  ", provider, ": ", e.what());
    }
  }
  RF_THROW(Error, "ofi fabric: no libfabric provider fits (RINGFOLD_OFI_PROVIDER/FI_PROVIDER: ", source, "):", reasons);
}

}  // namespace ringfold::transport::rdma::ofi
