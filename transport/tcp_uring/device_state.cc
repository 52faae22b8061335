// DeviceState of the tcp_uring backend (device_state.h).
#include "transport/tcp_uring/device_state.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/liveness/wait.h"
#include "transport/tcp_uring/connection.h"
#include "transport/tcp_uring/peer_link.h"
#include "transport/tcp_uring/kernel_view.h"
#include "transport/tcp_uring/uring_loop.h"
#include "transport/tcp_uring/interfaces.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::transport::tcp_uring {

using Clock = std::chrono::steady_clock;

using liveness::seconds;

namespace {

// The longest a wait blocks in the kernel between two calls of the wait hook.
constexpr auto kHookSlice = std::chrono::microseconds(200);

}  // namespace

Tuning Tuning::fromEnvironment() {
  Tuning t;
  std::string zc = params::kZeroCopy.str();
  if (zc == "auto") {
    t.zeroCopy = ZeroCopyMode::kAuto;
  } else if (zc == "off" || zc == "0" || zc == "false" || zc == "no") {
    t.zeroCopy = ZeroCopyMode::kOff;
  } else if (zc == "on" || zc == "1" || zc == "true" || zc == "yes") {
    t.zeroCopy = ZeroCopyMode::kOn;
  } else {
    RF_THROW(InvalidArgument, params::kZeroCopy.name, "='", zc, "' is not auto, on or off");
  }
  t.zeroCopyMinBytes = params::kZeroCopyMinBytes.asBytes();
  t.stripeMinBytes = std::max<uint64_t>(params::kStripeMinBytes.asBytes(), 1);
  t.stripeChunkBytes = std::max<uint64_t>(params::kStripeChunkBytes.asBytes(), 4096);
  t.spin = std::chrono::microseconds(std::max<int64_t>(params::kSpinMicros.asInt(), 0));
  t.timeout = params::kTimeout.asSeconds();
  t.socketBufferBytes = params::kSocketBufferBytes.asBytes();
  if (params::kSocketsPerPeer.str() == "auto") {
    t.socketsPerPeer = 0;  // resolved in connect(), once the listen address is known
  } else {
    t.socketsPerPeer = static_cast<int>(params::kSocketsPerPeer.asInt());
    RF_ENFORCE(t.socketsPerPeer >= 1 && t.socketsPerPeer <= 64, params::kSocketsPerPeer.name, "=",
               t.socketsPerPeer, " must be auto or between 1 and 64");
  }
  return t;
}

DeviceState::DeviceState(const Options& options)
    : options_(options),
      tuning_(Tuning::fromEnvironment()),
      uring_(std::make_unique<UringLoop>(static_cast<unsigned>(std::clamp<int64_t>(params::kUringEntries.asInt(), 8, 32768)),
                                       params::kUringSetup.str())),
      buffers_(128u << 20) {}

DeviceState::~DeviceState() { shutdown(); }

std::vector<PeerLink*> DeviceState::connect(const ConnectSpec& spec) {
  RF_ENFORCE(spec.store != nullptr, "connectAll: no store");
  RF_ENFORCE(spec.peers.empty() || spec.peers.size() == static_cast<size_t>(spec.size), "connectAll: ",
             spec.peers.size(), " peer flags for ", spec.size, " ranks");
  const int rank = spec.rank, size = spec.size;
  RF_ENFORCE(!connected_, "connectAll() may be called once per device");
  RF_ENFORCE(!closed_, "the device was destroyed");
  connected_ = true;
  rank_ = rank;
  MeshOptions o;
  o.prefix = spec.prefix;
  o.rank = rank;
  o.size = size;
  o.peers = spec.peers;
  o.family = options_.family;
  if (o.family == Family::kTcp) {
    o.listenAddress =
        options_.listenAddress.empty() ? listenAddressFor(options_.storeAddress) : options_.listenAddress;
    if (tuning_.socketsPerPeer == 0) tuning_.socketsPerPeer = autoSocketsPerPeer(o.listenAddress);
  } else if (tuning_.socketsPerPeer == 0) {
    tuning_.socketsPerPeer = 1;  // one Unix socket per peer whatever the setting
  }
  o.socketsPerPeer = tuning_.socketsPerPeer;
  o.timeout = spec.timeout;
  std::vector<int> pids;
  std::vector<std::string> unreachable;
  std::vector<std::vector<Socket>> mesh = connectMesh(*spec.store, o, &pids, &unreachable);
  std::vector<PeerLink*> links(size, nullptr);
  peers_.resize(size);
  int connected = 0;
  for (int p = 0; p < size; ++p) {
    if (!unreachable[p].empty()) {
      RF_LOG(kDebug) << "rank " << p << " left to another backend: " << unreachable[p];
    }
    if (p == rank || mesh[p].empty()) continue;
    ++connected;
    for (Socket& s : mesh[p]) setDataSocketOptions(s.fd(), tuning_.timeout, tuning_.socketBufferBytes);
    uint32_t first = static_cast<uint32_t>(sockets_.size());
    for (size_t i = 0; i < mesh[p].size(); ++i) sockets_.push_back({nullptr, static_cast<uint32_t>(i)});
    peers_[p] = std::make_unique<PeerLink>(*this, p, std::move(mesh[p]), first);
    peers_[p]->setPid(pids[p]);
    for (size_t i = 0; i < peers_[p]->socketCount(); ++i) sockets_[first + i].peer = peers_[p].get();
    links[p] = peers_[p].get();
  }
  std::vector<bool> linked(size, false);
  for (int p = 0; p < size; ++p) linked[p] = peers_[p] != nullptr;
  monitor_->attach(*this, rank, size, linked);
  for (auto& p : peers_) {
    if (p) p->start();
  }
  uring_->submit();
  // The words of the mesh that used to choose Unix or TCP per peer (tests/netns reads them); a
  // composite device logs its total the same way.
  RF_LOG(kDebug) << "connected to " << connected << " peers (" << (o.family == Family::kUnix ? connected : 0)
                 << " on this host over Unix sockets), " << tuning_.socketsPerPeer
                 << " TCP sockets to each other peer, one Unix socket to a local one, io_uring " << uring_->setupName();
  return links;
}

void DeviceState::dispatch(uint64_t userData, int res, uint32_t flags) {
  OpId op = unpackOp(userData);
  if (op.kind == OpKind::kCancel || op.socket >= sockets_.size()) return;
  SocketRef ref = sockets_[op.socket];
  ref.peer->onCompletion(ref.index, op, res, flags);
}

unsigned DeviceState::progress() {
  if (uring_->queued() > 0) uring_->submit();
  urgent_ = false;
  unsigned n = uring_->drain([this](const io_uring_cqe& c) { dispatch(c.user_data, c.res, c.flags); });
  if (urgent_ && uring_->queued() > 0) uring_->submit();
  return n;
}

void DeviceState::withdrawNotice() {
  monitor_->withdraw();
  uring_->submit();
}

void DeviceState::wait(RequestState& r, std::chrono::milliseconds timeout) {
  // The steps of liveness::waitFor over this device's io_uring.
  struct Steps {
    DeviceState& d;
    RequestState& r;
    void hook() {
      if (d.hook_) d.hook_();
    }
    bool done() const { return r.done; }
    void throwIfPoisoned() {
      if (d.poisoned()) d.throwPoison();
    }
    unsigned progress() { return d.progress(); }
    void block(Clock::duration slice) {
      // With a hook (a composite device driving its other backends), block in slices.
      if (d.hook_) slice = std::min<Clock::duration>(slice, kHookSlice);
      int ret = d.uring_->wait(slice);
      if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        d.poisonIo(r.peer->rank(), detail::concat("io_uring wait failed: ", std::strerror(-ret)));
      }
    }
    void afterAnnounce() { d.uring_->submit(); }
    void withdraw() { d.withdrawNotice(); }
    [[noreturn]] void timedOut(int culprit, const std::string& what) {
      d.poisonIo(culprit, what);
      d.throwPoison();
    }
  } steps{*this, r};
  liveness::waitFor(steps, *monitor_, {r.peer->rank(), r.isSend, r.length, r.tag}, tuning_.spin, timeout,
                    tuning_.timeout);
}

void DeviceState::shareMonitor(std::shared_ptr<liveness::Monitor> monitor) {
  monitor_.share(std::move(monitor), connected_);
}

void DeviceState::sendNotice(int peer, const liveness::Notice& notice) { peers_[peer]->queueWaiting(notice); }

void DeviceState::sendAbort(int peer, ErrorKind kind, const std::string& text) { peers_[peer]->queueAbort(kind, text); }

liveness::Unacknowledged DeviceState::unacknowledged(int peer) const { return peers_[peer]->unacknowledged(); }

int DeviceState::pid(int peer) const { return peers_[peer]->pid(); }

void DeviceState::poison(std::exception_ptr error) noexcept {
  if (poison_ != nullptr) return;
  poison_ = std::move(error);
  settled_ = false;
  for (auto& p : peers_) {
    if (p) p->cancelAll();
  }
  try {
    std::rethrow_exception(poison_);
  } catch (const std::exception& e) {
    RF_LOG(kDebug) << "transport poisoned: " << e.what();
  }
}

void DeviceState::poisonIo(int peer, const std::string& what) noexcept {
  poison(std::make_exception_ptr(IoError(peer, what)));
}

bool DeviceState::anyBusy() const {
  for (auto& p : peers_) {
    if (p && p->busy(false)) return true;
  }
  return false;
}

bool DeviceState::abortsSent() const {
  for (auto& p : peers_) {
    if (p && p->abortsPending()) return false;
  }
  return true;
}

// Drives progress until (this->*done)() or `budget` passes; true if done.
bool DeviceState::drainUntilIdle(std::chrono::milliseconds budget, bool (DeviceState::*done)() const) {
  const Clock::time_point deadline = Clock::now() + budget;
  for (;;) {
    progress();
    if ((this->*done)()) return true;
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    uring_->wait(std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(50)));
  }
}

void DeviceState::settle() noexcept {
  if (settled_ || poison_ == nullptr) return;
  settled_ = true;
  if (!drainUntilIdle(std::chrono::milliseconds(2000), &DeviceState::idle)) {
    // Cancelled ops that did not finish: shutting the sockets down completes them.
    for (auto& p : peers_) {
      if (p) p->shutdownSockets();
    }
    if (!drainUntilIdle(std::chrono::milliseconds(1000), &DeviceState::idle)) {
      RF_LOG(kWarning) << "io_uring ops still in flight after cancelling them";
    }
  }
  for (auto& p : peers_) {
    if (p) p->forgetRequests();
  }
}

void DeviceState::throwPoison() {
  settle();
  std::rethrow_exception(poison_);
}

void DeviceState::abandon(RequestState& r) noexcept {
  if (!poisoned()) {
    poisonIo(r.peer->rank(), detail::concat("a request ", r.isSend ? "sending to" : "receiving from", " rank ",
                                            r.peer->rank(), " (tag ", r.tag, ", ", r.length,
                                            " bytes) was destroyed before it completed"));
  }
  settle();
}

void DeviceState::abort(ErrorKind kind, const std::string& message) {
  if (monitor_->aborted(*this) || closed_) return;
  RF_LOG(kDebug) << "aborting: " << message;
  if (poisoned()) settle();  // ops drained; ABORT goes on streams still at a frame boundary
  std::exception_ptr error = monitor_->abort(*this, kind, message);  // queues an ABORT to every peer
  uring_->submit();
  auto budget = std::min<std::chrono::milliseconds>(tuning_.timeout, std::chrono::milliseconds(2000));
  drainUntilIdle(budget, &DeviceState::abortsSent);
  poison(error);
  settled_ = false;
  settle();
}

void DeviceState::onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept {
  if (std::exception_ptr error = monitor_->onAbort(peer, kind, message)) poison(error);  // the first abort wins
}

void DeviceState::shutdown() noexcept {
  if (closed_) return;
  if (!poisoned()) poison(std::make_exception_ptr(Error("the tcp_uring device was destroyed")));
  settle();
  // Give zero-copy notifications a moment so the kernel releases pinned pages cleanly.
  drainUntilIdle(std::chrono::milliseconds(200), &DeviceState::idleWithNotifications);
  closed_ = true;
  for (auto& p : peers_) {
    if (p) p->closeSockets();  // the links stay: connections and requests may still point at them
  }
}

bool DeviceState::idleWithNotifications() const {
  for (auto& p : peers_) {
    if (p && p->busy(true)) return false;
  }
  return true;
}

}  // namespace ringfold::transport::tcp_uring
