// Peer of the shm backend (peer.h): the protocol of protocol.h with one peer.
#include "transport/shm/peer.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "transport/connection.h"
#include "transport/liveness/process.h"
#include "transport/shm/device_state.h"
#include "transport/shm/protocol.h"
#include "transport/tcp_uring/frame.h"

namespace ringfold::transport::shm {

Peer::Peer(DeviceState& device, int rank) : device_(device), rank_(rank) {}

Peer::~Peer() {
  if (peerDoorbell_ >= 0) ::close(peerDoorbell_);
}

void Peer::attach(Segment inbox, Segment outbox, int peerDoorbell, tcp_uring::Socket socket, pid_t pid,
                  bool cmaToPeer, std::string cmaWhyNot) {
  inboxSegment_ = std::move(inbox);
  outboxSegment_ = std::move(outbox);
  // The inbox's geometry is this rank's own (it formatted the ring); the outbox's is read once
  // and checked (ring.h: the peer may rewrite its header later).
  in_ = Ring(inboxSegment_.data(), device_.tuning().slots, device_.tuning().slotBytes);
  out_ = Ring(outboxSegment_.data());
  if (!out_.valid(outboxSegment_.size())) {
    throw IoError(rank_, detail::concat("shm: the ring rank ", rank_, " sent is not formatted as one"));
  }
  peerDoorbell_ = peerDoorbell;
  socket_ = std::move(socket);
  pid_ = pid;
  cmaToPeer_ = cmaToPeer;
  cmaWhyNot_ = std::move(cmaWhyNot);
}

// ---- requests ---------------------------------------------------------------------------------

void Peer::postSend(RequestState& r) {
  r.posted = true;
  if (gone_) return poisonGone();
  sendQueue_.push_back(&r);
  flush();
}

void Peer::postRecv(RequestState& r) {
  r.posted = true;
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    Unexpected& u = **it;
    if (u.tag != r.tag) continue;
    if (!agree(r, u.length, u.check)) return;
    if (u.rts) {
      if (!readRts(r.data, u.length, u.address, u.id)) return;
      r.offset = u.length;
      finish(r);
    } else if (inBuffer_ == &u) {
      // Still arriving: what came so far moves over, the rest lands in the receive directly.
      std::memcpy(r.data, u.data.get(), u.filled);
      device_.counters().unexpectedCopyBytes += u.filled;
      r.offset = u.filled;
      inBuffer_ = nullptr;
      inRequest_ = &r;
    } else {
      deliver(r, u);
    }
    recycle(u);
    unexpected_.erase(it);
    return;
  }
  if (gone_) return poisonGone();
  posted_.push_back(&r);
}

void Peer::deliver(RequestState& r, Unexpected& u) {
  if (u.length > 0) std::memcpy(r.data, u.data.get(), u.length);
  device_.counters().unexpectedCopyBytes += u.length;
  r.offset = u.length;
  finish(r);
}

bool Peer::allocate(Unexpected& u) {
  // Buffered until its receive comes: a size no memory here can hold fails the pair, with the
  // size in the message, instead of the process (tcp_uring's rule; tests/fuzz/shm_slots_fuzz).
  if (u.length > tcp_uring::hostMemoryBytes()) {
    device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a message of ", u.length,
                                           " bytes before this rank posted its receive, and there is no memory to "
                                           "hold it until then (this host has ", tcp_uring::hostMemoryBytes(),
                                           " bytes)"));
    return false;
  }
  auto best = spares_.end();
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->first >= u.length && (best == spares_.end() || it->first < best->first)) best = it;
  }
  if (best != spares_.end()) {
    u.capacity = best->first;
    u.data = std::move(best->second);
    spares_.erase(best);
    return true;
  }
  u.capacity = std::max<size_t>(u.length, 1);
  try {
    u.data.reset(new std::byte[u.capacity]);
  } catch (const std::bad_alloc&) {
    device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a message of ", u.length,
                                           " bytes before this rank posted its receive, and there is no memory "
                                           "left to hold it until then"));
    return false;
  }
  return true;
}

void Peer::recycle(Unexpected& u) {
  constexpr size_t kSpares = 8;  // enough for a collective's segments in flight
  if (!u.data) return;
  if (spares_.size() >= kSpares) {
    // Keep the larger buffers: they are the expensive ones.
    auto smallest = std::min_element(spares_.begin(), spares_.end(),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (smallest->first >= u.capacity) return;
    spares_.erase(smallest);
  }
  spares_.emplace_back(u.capacity, std::move(u.data));
}

void Peer::finish(RequestState& r) {
  r.done = true;
  (r.isSend ? device_.counters().bytesSent : device_.counters().bytesReceived) += r.length;
}

RequestState* Peer::match(uint64_t tag) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if ((*it)->tag == tag) {
      RequestState* r = *it;
      posted_.erase(it);
      return r;
    }
  }
  return nullptr;
}

bool Peer::agree(const RequestState& r, uint64_t length, uint64_t check) {
  if (r.length == length && r.check == check) return true;
  SlotHeader h;
  h.type = kMismatch;
  h.tag = r.tag;
  h.check = r.check;
  h.extra = r.length;
  h.length = length;
  h.address = check;
  queueControl(h);
  flush();  // the sender learns it too (best effort: the ring may be full)
  device_.poison(std::make_exception_ptr(CheckMismatch(rank_, r.tag, r.length, length, r.check, check)));
  return false;
}

bool Peer::readRts(std::byte* dst, uint64_t length, uint64_t address, uint64_t id) {
  const std::string why = cma::read(pid_, dst, address, length);
  if (!why.empty()) {
    // Most often the sender was killed while this rank read its buffer: say so as a closed
    // connection would.
    device_.poisonIo(rank_, detail::concat("reading ", length, " bytes from the memory of rank ", rank_,
                                           " failed (", why, "): ", processText("")));
    return false;
  }
  device_.counters().cmaBytes += length;
  // The sender's send is complete (ring.h: ack words); wake it if it sleeps.
  in_.ack(id).store(id, std::memory_order_release);
  wakeIfSleeping(in_.header()->producerSleeping);
  return true;
}

// ---- receiving --------------------------------------------------------------------------------

unsigned Peer::collectAcks() {
  unsigned n = 0;
  for (size_t i = 0; i < awaitingAck_.size();) {
    const auto [id, r] = awaitingAck_[i];
    if (out_.ack(id).load(std::memory_order_acquire) != id) {
      ++i;
      continue;
    }
    awaitingAck_[i] = awaitingAck_.back();
    awaitingAck_.pop_back();
    r->offset = r->length;
    finish(*r);
    ++n;
  }
  return n;
}

unsigned Peer::receive() {
  if (in_.header() == nullptr) return 0;
  const unsigned acked = awaitingAck_.empty() ? 0 : collectAcks();
  RingHeader* h = in_.header();
  const uint64_t tail = h->tail.load(std::memory_order_acquire);
  unsigned n = 0;
  parked_ = false;
  if (tail - head_ > in_.slots()) {
    // More published than the ring holds, or a tail that went back: no slot can be trusted (a
    // tail far ahead kept this loop reading stale slots; tests/fuzz/shm_slots_fuzz plays such a peer).
    device_.poisonIo(rank_, detail::concat("rank ", rank_, " published ring position ", tail, " while this rank had read ",
                                           head_, " of a ring of ", in_.slots(),
                                           " slots (a corrupt ring, or another ringfold version?)"));
    return acked;
  }
  while (head_ < tail && !device_.poisoned()) {
    if (!inMessage_ && parks(in_.slot(head_))) {
      parked_ = true;
      break;
    }
    handle(in_.slot(head_));
    ++head_;
    h->head.store(head_, std::memory_order_release);
    ++n;
  }
  if (n > 0) {
    device_.monitor().heard(rank_);
    wakeIfSleeping(h->producerSleeping);  // the peer may sleep waiting for the space just freed
  }
  return n + acked;
}

bool Peer::parks(const SlotHeader* s) const {
  if (s->type != kEager) return false;
  const uint64_t tag = s->tag;
  for (const RequestState* r : posted_) {
    if (r->tag == tag) return r->lazy && r->sink == nullptr;
  }
  return false;
}

bool Peer::unpark() {
  if (!parked_) return false;
  RingHeader* h = in_.header();
  if (head_ < h->tail.load(std::memory_order_acquire)) {
    for (RequestState* r : posted_) {
      if (r->tag == in_.slot(head_)->tag) {
        r->lazy = false;
        break;
      }
    }
  }
  parked_ = false;
  return true;
}

void Peer::handle(SlotHeader* s) {
  const SlotHeader slot = *s;  // one read of the header; the payload stays in the ring
  auto& stats = device_.counters();
  const size_t bytes = std::min<size_t>(slot.bytes, in_.payloadBytes());
  switch (slot.type) {
    case kEager: {
      if (inMessage_) return interleaved(slot);
      device_.monitor().onMessage(rank_, slot.number);
      inMessage_ = true;
      inRequest_ = match(slot.tag);
      inBuffer_ = nullptr;
      if (inRequest_ != nullptr) {
        if (!agree(*inRequest_, slot.length, slot.check)) return;
        inRequest_->offset = 0;
      } else {
        auto u = std::make_unique<Unexpected>();
        u->tag = slot.tag;
        u->check = slot.check;
        u->length = slot.length;
        if (!allocate(*u)) return;
        inBuffer_ = u.get();
        unexpected_.push_back(std::move(u));
      }
      [[fallthrough]];
    }
    case kMore: {
      if (!inMessage_) {
        device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a continuation slot outside a message"));
        return;
      }
      const std::byte* from = Ring::payload(s);
      if (inRequest_ != nullptr) {
        RequestState& r = *inRequest_;
        const size_t take = std::min(bytes, r.length - r.offset);
        if (r.sink != nullptr) {
          r.sink->take(r.offset, from, take);
          r.sunk += take;
          stats.ringSinkBytes += take;
        } else if (take > 0) {  // a zero-length receive may have no memory at all
          std::memcpy(r.data + r.offset, from, take);
          stats.ringCopyBytes += take;
        }
        r.offset += take;
        if (r.offset == r.length) {
          finish(r);
          inRequest_ = nullptr;
          inMessage_ = false;
        }
      } else if (inBuffer_ != nullptr) {
        Unexpected& u = *inBuffer_;
        const size_t take = std::min<size_t>(bytes, u.length - u.filled);
        std::memcpy(u.data.get() + u.filled, from, take);
        u.filled += take;
        stats.ringCopyBytes += take;
        if (u.filled == u.length) {
          inBuffer_ = nullptr;
          inMessage_ = false;
        }
      }
      return;
    }
    case kRts: {
      if (inMessage_) return interleaved(slot);
      device_.monitor().onMessage(rank_, slot.number);
      if (RequestState* r = match(slot.tag)) {
        if (!agree(*r, slot.length, slot.check)) return;
        if (!readRts(r->data, slot.length, slot.address, slot.id)) return;
        r->offset = slot.length;
        finish(*r);
        return;
      }
      auto u = std::make_unique<Unexpected>();
      u->tag = slot.tag;
      u->check = slot.check;
      u->length = slot.length;
      u->rts = true;
      u->address = slot.address;
      u->id = slot.id;
      u->arrived = Clock::now();
      unexpected_.push_back(std::move(u));
      return;
    }
    case kMismatch:
      device_.poison(std::make_exception_ptr(
          CheckMismatch(rank_, slot.tag, slot.extra, slot.length, slot.check, slot.address)));
      return;
    case kNotice: {
      liveness::Notice n;
      n.seq = static_cast<uint32_t>(slot.id);
      n.waitedOn = static_cast<int>(static_cast<uint32_t>(slot.extra)) - 1;
      n.waited = std::chrono::milliseconds(slot.extra >> 32);
      n.silent = std::chrono::milliseconds(slot.length);
      n.firstLaterMessage = slot.number;
      device_.monitor().onNotice(rank_, n);
      return;
    }
    case kAbort: {
      const std::string text(reinterpret_cast<const char*>(Ring::payload(s)), bytes);
      device_.onPeerAbort(rank_, static_cast<ErrorKind>(slot.status), text);
      return;
    }
    default:
      device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a slot of unknown type ", int(slot.type),
                                             " (another ringfold version?)"));
  }
}

void Peer::interleaved(const SlotHeader& slot) {
  // Data messages never interleave (protocol.h): the one cut off would never complete, or (were
  // it buffered) reach a receive with bytes its sender never wrote (tests/fuzz/shm_slots_fuzz
  // plays such a peer).
  device_.poisonIo(rank_, detail::concat("rank ", rank_, " started a message (tag ", slot.tag, ", ", slot.length,
                                         " bytes) before the last slot of the one it was sending"));
}

void Peer::bounceUnexpected(Clock::duration minAge) {
  if (unexpected_.empty()) return;
  const Clock::time_point now = Clock::now();
  for (auto& u : unexpected_) {
    if (!u->rts || now - u->arrived < minAge) continue;
    if (!allocate(*u)) return;
    if (!readRts(u->data.get(), u->length, u->address, u->id)) return;
    u->rts = false;
    u->filled = u->length;
    ++device_.counters().bouncedMessages;
  }
}

// ---- sending ----------------------------------------------------------------------------------

size_t Peer::space() {
  const uint64_t slots = out_.slots();
  if (tail_ - cachedHead_ >= slots) cachedHead_ = out_.header()->head.load(std::memory_order_acquire);
  return static_cast<size_t>(slots - (tail_ - cachedHead_));
}

void Peer::publish() { out_.header()->tail.store(++tail_, std::memory_order_release); }

unsigned Peer::flush() {
  if (out_.header() == nullptr || gone_) return 0;
  unsigned n = 0;
  const size_t payload = out_.payloadBytes();
  auto& stats = device_.counters();
  while (!control_.empty() && space() > 0) {
    Control& c = control_.front();
    SlotHeader* s = out_.slot(tail_);
    SlotHeader h = c.header;
    if (h.type == kNotice) h.number = sent_;  // the next message number goes with the notice
    h.bytes = static_cast<uint32_t>(std::min(c.payload.size(), payload));
    std::memcpy(Ring::payload(s), c.payload.data(), h.bytes);
    *s = h;
    publish();
    control_.pop_front();
    ++n;
  }
  while (!sendQueue_.empty() && space() > 0) {
    RequestState& r = *sendQueue_.front();
    SlotHeader* s = out_.slot(tail_);
    if (!r.started) {
      const bool cma = cmaToPeer_ && r.length >= device_.tuning().cmaMinBytes;
      if (cma && awaitingAck_.size() >= kAckWords) break;  // every ack word is in use: wait for one
      r.started = true;
      SlotHeader h;
      h.tag = r.tag;
      h.check = r.check;
      h.length = r.length;
      h.number = sent_++;
      if (cma) {
        h.type = kRts;
        h.address = reinterpret_cast<uint64_t>(r.data);
        h.id = nextId_++;
        *s = h;
        publish();
        ++n;
        awaitingAck_.emplace_back(h.id, &r);
        sendQueue_.pop_front();
        ++stats.cmaMessages;
        continue;
      }
      h.type = kEager;
      h.bytes = static_cast<uint32_t>(std::min(r.length, payload));
      if (h.bytes > 0) std::memcpy(Ring::payload(s), r.data, h.bytes);  // a zero-length send may have no memory
      *s = h;
      r.offset = h.bytes;
      ++stats.eagerMessages;
    } else {
      SlotHeader h;
      h.type = kMore;
      h.bytes = static_cast<uint32_t>(std::min(r.length - r.offset, payload));
      std::memcpy(Ring::payload(s), r.data + r.offset, h.bytes);
      *s = h;
      r.offset += h.bytes;
    }
    stats.ringCopyBytes += s->bytes;
    publish();
    ++n;
    if (r.offset == r.length) {
      sendQueue_.pop_front();
      finish(r);
    }
  }
  if (n > 0) {
    wakeIfSleeping(out_.header()->consumerSleeping);  // the peer may sleep waiting for these slots
  }
  return n;
}

void Peer::wakeIfSleeping(std::atomic<uint32_t>& sleeping) {
  // The waker's half of ring.h's sleeping protocol: after publishing, a fence, then the flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_relaxed) != 0 && sleeping.exchange(0, std::memory_order_relaxed) != 0) {
    DeviceState::ring(peerDoorbell_);
  }
}

void Peer::queueControl(const SlotHeader& h, std::string payload) { control_.push_back({h, std::move(payload)}); }

void Peer::queueNotice(const liveness::Notice& notice) {
  if (gone_ || control_.size() > 64) return;  // best effort
  SlotHeader h;
  h.type = kNotice;
  h.id = notice.seq;
  h.extra = static_cast<uint32_t>(notice.waitedOn + 1) | (static_cast<uint64_t>(notice.waited.count()) << 32);
  h.length = static_cast<uint64_t>(notice.silent.count());
  queueControl(h);
  flush();
}

void Peer::queueAbort(ErrorKind kind, const std::string& text) {
  if (gone_) return;
  SlotHeader h;
  h.type = kAbort;
  h.status = static_cast<uint8_t>(kind);
  queueControl(h, text);
  flush();
}

bool Peer::abortPending() const {
  if (gone_) return false;
  return std::any_of(control_.begin(), control_.end(), [](const Control& c) { return c.header.type == kAbort; });
}

// ---- sleeping ---------------------------------------------------------------------------------

void Peer::prepareSleep() {
  if (in_.header() == nullptr) return;
  in_.header()->consumerSleeping.store(1, std::memory_order_seq_cst);
  if (!sendQueue_.empty() || !control_.empty() || !awaitingAck_.empty()) {
    out_.header()->producerSleeping.store(1, std::memory_order_seq_cst);
  }
}

void Peer::endSleep() {
  if (in_.header() == nullptr) return;
  in_.header()->consumerSleeping.store(0, std::memory_order_relaxed);
  out_.header()->producerSleeping.store(0, std::memory_order_relaxed);
}

bool Peer::ready() const {
  if (in_.header() == nullptr) return false;
  // A parked message is no slot to read: it waits for its deliver() (or an unpark).
  if (!parked_ && in_.header()->tail.load(std::memory_order_seq_cst) != head_) return true;
  for (const auto& [id, r] : awaitingAck_) {
    if (out_.ack(id).load(std::memory_order_seq_cst) == id) return true;
  }
  if (sendQueue_.empty() && control_.empty()) return false;
  return tail_ - out_.header()->head.load(std::memory_order_seq_cst) < out_.slots();
}

// ---- failure ----------------------------------------------------------------------------------

void Peer::hangUp() {
  if (gone_) return;
  receive();  // what the peer published before it ended is still delivered
  gone_ = true;
  if (hasPendingWork()) poisonGone();
}

bool Peer::hasPendingWork() const {
  return !posted_.empty() || !sendQueue_.empty() || !awaitingAck_.empty() || inMessage_ ||
         std::any_of(unexpected_.begin(), unexpected_.end(), [](const auto& u) { return u->rts; });
}

std::string Peer::processText(const char* ifRunning) const {
  const std::string process = pid_ > 0 ? detail::concat("the process of rank ", rank_, " (pid ", pid_, ")")
                                       : detail::concat("the process of rank ", rank_);
  switch (liveness::processState(pid_, std::chrono::milliseconds(500))) {
    case liveness::ProcessState::kExited:
      return process + " exited";
    case liveness::ProcessState::kRunning:
    case liveness::ProcessState::kStopped:
      return process + " is still running" + ifRunning;
    case liveness::ProcessState::kUnknown:
      break;
  }
  return process + " exited or crashed";
}

void Peer::poisonGone() {
  if (device_.poisoned()) return;
  device_.poisonIo(rank_, detail::concat("the shared-memory connection to rank ", rank_, " closed",
                                         inMessage_ ? " in the middle of a message" : "", ": ",
                                         processText(", so it closed its connections (shut ringfold down)")));
}

void Peer::onPoison() {
  posted_.clear();
  sendQueue_.clear();
  awaitingAck_.clear();
  inRequest_ = nullptr;
}

}  // namespace ringfold::transport::shm
