// DeviceState of the rdma backend (device_state.h).
#include "transport/rdma/device_state.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/liveness/wait.h"
#include "transport/rdma/protocol.h"
#include "rendezvous/secret.h"
#include "rendezvous/store.h"
#include "transport/host_identity.h"
#include "transport/rdma/connection.h"
#include "transport/rdma/peer.h"

namespace ringfold::transport::rdma {

using Clock = std::chrono::steady_clock;
using liveness::seconds;

namespace {

// The longest a wait blocks between two calls of the wait hook, and without one.
constexpr auto kHookSlice = std::chrono::microseconds(200);
constexpr auto kBlockSlice = std::chrono::milliseconds(1);
// How long a wait sleeps at a time on a fabric without a wait fd.
constexpr auto kSleepSlice = std::chrono::microseconds(100);

// A fabric address as store text: hex, "-" for an empty one.
std::string hex(const std::string& bytes) {
  return bytes.empty() ? "-" : rendezvous::toHex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::string unhex(const std::string& text) { return text == "-" ? std::string() : rendezvous::fromHex(text); }

std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

Tuning Tuning::fromEnvironment() {
  Tuning t;
  const int64_t slots = params::kRdmaSlots.asInt();
  RF_ENFORCE(slots >= 2 && slots <= (1 << 20), params::kRdmaSlots.name, "=", slots, " must be between 2 and 1048576");
  t.slots = static_cast<uint32_t>(slots);
  const uint64_t slotBytes = params::kRdmaSlotBytes.asBytes();
  RF_ENFORCE(slotBytes >= 128 && slotBytes <= (uint64_t{1} << 30), params::kRdmaSlotBytes.name, "=", slotBytes,
             " must be between 128 and 1G");
  t.slotBytes = static_cast<uint32_t>((slotBytes + 63) & ~uint64_t{63});
  t.chunkBytes = std::max<uint64_t>(params::kRdmaChunkBytes.asBytes(), 4096);
  t.regCacheBytes = params::kRdmaRegCacheBytes.asBytes();
  t.spin = std::chrono::microseconds(std::max<int64_t>(params::kSpinMicros.asInt(), 0));
  t.timeout = params::kTimeout.asSeconds();
  return t;
}

DeviceState::DeviceState(const Options& options) : options_(options), tuning_(Tuning::fromEnvironment()) {
  if (options_.fabric.empty()) options_.fabric = params::kRdmaFabric.str();
  const std::string& f = options_.fabric;
  if (!options_.opened && f != "auto" && f != "verbs" && f != "ofi" && f != "fake") {
    RF_THROW(InvalidArgument, params::kRdmaFabric.name, "='", f, "' is not a fabric; use auto, verbs, ofi or fake");
  }
}

DeviceState::~DeviceState() {
  shutdown();
  peers_.clear();  // frees the rings and staging areas, after the fabric closed
  cache_.reset();
}

// ---- start-up -------------------------------------------------------------------------------

std::vector<Peer*> DeviceState::connect(const ConnectSpec& spec) {
  RF_ENFORCE(spec.store != nullptr, "connectAll: no store");
  RF_ENFORCE(spec.peers.empty() || spec.peers.size() == static_cast<size_t>(spec.size), "connectAll: ",
             spec.peers.size(), " peer flags for ", spec.size, " ranks");
  RF_ENFORCE(spec.rank >= 0 && spec.rank < spec.size, "connectAll: rank ", spec.rank, " of ", spec.size);
  const int size = spec.size;
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  std::vector<int> selected;
  for (int p = 0; p < size; ++p) {
    if (p != spec.rank && (spec.peers.empty() || spec.peers[p])) selected.push_back(p);
  }
  const std::string text = begin(spec.rank, size, selected);
  spec.store->set(spec.prefix + "/addr/" + std::to_string(rank_), std::vector<uint8_t>(text.begin(), text.end()));

  // Each selected peer's blob: its address and ring for this rank.
  for (int p : selected) {
    std::vector<uint8_t> bytes;
    try {
      bytes = spec.store->get(spec.prefix + "/addr/" + std::to_string(p), left(deadline));
    } catch (const TimeoutError& e) {
      RF_THROW(TimeoutError, "rdma: rank ", p, " did not publish its address within ", seconds(spec.timeout),
               " s (", e.what(), ")");
    }
    insert(p, std::string(bytes.begin(), bytes.end()));
  }
  linked();
  std::vector<Peer*> out(size, nullptr);
  for (int p : selected) out[p] = peers_[p].get();
  if (selected.empty()) return out;

  // Every pair is inserted at this end; a peer's first write comes only once it says the same.
  spec.store->set(spec.prefix + "/ready/" + std::to_string(rank_), std::vector<uint8_t>{'1'});
  for (int p : selected) {
    try {
      spec.store->get(spec.prefix + "/ready/" + std::to_string(p), left(deadline));
    } catch (const TimeoutError& e) {
      RF_THROW(TimeoutError, "rdma: rank ", p, " did not get ready within ", seconds(spec.timeout), " s (", e.what(),
               ")");
    }
    greet(p);
  }
  waitForHellos(selected, deadline);
  return out;
}

std::string DeviceState::begin(int rank, int size, const std::vector<int>& selected) {
  RF_ENFORCE(rank >= 0 && rank < size, "rdma: rank ", rank, " of ", size);
  RF_ENFORCE(!connected_, "connectAll() may be called once per device");
  RF_ENFORCE(!closed_, "the device was destroyed");
  connected_ = true;
  rank_ = rank;
  peers_.resize(size);
  std::ostringstream blob;
  if (!selected.empty()) {
    fabric_ = options_.opened ? options_.opened : std::shared_ptr<Fabric>(openFabric(options_.fabric, rank_, size));
    ordered_ = fabric_->writesOrdered();
    cache_ = std::make_unique<RegistrationCache>(*fabric_, tuning_.regCacheBytes);
  }
  blob << "ringfold-rdma 1 " << (fabric_ ? fabric_->kind() : "none") << ' ' << (ordered_ ? 1 : 0) << ' ' << rank_
       << ' ' << size << '\n';
  for (int p : selected) {
    RF_ENFORCE(p >= 0 && p < size && p != rank_, "rdma: no peer ", p, " for rank ", rank_, " of ", size);
    peers_[p] = std::make_unique<Peer>(*this, p);
    peers_[p]->createRing(tuning_.slots, tuning_.slotBytes);
    const RingAddress r = peers_[p]->ring();
    blob << p << ' ' << r.slots << ' ' << r.slotBytes << ' ' << r.address << ' ' << r.rkey << ' '
         << hex(fabric_->localAddress(p)) << '\n';
  }
  return blob.str();
}

void DeviceState::insert(int p, const std::string& text) {
  RF_ENFORCE(p >= 0 && p < static_cast<int>(peers_.size()) && peers_[p], "rdma: rank ", p,
             " is not a selected peer of rank ", rank_);
  std::istringstream in(text);
  std::string magic, version, kind;
  int ordered = -1, theirRank = -1, theirSize = -1;
  in >> magic >> version >> kind >> ordered >> theirRank >> theirSize;
  const int size = static_cast<int>(peers_.size());
  RF_ENFORCE(magic == "ringfold-rdma" && version == "1" && theirRank == p && theirSize == size, "rdma: rank ", p,
             " published an address this rank cannot read (another ringfold version, or another job?)");
  if (kind != fabric_->kind() || ordered != (ordered_ ? 1 : 0)) {
    RF_THROW(Error, "rdma: rank ", p, " uses the ", kind, (ordered ? " (ordered)" : " (unordered)"),
             " fabric and rank ", rank_, " the ", fabric_->kind(), (ordered_ ? " (ordered)" : " (unordered)"),
             " one: every rank must use the same RINGFOLD_RDMA_FABRIC and provider");
  }
  bool found = false;
  int q;
  RingAddress ring;
  std::string address;
  while (in >> q >> ring.slots >> ring.slotBytes >> ring.address >> ring.rkey >> address) {
    if (q != rank_) continue;
    found = true;
    break;
  }
  if (!found) {
    RF_THROW(Error, "rdma: rank ", p, " did not select rank ", rank_,
             " as a peer while rank ", rank_, " selected it (the ranks disagree on which pairs use rdma)");
  }
  fabric_->insertPeer(p, unhex(address));
  peers_[p]->setRemote(ring);
}

void DeviceState::linked() {
  std::vector<bool> linked(peers_.size(), false);
  for (size_t p = 0; p < peers_.size(); ++p) linked[p] = peers_[p] != nullptr;
  monitor_->attach(*this, rank_, static_cast<int>(peers_.size()), linked);
}

void DeviceState::greet(int p) {
  RF_ENFORCE(p >= 0 && p < static_cast<int>(peers_.size()) && peers_[p], "rdma: rank ", p,
             " is not a selected peer of rank ", rank_);
  const std::string hello =
      detail::concat("ringfold-rdma ", rank_, " ", processIdentity().empty() ? "-" : processIdentity());
  peers_[p]->start(hello);
}

bool DeviceState::greeted(int p) const { return peers_[p] && peers_[p]->helloDone(); }

void DeviceState::logConnected(size_t peers) const {
  RF_LOG(kInfo) << "rdma: rank " << rank_ << " connected to " << peers << " peers over " << fabric_->describe()
                << " (" << fabric_->lanes() << " lanes, " << (ordered_ ? "ordered" : "unordered") << ")";
}

void DeviceState::waitForHellos(const std::vector<int>& peers, Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    progress();
    auto missing = std::find_if(peers.begin(), peers.end(), [&](int p) { return !peers_[p]->helloDone(); });
    if (missing == peers.end()) {  // connected (a peer's abort then fails the requests)
      logConnected(peers.size());
      return;
    }
    if (poisoned()) throwPoison();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      const int p = *missing;
      poisonIo(p, detail::concat("rdma: rank ", p, " did not answer the hello within ", seconds(now - start),
                                 " s after both ranks were ready"));
      throwPoison();
    }
    block(std::min<Clock::duration>(deadline - now, kBlockSlice));
  }
}

// ---- progress and waiting -------------------------------------------------------------------

void DeviceState::dispatch(const Completion& c) {
  if (c.type == Completion::Type::kImmediate) {
    if (c.peer < 0 || c.peer >= static_cast<int>(peers_.size()) || !peers_[c.peer]) return;
    monitor_->heard(c.peer);
    peers_[c.peer]->onImmediate(c.imm);
    return;
  }
  std::string error;
  if (c.type == Completion::Type::kError) {
    error = c.error.empty() ? "error completion" : c.error;
  }
  const WriteKind kind = contextKind(c.context);
  if (kind < WriteKind::kSlotHeader || kind > WriteKind::kCredits) {
    // Not one of this device's writes: an error the fabric saw on a link (a QP that failed) or on
    // the device itself (a port that went down).
    if (c.type != Completion::Type::kError) return;
    if (c.peer >= 0 && c.peer < static_cast<int>(peers_.size()) && peers_[c.peer]) {
      peers_[c.peer]->linkFailed(error);
    } else {
      poisonIo(rank_, detail::concat("the RDMA device of rank ", rank_, " failed: ", error));
    }
    return;
  }
  const int peer = contextPeer(c.context);
  if (peer >= static_cast<int>(peers_.size()) || !peers_[peer]) return;
  peers_[peer]->onWriteDone(contextKind(c.context), contextIndex(c.context),
                            c.type == Completion::Type::kError ? &error : nullptr);
}

unsigned DeviceState::progress() {
  if (!fabric_ || closed_) return 0;
  Completion batch[32];
  unsigned n = 0;
  for (int round = 0; round < 8; ++round) {
    const int got = fabric_->poll(batch, 32);
    for (int i = 0; i < got; ++i) dispatch(batch[i]);
    n += static_cast<unsigned>(std::max(got, 0));
    if (got < 32) break;
  }
  for (auto& p : peers_) {
    if (!p) continue;
    p->bounceUnexpected(kBounceAfter);
    p->flush();
  }
  return n;
}

void DeviceState::block(Clock::duration slice) {
  if (!fabric_ || closed_) {
    std::this_thread::sleep_for(std::min<Clock::duration>(slice, kSleepSlice));
    return;
  }
  for (auto& p : peers_) {
    if (!p) continue;
    p->returnCredits();                      // the peer may be waiting for them (protocol.h)
    p->bounceUnexpected(Clock::duration(0));  // and for a receive this rank has not posted (bounce)
  }
  slice = std::min<Clock::duration>(slice, hook_ ? Clock::duration(kHookSlice) : Clock::duration(kBlockSlice));
  if (slice <= Clock::duration::zero() || !fabric_->armWait()) return;
  const int fd = fabric_->waitFd();
  if (fd < 0) {
    std::this_thread::sleep_for(std::min<Clock::duration>(slice, kSleepSlice));
    return;
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  pollfd pfd{fd, POLLIN, 0};
  ::ppoll(&pfd, 1, &ts, nullptr);
}

void DeviceState::wait(RequestState& r, std::chrono::milliseconds timeout) {
  // The steps of liveness::waitFor over this device's fabric.
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
    void block(Clock::duration slice) { d.block(slice); }
    void afterAnnounce() {}
    void withdraw() { d.monitor_->withdraw(); }
    [[noreturn]] void timedOut(int culprit, const std::string& what) {
      d.poisonIo(culprit, what);
      d.throwPoison();
    }
  } steps{*this, r};
  liveness::waitFor(steps, *monitor_, {r.peer->rank(), r.isSend, r.length, r.tag}, tuning_.spin, timeout,
                    tuning_.timeout);
}

// ---- registrations and requests -------------------------------------------------------------

void DeviceState::registerFor(RequestState& r) {
  if (r.reg != nullptr || r.length == 0) return;
  RF_ENFORCE(cache_ != nullptr && !closed_, "rdma: the device is not connected");
  r.owned = cache_->acquire(r.data, r.length);
  r.entry = r.owned;
  r.reg = &r.owned->registration();
}

void DeviceState::finish(RequestState& r) {
  r.done = true;
  (r.isSend ? stats_.bytesSent : stats_.bytesReceived) += r.length;
  if (r.owned != nullptr && cache_) cache_->release(r.owned);
  r.owned = nullptr;
  r.entry = nullptr;
  r.reg = nullptr;
}

Stats DeviceState::stats() const {
  Stats s = stats_;
  if (cache_) {
    const RegistrationCache::Counters& c = cache_->counters();
    s.regHits = c.hits;
    s.regMisses = c.misses;
    s.registrations = c.registrations;
    s.deregistrations = c.deregistrations;
  }
  return s;
}

void DeviceState::shareMonitor(std::shared_ptr<liveness::Monitor> monitor) {
  monitor_.share(std::move(monitor), connected_);
}

// ---- liveness::Links ------------------------------------------------------------------------

void DeviceState::sendNotice(int peer, const liveness::Notice& notice) {
  if (peers_[peer] && !closed_) peers_[peer]->queueNotice(notice);
}

void DeviceState::sendAbort(int peer, ErrorKind kind, const std::string& text) {
  if (peers_[peer] && !closed_) peers_[peer]->queueAbort(kind, text);
}

liveness::Unacknowledged DeviceState::unacknowledged(int) const { return {}; }

int DeviceState::pid(int peer) const { return peers_[peer] ? peers_[peer]->pid() : 0; }

// ---- failure --------------------------------------------------------------------------------

void DeviceState::poison(std::exception_ptr error) noexcept {
  if (poison_ != nullptr) return;
  poison_ = std::move(error);
  settled_ = false;
  for (auto& p : peers_) {
    if (p) p->onPoison();
  }
  try {
    std::rethrow_exception(poison_);
  } catch (const std::exception& e) {
    RF_LOG(kDebug) << "rdma transport of rank " << rank_ << " poisoned: " << e.what();
  } catch (...) {
  }
}

void DeviceState::poisonIo(int peer, const std::string& what) noexcept {
  poison(std::make_exception_ptr(IoError(peer, what)));
}

bool DeviceState::anyBusy() const {
  for (auto& p : peers_) {
    if (p && p->busy()) return true;
  }
  return false;
}

bool DeviceState::abortsSent() const {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (static_cast<int>(i) == silentPeer_) continue;
    if (peers_[i] && peers_[i]->abortsPending()) return false;
  }
  return true;
}

// Drives progress until (this->*done)() or `budget` passes; true if done.
bool DeviceState::drainUntil(std::chrono::milliseconds budget, bool (DeviceState::*done)() const) {
  const Clock::time_point deadline = Clock::now() + budget;
  for (;;) {
    progress();
    if ((this->*done)()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    block(deadline - now);
  }
}

void DeviceState::settle() noexcept {
  if (settled_ || poison_ == nullptr) return;
  settled_ = true;
  if (fabric_ && !closed_ && !drainUntil(std::chrono::milliseconds(2000), &DeviceState::idle)) {
    RF_LOG(kWarning) << "rdma: writes still in flight 2 s after the transport failed";
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
  RF_LOG(kDebug) << "rdma: rank " << rank_ << " aborting: " << message;
  const bool settledBefore = poisoned();
  if (settledBefore) {
    // A rank this device failed on (a timeout's culprit, a failed link) may be dead: its fabric
    // never completes a write to it, so the abort is not waited for there (it still goes).
    std::string text;
    describeError(poison_, text, silentPeer_);
    settle();
  }
  std::exception_ptr error = monitor_->abort(*this, kind, message);  // queues a kAbort to every peer
  if (fabric_) {
    drainUntil(std::min<std::chrono::milliseconds>(tuning_.timeout, std::chrono::milliseconds(2000)),
               &DeviceState::abortsSent);
  }
  poison(error);
  // Settled above when already poisoned: a second drain would wait again for the writes to the
  // dead peer that never complete (2 s more before every rank hears of the failure).
  if (!settledBefore) {
    settled_ = false;
    settle();
  }
}

void DeviceState::onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept {
  if (std::exception_ptr error = monitor_->onAbort(peer, kind, message)) poison(error);  // the first abort wins
}

void DeviceState::shutdown() noexcept {
  if (closed_) return;
  if (fabric_) {
    const Stats s = stats();
    const uint64_t moved = s.bytesSent + s.bytesReceived;
    RF_LOG(kInfo) << "rdma: rank " << rank_ << " sent " << s.bytesSent << " and received " << s.bytesReceived
                  << " bytes, copied " << s.bytesCopied << " ("
                  << (moved ? static_cast<double>(s.bytesCopied) / static_cast<double>(moved) : 0.0)
                  << " per byte moved; staging " << s.stagingCopyBytes << ", out of slots " << s.receiveCopyBytes
                  << ", out of buffers " << s.unexpectedCopyBytes << "); " << s.eagerMessages << " eager and "
                  << s.rendezvousMessages << " rendezvous messages sent, " << s.bouncedMessages
                  << " received through a bounce buffer; registrations " << s.regHits << " hits, " << s.regMisses
                  << " misses";
  }
  if (!poisoned()) poison(std::make_exception_ptr(Error("the rdma device was destroyed")));
  settled_ = true;  // no draining: the fabric's close ends every write, and no peer is waited on
  for (auto& p : peers_) {
    if (p) p->forgetRequests();
  }
  if (fabric_) {
    if (cache_) cache_->close();
    for (auto& p : peers_) {
      if (p) p->releaseMemory();
    }
    fabric_->close();
  }
  closed_ = true;
}

}  // namespace ringfold::transport::rdma
