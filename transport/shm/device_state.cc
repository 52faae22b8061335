// DeviceState of the shm backend (device_state.h).
#include "transport/shm/device_state.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/store.h"
#include "transport/host_identity.h"
#include "transport/liveness/wait.h"
#include "transport/shm/peer.h"
#include "transport/shm/protocol.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::transport::shm {

using Clock = std::chrono::steady_clock;

namespace {

// The longest a wait sleeps between two calls of the wait hook, and without one.
constexpr auto kHookSlice = std::chrono::microseconds(200);
constexpr auto kBlockSlice = std::chrono::milliseconds(1);
// Polls of the rings (each after a pause instruction) before a waiting rank yields its core.
constexpr int kPollsBeforeYield = 64;
// How often progress() looks at the peers' sockets while nothing sleeps.
constexpr auto kSocketCheckEvery = std::chrono::milliseconds(10);
// Peers whose sockets a sleeping rank watches along with its doorbell (block()).
constexpr size_t kSocketsWatchedAsleep = 16;

std::string bytesText(uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

Tuning Tuning::fromEnvironment() {
  Tuning t;
  const int64_t slots = params::kShmSlots.asInt();
  RF_ENFORCE(slots >= 2 && slots <= (1 << 16), params::kShmSlots.name, "=", slots, " must be between 2 and 65536");
  t.slots = static_cast<uint32_t>(slots);
  const uint64_t slotBytes = params::kShmSlotBytes.asBytes();
  RF_ENFORCE(slotBytes >= 128 && slotBytes <= (uint64_t{16} << 20), params::kShmSlotBytes.name, "=", slotBytes,
             " must be between 128 and 16M");
  t.slotBytes = static_cast<uint32_t>((slotBytes + kCacheLine - 1) & ~uint64_t{kCacheLine - 1});
  t.cmaMinBytes = params::kShmCmaMinBytes.asBytes();
  const std::string cma = params::kShmCma.str();
  if (cma != "on" && cma != "off") {
    RF_THROW(InvalidArgument, params::kShmCma.name, "='", cma, "' is not on or off");
  }
  t.cma = cma == "on";
  t.spin = std::chrono::microseconds(std::max<int64_t>(params::kSpinMicros.asInt(), 0));
  t.timeout = params::kTimeout.asSeconds();
  return t;
}

DeviceState::DeviceState() : tuning_(Tuning::fromEnvironment()) {
  std::random_device rd;
  probeWord_ = (uint64_t{rd()} << 32) ^ rd() ^ 0x5246534850524f42ull;
}

DeviceState::~DeviceState() {
  shutdown();
  peers_.clear();
  if (doorbell_ >= 0) ::close(doorbell_);
}

void DeviceState::ring(int doorbell) {
  const uint64_t one = 1;
  ssize_t r = ::write(doorbell, &one, sizeof one);
  (void)r;  // EAGAIN: the counter is full, so the sleeper wakes anyway
}

// ---- start-up ---------------------------------------------------------------------------------

std::vector<Peer*> DeviceState::connect(const ConnectSpec& spec) {
  RF_ENFORCE(spec.store != nullptr, "connectAll: no store");
  RF_ENFORCE(spec.peers.empty() || spec.peers.size() == static_cast<size_t>(spec.size), "connectAll: ",
             spec.peers.size(), " peer flags for ", spec.size, " ranks");
  RF_ENFORCE(spec.rank >= 0 && spec.rank < spec.size, "connectAll: rank ", spec.rank, " of ", spec.size);
  RF_ENFORCE(!connected_, "connectAll() may be called once per device");
  RF_ENFORCE(!closed_, "the device was destroyed");
  connected_ = true;
  rank_ = spec.rank;
  const int size = spec.size;
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  std::vector<Peer*> out(size, nullptr);
  peers_.resize(size);
  std::vector<bool> selected(size, false);
  bool any = false;
  for (int p = 0; p < size; ++p) {
    selected[p] = p != rank_ && (spec.peers.empty() || spec.peers[p]);
    any = any || selected[p];
  }
  if (!any) {
    monitor_->attach(*this, rank_, size, std::vector<bool>(size, false));
    return out;
  }
  doorbell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell_ < 0) throw IoError(-1, detail::concat("shm: eventfd failed: ", std::strerror(errno)));

  // One authenticated Unix socket per pair (tcp_uring/mesh.h).
  tcp_uring::MeshOptions mesh;
  mesh.prefix = spec.prefix;
  mesh.rank = rank_;
  mesh.size = size;
  mesh.family = tcp_uring::Family::kUnix;
  mesh.timeout = spec.timeout;
  mesh.peers = selected;
  std::vector<int> meshPids;
  std::vector<std::string> unreachable;
  auto sockets = tcp_uring::connectMesh(*spec.store, mesh, &meshPids, &unreachable);

  // Each pair: the hello with this rank's inbox and doorbell, both ways.
  struct Pending {
    int peer;
    tcp_uring::Socket socket;
    Segment inbox, outbox;
    int peerDoorbell = -1;
    pid_t pid = 0;
    bool canRead = false;
    std::string whyNot;
  };
  std::vector<Pending> pending;
  // Rings are populated at mapping (no first-touch faults on the data path) while this rank's
  // rings, in and out, fit in kPopulateBudget. A full mesh of n ranks on one host holds n(n-1)
  // rings, and a collective uses few of them: 256 ranks with the default 1 MiB rings would take
  // 64 GiB at start-up. Beyond the budget, only the pages a ring uses are taken.
  constexpr size_t kPopulateBudget = size_t{64} << 20;
  size_t pairs = 0;
  for (int p = 0; p < size; ++p) pairs += selected[p] && !sockets[p].empty() ? 1 : 0;
  const bool populate = pairs * 2 * ringBytes(tuning_.slots, tuning_.slotBytes) <= kPopulateBudget;
  if (!populate) {
    RF_LOG(kDebug) << "shm: rank " << rank_ << " has " << pairs << " same-host peers: rings are mapped without "
                   << "populating them (" << pairs * 2 * ringBytes(tuning_.slots, tuning_.slotBytes) / (1 << 20)
                   << " MiB, over " << (kPopulateBudget >> 20) << " MiB)";
  }
  for (int p = 0; p < size; ++p) {
    if (!selected[p]) continue;
    if (sockets[p].empty()) {
      RF_LOG(kWarning) << "shm: rank " << p << " is on this host but its socket could not be reached ("
                       << (unreachable[p].empty() ? "unknown reason" : unreachable[p])
                       << "); it is left to another transport";
      continue;
    }
    Pending x;
    x.peer = p;
    x.socket = std::move(sockets[p][0]);
    x.inbox = Segment::create(detail::concat("ringfold-shm-", rank_, "-from-", p),
                              ringBytes(tuning_.slots, tuning_.slotBytes), populate);
    Ring::format(x.inbox.data(), tuning_.slots, tuning_.slotBytes);
    Hello h;
    h.rank = rank_;
    h.slots = tuning_.slots;
    h.slotBytes = tuning_.slotBytes;
    h.probeAddress = reinterpret_cast<uint64_t>(&probeWord_);
    h.probeWord = probeWord_;
    sendFds(x.socket.fd(), &h, sizeof h, {x.inbox.fd(), doorbell_}, detail::concat("the hello to rank ", p));
    pending.push_back(std::move(x));
  }
  for (Pending& x : pending) {
    const int p = x.peer;
    Hello theirs;
    auto fds = recvFds(x.socket.fd(), &theirs, sizeof theirs, 2, deadline, detail::concat("the hello of rank ", p));
    if (fds.size() != 2 || theirs.magic != kHelloMagic || theirs.rank != p) {
      for (int fd : fds) ::close(fd);
      throw IoError(p, detail::concat("shm: rank ", p, " sent a hello this rank cannot read (another ringfold version?)"));
    }
    x.outbox = Segment::adopt(fds[0], ringBytes(theirs.slots, theirs.slotBytes),
                              detail::concat("the ring of rank ", p), populate);
    x.peerDoorbell = fds[1];
    if (!Ring(x.outbox.data()).valid(x.outbox.size())) {
      throw IoError(p, detail::concat("shm: the ring rank ", p, " sent is not formatted as one"));
    }
    // The kernel's word for who is at the other end of the socket, in this pid namespace.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(x.socket.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) x.pid = cred.pid;
    if (!tuning_.cma) {
      x.whyNot = detail::concat(params::kShmCma.name, "=off");
    } else {
      x.canRead = cma::probe(x.pid, theirs.probeAddress, theirs.probeWord, x.whyNot);
    }
    const char answer = x.canRead ? 1 : 0;
    sendFds(x.socket.fd(), &answer, 1, {}, detail::concat("the answer to rank ", p));
  }
  int viaCma = 0;
  std::string whyNot;
  for (Pending& x : pending) {
    const int p = x.peer;
    char answer = 0;
    recvFds(x.socket.fd(), &answer, 1, 0, deadline, detail::concat("the answer of rank ", p));
    if (!x.canRead) {
      RF_LOG(kInfo) << "shm: rank " << rank_ << " cannot read rank " << p << "'s memory (" << x.whyNot
                    << "): its large messages from rank " << p << " come through the ring";
      whyNot = x.whyNot;
    }
    const bool cmaToPeer = answer == 1;
    viaCma += cmaToPeer ? 1 : 0;
    x.inbox.closeFd();  // the peer holds its own descriptor now; nothing is left to open
    x.outbox.closeFd();
    peers_[p] = std::make_unique<Peer>(*this, p);
    peers_[p]->attach(std::move(x.inbox), std::move(x.outbox), x.peerDoorbell, std::move(x.socket), x.pid, cmaToPeer,
                      x.whyNot);
    active_.push_back(peers_[p].get());
    out[p] = peers_[p].get();
  }
  std::vector<bool> linked(size, false);
  for (Peer* p : active_) linked[p->rank()] = true;
  monitor_->attach(*this, rank_, size, linked);
  describe_ = detail::concat("memfd rings of ", tuning_.slots, " x ", bytesText(tuning_.slotBytes), "; ");
  if (active_.empty()) {
    describe_.clear();
  } else if (viaCma == static_cast<int>(active_.size())) {
    describe_ += detail::concat("cross-memory attach from ", bytesText(tuning_.cmaMinBytes));
  } else if (viaCma == 0) {
    describe_ += tuning_.cma ? "every message through the rings (" + whyNot + ")"
                             : std::string("every message through the rings");
  } else {
    describe_ += detail::concat("cross-memory attach from ", bytesText(tuning_.cmaMinBytes), " to ", viaCma, " of ",
                                active_.size(), " peers");
  }
  RF_LOG(kInfo) << "shm: rank " << rank_ << " joined " << active_.size() << " peers (" << describe_ << ")";
  nextSocketCheck_ = Clock::now() + kSocketCheckEvery;
  return out;
}

// ---- progress and waiting ---------------------------------------------------------------------

unsigned DeviceState::progress() {
  if (closed_ || poisoned()) return 0;
  unsigned n = 0;
  for (Peer* p : active_) {
    n += p->receive();
    if (poisoned()) return n;
  }
  for (Peer* p : active_) {
    p->bounceUnexpected(kBounceAfter);
    n += p->flush();
    if (poisoned()) return n;
  }
  if (n == 0) {
    const Clock::time_point now = Clock::now();
    if (now >= nextSocketCheck_) {
      nextSocketCheck_ = now + kSocketCheckEvery;
      checkSockets(Clock::duration::zero());
    }
  }
  return n;
}

void DeviceState::checkSockets(Clock::duration timeout, bool sockets) {
  std::vector<pollfd> fds;
  fds.reserve(active_.size() + 1);
  fds.push_back({doorbell_, POLLIN, 0});
  if (sockets) {
    for (Peer* p : active_) fds.push_back({p->socket(), static_cast<short>(p->gone() ? 0 : POLLIN | POLLRDHUP), 0});
  }
  const auto ns = std::max<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(), 0);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int r = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  if (r <= 0) return;
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    ssize_t n = ::read(doorbell_, &v, sizeof v);
    (void)n;
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) active_[i - 1]->hangUp();  // nothing else ever comes on it
  }
}

void DeviceState::block(Clock::duration slice) {
  if (closed_ || active_.empty()) {
    std::this_thread::sleep_for(std::min<Clock::duration>(slice, kBlockSlice));
    return;
  }
  for (Peer* p : active_) p->bounceUnexpected(Clock::duration(0));  // a sender may wait for it
  if (unpark()) return;
  slice = std::min<Clock::duration>(slice, hook_ ? Clock::duration(kHookSlice) : Clock::duration(kBlockSlice));
  if (slice <= Clock::duration::zero()) return;
  for (Peer* p : active_) p->prepareSleep();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const bool ready = std::any_of(active_.begin(), active_.end(), [](Peer* p) { return p->ready(); });
  if (!ready) {
    ++stats_.sleeps;
    // With few peers the sleep also watches their sockets, so a hang-up wakes it at once. With
    // many, only the doorbell: progress() checks the sockets every kSocketCheckEvery anyway, and
    // a ppoll over hundreds of sockets on every sleep cost more than it saved (256 ranks on 2
    // cores: a third of the CPU time in sock_poll, and a start-up broadcast along the chain of
    // ranks past RINGFOLD_TIMEOUT).
    checkSockets(slice, active_.size() <= kSocketsWatchedAsleep);
  }
  for (Peer* p : active_) p->endSleep();
}

bool DeviceState::unpark() {
  bool any = false;
  for (Peer* p : active_) any = p->unpark() || any;
  return any;
}

void DeviceState::wait(RequestState& r, std::chrono::milliseconds timeout) {
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
    unsigned progress() {
      if (const unsigned n = d.progress()) return n;
      // A slot arrives in well under a microsecond once the peer has written it, while the wait
      // loop's yield between two polls costs about that much: poll the rings a little before
      // yielding the core.
      for (int i = 0; i < kPollsBeforeYield; ++i) {
        cpuRelax();
        if (std::any_of(d.active_.begin(), d.active_.end(), [](Peer* p) { return p->ready(); })) return d.progress();
      }
      // Nothing moves: a message parked for a lazy receive may be what holds a peer up (its
      // ring full behind it), so read parked messages into their receives' memory.
      return d.unpark() ? d.progress() : 0;
    }
    void block(Clock::duration slice) { d.block(slice); }
    void afterAnnounce() { d.progress(); }
    void withdraw() { d.monitor_->withdraw(); }
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

// ---- liveness::Links --------------------------------------------------------------------------

void DeviceState::sendNotice(int peer, const liveness::Notice& notice) {
  if (peers_[peer] && !closed_) peers_[peer]->queueNotice(notice);
}

void DeviceState::sendAbort(int peer, ErrorKind kind, const std::string& text) {
  if (peers_[peer] && !closed_) peers_[peer]->queueAbort(kind, text);
}

int DeviceState::pid(int peer) const { return peers_[peer] ? peers_[peer]->pid() : 0; }

// ---- failure ----------------------------------------------------------------------------------

void DeviceState::poison(std::exception_ptr error) noexcept {
  if (poison_ != nullptr) return;
  poison_ = std::move(error);
  for (Peer* p : active_) p->onPoison();
  try {
    std::rethrow_exception(poison_);
  } catch (const std::exception& e) {
    RF_LOG(kDebug) << "shm transport of rank " << rank_ << " poisoned: " << e.what();
  } catch (...) {
  }
}

void DeviceState::poisonIo(int peer, const std::string& what) noexcept {
  poison(std::make_exception_ptr(IoError(peer, what)));
}

void DeviceState::throwPoison() { std::rethrow_exception(poison_); }

void DeviceState::abandon(RequestState& r) noexcept {
  if (poisoned()) return;
  const std::string what = detail::concat("a request ", r.isSend ? "sending to" : "receiving from", " rank ",
                                          r.peer->rank(), " (tag ", r.tag, ", ", r.length,
                                          " bytes) was destroyed before it completed");
  if (r.isSend && r.started) {
    // The peer may still read the buffer (cross-memory attach): it must fail instead.
    try {
      abort(ErrorKind::kIo, what);
    } catch (...) {
    }
  }
  poisonIo(r.peer->rank(), what);
}

bool DeviceState::abortsSent() const {
  return std::none_of(active_.begin(), active_.end(), [](Peer* p) { return p->abortPending(); });
}

void DeviceState::abort(ErrorKind kind, const std::string& message) {
  if (monitor_->aborted(*this) || closed_) return;
  RF_LOG(kDebug) << "shm: rank " << rank_ << " aborting: " << message;
  std::exception_ptr error = monitor_->abort(*this, kind, message);  // queues a kAbort to every peer
  // The aborts go as ring space allows (a frozen peer's full ring may never take one).
  const Clock::time_point deadline =
      Clock::now() + std::min<std::chrono::milliseconds>(tuning_.timeout, std::chrono::milliseconds(2000));
  while (!abortsSent() && Clock::now() < deadline) {
    unsigned moved = 0;
    for (Peer* p : active_) moved += p->flush() + p->receive();
    if (moved == 0) block(deadline - Clock::now());
  }
  poison(error);
}

void DeviceState::onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept {
  if (std::exception_ptr error = monitor_->onAbort(peer, kind, message)) poison(error);
}

void DeviceState::shutdown() noexcept {
  if (closed_) return;
  if (!active_.empty()) {
    const Stats& s = stats_;
    RF_LOG(kInfo) << "shm: rank " << rank_ << " sent " << s.bytesSent << " and received " << s.bytesReceived
                  << " bytes; " << s.eagerMessages << " messages through the ring, " << s.cmaMessages
                  << " by cross-memory attach (" << s.bouncedMessages << " bounced); copied " << s.ringCopyBytes
                  << " through rings (and took " << s.ringSinkBytes << " from them uncopied), " << s.cmaBytes << " across processes, " << s.unexpectedCopyBytes
                  << " out of buffers; slept " << s.sleeps << " times";
  }
  if (!poisoned()) poison(std::make_exception_ptr(Error("the shm device was destroyed")));
  closed_ = true;
}

}  // namespace ringfold::transport::shm
