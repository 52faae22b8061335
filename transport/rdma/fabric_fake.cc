// The fake fabric: one process-wide network of endpoints (see fabric_fake.h for the model).
#include "transport/rdma/fabric_fake.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/logging.h"

namespace ringfold::transport::rdma::fake {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAddressPrefix = "fake:";

struct Region {
  uintptr_t base = 0;
  size_t size = 0;
};

bool inside(uintptr_t base, size_t size, uint64_t address, size_t length) {
  return address >= base && length <= size && address - base <= size - length;
}

// One queued write, from the endpoint `from` (rank fromRank) to the endpoint `to` (the poster's
// peer toRank). `local` is read only when it lands, and only while `from` is open.
struct Write {
  uint64_t seq = 0;  // arrival order at the target
  uint64_t from = 0;
  int fromRank = -1;
  uint64_t to = 0;
  int toRank = -1;
  int lane = 0;
  bool ordered = true;
  const char* local = nullptr;
  size_t length = 0;
  uint64_t localKey = 0;
  RemoteAddress remote{};
  bool hasImm = false;
  uint32_t imm = 0;
  uint64_t context = 0;
};

struct Endpoint {
  uint64_t serial = 0;
  int rank = 0;
  int size = 0;
  int efd = -1;
  bool gone = false;               // disappear()ed: takes nothing, lands nothing, reports nothing
  std::vector<uint64_t> peers;     // peer rank -> endpoint serial (0: not inserted)
  std::vector<int64_t> receives;   // peer rank -> receives posted and not consumed
  std::unordered_map<uint64_t, Region> regions;  // rkey -> registration
  std::vector<Write> inbound;      // queued to land here, in arrival order
  bool inboundReady = false;       // something arrived (or receives were posted) since the last poll
  std::deque<Completion> cq;
  int inflight = 0;                // posts whose completion poll() has not returned yet
};

// A write to a gone endpoint: its poster learns after goneDelayMs.
struct Delayed {
  Clock::time_point due;
  uint64_t order = 0;
  uint64_t poster = 0;
  int peer = -1;
  uint64_t context = 0;
  bool operator>(const Delayed& other) const { return std::tie(due, order) > std::tie(other.due, other.order); }
};

void signal(const Endpoint& endpoint) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(endpoint.efd, &one, sizeof one);
}

void drain(const Endpoint& endpoint) {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(endpoint.efd, &count, sizeof count);
}

std::string goneText(int peer) { return detail::concat("peer rank ", peer, " is gone (fake fabric)"); }

// The process-wide network. Everything in it is guarded by mu; it is never destroyed (its timer
// thread may outlive main's statics).
class Network {
 public:
  static Network& get() {
    static Network* network = new Network;
    return *network;
  }

  std::mutex mu;
  Faults faults;
  Counters counters;

  Endpoint* find(uint64_t serial) {
    auto it = endpoints_.find(serial);
    return it == endpoints_.end() ? nullptr : it->second.get();
  }
  Endpoint* live(uint64_t serial) {
    Endpoint* endpoint = find(serial);
    return endpoint != nullptr && !endpoint->gone ? endpoint : nullptr;
  }

  Endpoint& add(int rank, int size, int efd) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->serial = ++nextSerial_;
    endpoint->rank = rank;
    endpoint->size = size;
    endpoint->efd = efd;
    endpoint->peers.assign(size, 0);
    endpoint->receives.assign(size, 0);
    Endpoint& ref = *endpoint;
    endpoints_.emplace(ref.serial, std::move(endpoint));
    return ref;
  }

  void remove(uint64_t serial) {
    if (Endpoint* endpoint = find(serial)) {
      vanish(*endpoint);
      endpoints_.erase(serial);
    }
  }

  uint64_t newKey() { return ++nextKey_; }

  void reseed() {
    rng_.seed(faults.seed);
    writeIndex_ = 0;
  }

  // A post accepted by a live endpoint: fails, is withheld, or is queued at its target.
  void post(Endpoint& poster, Write write) {
    const bool counted = faults.errorFromRank < 0 || write.fromRank == faults.errorFromRank;
    const int64_t index = counted ? writeIndex_++ : -1;
    bool fail = counted && faults.errorAfterWrites == index;
    if (faults.errorProbability > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < faults.errorProbability) {
      fail = true;
    }
    if (fail) {
      complete(poster, write, detail::concat("injected error on a write to peer rank ", write.toRank, " (fake fabric)"));
      return;
    }
    if (write.hasImm && faults.withholdImm && faults.withholdImm(write.fromRank, write.toRank, write.imm)) {
      withheld_.push_back(write);
      return;
    }
    route(std::move(write));
  }

  void releaseWithheld() {
    std::vector<Write> withheld = std::move(withheld_);
    withheld_.clear();
    for (Write& write : withheld) {
      if (live(write.from) != nullptr) route(std::move(write));
    }
  }

  void dropStaleWithheld() {
    std::erase_if(withheld_, [&](const Write& w) { return live(w.from) == nullptr; });
  }

  void disappear(int rank) {
    for (auto& [serial, endpoint] : endpoints_) {
      if (endpoint->rank == rank && !endpoint->gone) vanish(*endpoint);
    }
  }

  void vanish(Endpoint& endpoint) {
    if (endpoint.gone) return;
    endpoint.gone = true;
    for (const Write& write : endpoint.inbound) {
      if (live(write.from) != nullptr) scheduleGone(write);
    }
    endpoint.inbound.clear();
    endpoint.cq.clear();
    endpoint.inboundReady = false;
  }

  // Lands what may land at `target` (called from its poll).
  void deliver(Endpoint& target) {
    target.inboundReady = false;
    if (target.inbound.empty()) return;
    std::vector<Write> order = std::move(target.inbound);
    target.inbound.clear();
    if (faults.reorder) shuffle(order);
    std::set<std::pair<uint64_t, int>> blocked;  // ordered lanes waiting behind an immediate
    std::vector<Write> keep;
    for (Write& write : order) {
      const auto lane = std::make_pair(write.from, write.lane);
      if (write.ordered && blocked.count(lane) != 0) {
        keep.push_back(std::move(write));
        continue;
      }
      Endpoint* poster = live(write.from);
      if (poster == nullptr) continue;  // a gone poster's writes never land
      if (write.hasImm && target.receives[write.fromRank] <= 0) {
        if (write.ordered) blocked.insert(lane);
        keep.push_back(std::move(write));
        continue;
      }
      land(write, *poster, target);
    }
    std::sort(keep.begin(), keep.end(), [](const Write& a, const Write& b) { return a.seq < b.seq; });
    target.inbound = std::move(keep);
  }

 private:
  Network() = default;

  void route(Write write) {
    Endpoint* target = live(write.to);
    if (target == nullptr) {
      scheduleGone(write);
      return;
    }
    write.seq = nextSeq_++;
    target->inbound.push_back(std::move(write));
    target->inboundReady = true;
    signal(*target);
  }

  // Ordered writes keep their lane's order; each unordered write is a lane of its own. A random
  // lane goes next at every step.
  void shuffle(std::vector<Write>& writes) {
    std::map<std::tuple<uint64_t, int, uint64_t>, size_t> index;
    std::vector<std::vector<Write>> groups;
    for (Write& write : writes) {
      const auto key = std::make_tuple(write.from, write.lane, write.ordered ? 0 : write.seq + 1);
      auto [it, fresh] = index.try_emplace(key, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(std::move(write));
    }
    writes.clear();
    std::vector<size_t> next(groups.size(), 0);
    std::vector<size_t> open(groups.size());
    std::iota(open.begin(), open.end(), 0);
    while (!open.empty()) {
      const size_t pick = rng_() % open.size();
      const size_t group = open[pick];
      writes.push_back(std::move(groups[group][next[group]++]));
      if (next[group] == groups[group].size()) {
        open[pick] = open.back();
        open.pop_back();
      }
    }
  }

  void land(const Write& write, Endpoint& poster, Endpoint& target) {
    if (write.length > 0) {
      auto remote = target.regions.find(write.remote.rkey);
      if (remote == target.regions.end() ||
          !inside(remote->second.base, remote->second.size, write.remote.address, write.length)) {
        std::ostringstream what;
        what << "remote access error: " << write.length << " bytes at 0x" << std::hex << write.remote.address
             << " with rkey 0x" << write.remote.rkey << std::dec << " are not inside a registration of peer rank "
             << write.toRank << " (fake fabric)";
        complete(poster, write, what.str());
        return;
      }
      auto local = poster.regions.find(write.localKey);
      if (local == poster.regions.end() ||
          !inside(local->second.base, local->second.size, reinterpret_cast<uintptr_t>(write.local), write.length)) {
        complete(poster, write,
                 detail::concat("local protection error: the source of a write to peer rank ", write.toRank,
                                " was deregistered before it landed (fake fabric)"));
        return;
      }
      std::memmove(reinterpret_cast<void*>(write.remote.address), write.local, write.length);
    }
    counters.writes++;
    counters.bytes += write.length;
    if (write.hasImm) {
      target.receives[write.fromRank]--;
      Completion immediate;
      immediate.type = Completion::Type::kImmediate;
      immediate.peer = write.fromRank;
      immediate.imm = write.imm;
      target.cq.push_back(std::move(immediate));
      counters.immediates++;
    }
    complete(poster, write, {});
  }

  // The poster's completion of `write`: kWriteDone, or kError with `error`.
  void complete(Endpoint& poster, const Write& write, std::string error) {
    Completion completion;
    completion.type = error.empty() ? Completion::Type::kWriteDone : Completion::Type::kError;
    completion.peer = write.toRank;
    completion.context = write.context;
    if (!error.empty()) counters.errors++;
    completion.error = std::move(error);
    poster.cq.push_back(std::move(completion));
    signal(poster);
  }

  void scheduleGone(const Write& write) {
    delayed_.push(Delayed{Clock::now() + std::chrono::milliseconds(faults.goneDelayMs), nextSeq_++, write.from,
                          write.toRank, write.context});
    if (!timerStarted_) {
      timerStarted_ = true;
      std::thread([this] { timerLoop(); }).detach();
    }
    timerCv_.notify_all();
  }

  void timerLoop() {
    std::unique_lock lock(mu);
    for (;;) {
      if (delayed_.empty()) {
        timerCv_.wait(lock);
        continue;
      }
      const Delayed next = delayed_.top();
      if (Clock::now() < next.due) {
        timerCv_.wait_until(lock, next.due);
        continue;
      }
      delayed_.pop();
      if (Endpoint* poster = live(next.poster)) {
        complete(*poster, Write{.toRank = next.peer, .context = next.context}, goneText(next.peer));
      }
    }
  }

  std::unordered_map<uint64_t, std::unique_ptr<Endpoint>> endpoints_;
  uint64_t nextSerial_ = 0;
  uint64_t nextKey_ = 0x5a000;  // rkeys are network-wide, so a key used at the wrong peer fails
  uint64_t nextSeq_ = 0;
  int64_t writeIndex_ = 0;
  std::mt19937_64 rng_{1};
  std::vector<Write> withheld_;
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<>> delayed_;
  std::condition_variable timerCv_;
  bool timerStarted_ = false;
};

std::string describeFaults(const Faults& faults, int lanes, bool ordered, size_t maxWriteBytes, int maxInflight) {
  std::vector<std::string> parts;
  if (lanes != 1) parts.push_back(detail::concat(lanes, " lanes"));
  if (!ordered) parts.push_back("unordered");
  if (faults.reorder) parts.push_back(detail::concat("reorder (seed ", faults.seed, ")"));
  if (faults.errorProbability > 0) {
    parts.push_back(detail::concat("error probability ", faults.errorProbability, " (seed ", faults.seed, ")"));
  }
  if (faults.errorAfterWrites >= 0) {
    parts.push_back(detail::concat("error at write ", faults.errorAfterWrites,
                                   faults.errorFromRank >= 0 ? detail::concat(" of rank ", faults.errorFromRank) : ""));
  }
  if (faults.withholdImm) parts.push_back("withholding immediates");
  if (maxWriteBytes != Faults{}.maxWriteBytes) parts.push_back(detail::concat("max write ", maxWriteBytes, " bytes"));
  if (maxInflight != Faults{}.maxInflight) parts.push_back(detail::concat("max ", maxInflight, " in flight"));
  std::string text = "fake (ranks as threads)";
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? "; faults: " : ", ") + parts[i];
  return text;
}

class FakeFabric final : public Fabric {
 public:
  FakeFabric(int rank, int size) : rank_(rank), size_(size) {
    efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    RF_CHECK_ERRNO(efd_, "eventfd for the fake fabric");
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    lanes_ = net.faults.lanes;
    ordered_ = net.faults.ordered;
    maxWriteBytes_ = net.faults.maxWriteBytes;
    maxInflight_ = net.faults.maxInflight;
    serial_ = net.add(rank, size, efd_).serial;
  }
  ~FakeFabric() override { close(); }

  uint64_t serial() const { return serial_; }

  const char* kind() const override { return "fake"; }
  std::string describe() const override {
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    return describeFaults(net.faults, lanes_, ordered_, maxWriteBytes_, maxInflight_);
  }
  int lanes() const override { return lanes_; }
  bool writesOrdered() const override { return ordered_; }
  size_t maxWriteBytes() const override { return maxWriteBytes_; }

  std::string localAddress(int peer) override {
    checkPeer(peer);
    return kAddressPrefix + std::to_string(serial_);
  }

  void insertPeer(int peer, const std::string& address) override {
    checkPeer(peer);
    const std::string digits = address.substr(std::min(address.size(), std::strlen(kAddressPrefix)));
    if (address.rfind(kAddressPrefix, 0) != 0 || digits.empty() ||
        digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 19) {
      RF_THROW(InvalidArgument, "fake fabric: '", address, "' from peer rank ", peer, " is not a fake address");
    }
    const uint64_t serial = std::stoull(digits);
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    Endpoint& self = mine(net);
    if (const Endpoint* other = net.find(serial); other != nullptr && (other->rank != peer || other->size != size_)) {
      RF_THROW(InvalidArgument, "fake fabric: address ", address, " given for peer rank ", peer, " of ", size_,
               " belongs to rank ", other->rank, " of ", other->size);
    }
    self.peers[peer] = serial;
  }

  Registration registerMemory(void* data, size_t size, MemoryKind kind) override {
    if (kind != MemoryKind::kHost) RF_THROW(InvalidArgument, "the fake fabric registers host memory only");
    if (data == nullptr && size > 0) RF_THROW(InvalidArgument, "fake fabric: registering ", size, " bytes at null");
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    Endpoint& self = mine(net);
    Registration registration;
    registration.rkey = net.newKey();
    registration.data = data;
    registration.size = size;
    registration.remoteBase = reinterpret_cast<uintptr_t>(data);
    Region& region = self.regions[registration.rkey];
    region = Region{reinterpret_cast<uintptr_t>(data), size};
    registration.handle = &region;  // stable: unordered_map nodes do not move
    return registration;
  }

  void deregister(const Registration& registration) noexcept override {
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    if (Endpoint* self = net.find(serial_)) self->regions.erase(registration.rkey);
  }

  int postWrite(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                RemoteAddress remote, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, false, 0, context);
  }
  int postWriteImm(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                   RemoteAddress remote, uint32_t imm, uint64_t context) override {
    return post(peer, lane, local, length, localReg, remote, true, imm, context);
  }

  void postImmReceives(int peer, int count) override {
    checkPeer(peer);
    if (count < 0) RF_THROW(InvalidArgument, "fake fabric: ", count, " receives for peer rank ", peer);
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    Endpoint* self = net.find(serial_);
    if (self == nullptr) return;
    self->receives[peer] += count;
    if (!self->inbound.empty()) self->inboundReady = true;
  }

  int poll(Completion* out, int max) override {
    if (max <= 0) return 0;
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    Endpoint* self = net.find(serial_);
    if (self == nullptr) return 0;
    drain(*self);
    if (self->gone) return 0;
    net.deliver(*self);
    int n = 0;
    while (n < max && !self->cq.empty()) {
      out[n] = std::move(self->cq.front());
      self->cq.pop_front();
      if (out[n].type != Completion::Type::kImmediate) self->inflight--;
      ++n;
    }
    return n;
  }

  bool armWait() override {
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    const Endpoint* self = net.find(serial_);
    if (self == nullptr || self->gone) return true;  // nothing will ever come
    return self->cq.empty() && !self->inboundReady;
  }

  int waitFd() const override { return efd_; }

  void close() noexcept override {
    if (efd_ < 0) return;
    {
      Network& net = Network::get();
      std::lock_guard lock(net.mu);
      net.remove(serial_);  // from here on, nobody signals efd_
    }
    ::close(efd_);
    efd_ = -1;
  }

 private:
  void checkPeer(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      RF_THROW(InvalidArgument, "fake fabric of rank ", rank_, " of ", size_, ": ", peer, " is not a peer");
    }
  }

  Endpoint& mine(Network& net) const {
    Endpoint* self = net.find(serial_);
    if (self == nullptr) RF_THROW(Error, "fake fabric of rank ", rank_, " is closed");
    return *self;
  }

  int post(int peer, int lane, const void* local, size_t length, const Registration& localReg,
           RemoteAddress remote, bool hasImm, uint32_t imm, uint64_t context) {
    if (peer < 0 || peer >= size_ || peer == rank_ || lane < 0 || lane >= lanes_) return -EINVAL;
    if (length > maxWriteBytes_) return -EMSGSIZE;
    const auto at = reinterpret_cast<uintptr_t>(local);
    if (length > 0 && (local == nullptr || !inside(reinterpret_cast<uintptr_t>(localReg.data), localReg.size, at, length))) {
      return -EINVAL;
    }
    Network& net = Network::get();
    std::lock_guard lock(net.mu);
    Endpoint* self = net.find(serial_);
    if (self == nullptr) return -EBADF;
    if (self->peers[peer] == 0) return -ENOTCONN;
    if (self->gone) return 0;  // a killed process's posts go nowhere
    if (self->inflight >= maxInflight_) return -EAGAIN;
    self->inflight++;
    net.post(*self, Write{.from = serial_, .fromRank = rank_, .to = self->peers[peer], .toRank = peer, .lane = lane,
                          .ordered = ordered_, .local = static_cast<const char*>(local), .length = length,
                          .localKey = localReg.rkey, .remote = remote, .hasImm = hasImm, .imm = imm, .context = context});
    return 0;
  }

  int rank_;
  int size_;
  int lanes_ = 1;
  bool ordered_ = true;
  size_t maxWriteBytes_ = 0;
  int maxInflight_ = 0;
  uint64_t serial_ = 0;
  int efd_ = -1;
};

}  // namespace

void setFaults(const Faults& faults) {
  if (faults.lanes < 1 || faults.lanes > 8) RF_THROW(InvalidArgument, "fake fabric: lanes ", faults.lanes, " (1..8)");
  if (!(faults.errorProbability >= 0 && faults.errorProbability <= 1)) {
    RF_THROW(InvalidArgument, "fake fabric: error probability ", faults.errorProbability, " (0..1)");
  }
  if (faults.maxWriteBytes < 1 || faults.maxInflight < 1 || faults.goneDelayMs < 0) {
    RF_THROW(InvalidArgument, "fake fabric: maxWriteBytes and maxInflight must be positive, goneDelayMs >= 0");
  }
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  net.faults = faults;
  net.reseed();
}

void clearFaults() {
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  net.faults = Faults{};
  net.reseed();
  net.counters = Counters{};
  net.dropStaleWithheld();
}

void releaseWithheld() {
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  net.releaseWithheld();
}

void disappear(int rank) {
  RF_LOG(kDebug) << "fake fabric: rank " << rank << " disappears";
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  net.disappear(rank);
}

void disappear(Fabric& fabric) {
  auto* fake = dynamic_cast<FakeFabric*>(&fabric);
  if (fake == nullptr) RF_THROW(InvalidArgument, "disappear: a ", fabric.kind(), " fabric is not the fake fabric");
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  if (Endpoint* endpoint = net.find(fake->serial())) net.vanish(*endpoint);
}

Counters counters() {
  Network& net = Network::get();
  std::lock_guard lock(net.mu);
  return net.counters;
}

std::unique_ptr<Fabric> open(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) RF_THROW(InvalidArgument, "fake fabric: rank ", rank, " of ", size);
  return std::make_unique<FakeFabric>(rank, size);
}

}  // namespace ringfold::transport::rdma::fake
