// Peer (peer.h), the receiving side: immediates, slots in message-number order, matching,
// eager delivery, the receiver's side of rendezvous (clear to send, completion) and bounces.
#include "transport/rdma/peer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "transport/host_identity.h"
#include "transport/rdma/device_state.h"
#include "transport/rdma/protocol.h"

namespace ringfold::transport::rdma {

using wire::SlotHeader;
using wire::SlotType;

namespace {

constexpr size_t kHeader = sizeof(SlotHeader);
uint16_t typeOf(SlotType t) { return static_cast<uint16_t>(t); }

}  // namespace

void Peer::onImmediate(uint32_t imm) {
  const uint32_t value = wire::immValue(imm);
  switch (wire::immType(imm)) {
    case wire::ImmType::kSlot:
      ++immRepost_;
      if (value >= slots_) return protocolError(detail::concat("slot ", value, " of a ring of ", slots_));
      onSlot(value);
      return;
    case wire::ImmType::kCredits:
      ++immRepost_;
      credits_ += value;
      if (credits_ > remote_.slots) return protocolError(detail::concat(credits_, " credits for ", remote_.slots, " slots"));
      return;
    case wire::ImmType::kDone:
      onDone(value);
      return;
  }
  protocolError(detail::concat("unknown immediate ", imm));
}

void Peer::onSlot(uint32_t index) {
  const std::byte* slot = ring_ + size_t{index} * slotBytes_;
  SlotHeader h;
  std::memcpy(&h, slot, kHeader);
  const std::byte* payload = slot + kHeader;
  if (device_.poisoned()) return consumed(index);  // nothing is delivered any more; the slot frees
  if (h.payloadBytes > recvEagerLimit()) return protocolError("a slot's payload is larger than the slot");
  switch (static_cast<SlotType>(h.type)) {
    case SlotType::kHello: {
      std::istringstream in(std::string(reinterpret_cast<const char*>(payload), h.payloadBytes));
      std::string magic, identity;
      int from = -1;
      in >> magic >> from >> identity;
      if (magic != "ringfold-rdma" || from != rank_) return protocolError("bad hello");
      pid_ = localPid(identity, processIdentity());
      helloSeen_ = true;
      break;
    }
    case SlotType::kData:
    case SlotType::kRts: {
      if (h.type == typeOf(SlotType::kData) && h.length != h.payloadBytes) return protocolError("eager length");
      if (h.type == typeOf(SlotType::kRts) && h.length <= recvEagerLimit()) {
        // A sender uses rendezvous only for what does not fit a slot; a zero-length one would have
        // no registration to answer with (found by tests/fuzz/rdma_slots_fuzz: a null dereference).
        return protocolError(detail::concat("a request to send ", h.length, " bytes, which fit a slot"));
      }
      if (h.type == typeOf(SlotType::kData) && h.address != 0) {
        // Sent without a copy: the header came in a write of its own, which must have landed.
        const uint64_t position = freeHead_ + (index + slots_ - freeHead_ % slots_) % slots_;
        if (h.address != position + 1) {
          return protocolError(detail::concat("the header of ring position ", position, " did not land"), true);
        }
      }
      device_.monitor().onMessage(rank_, h.message);
      if (h.message < nextResolve_ || held_.count(h.message) != 0) {
        return protocolError(detail::concat("message ", h.message, " arrived twice"));
      }
      if (h.message - nextResolve_ >= slots_) {
        // A sender is at most a ring ahead of the oldest message not yet here (it needs a credit
        // per ring position, and credits return in order), so at most that many are held.
        return protocolError(detail::concat("message ", h.message, " arrived while message ", nextResolve_,
                                            " is awaited, more than a ring of ", slots_, " slots earlier"));
      }
      if (h.message > nextResolve_) {
        // An earlier message is still on its way: keep this one (its payload out of the slot).
        Inbound m{h, nullptr};
        if (h.type == typeOf(SlotType::kData) && h.length > 0) {
          m.payload.reset(new std::byte[h.length]);
          std::memcpy(m.payload.get(), payload, h.length);
          device_.counters().receiveCopyBytes += h.length;
          device_.counters().bytesCopied += h.length;
        }
        held_.emplace(h.message, std::move(m));
        break;
      }
      resolve(Inbound{h, nullptr}, payload);
      while (!held_.empty() && held_.begin()->first == nextResolve_ && !device_.poisoned()) {
        Inbound m = std::move(held_.begin()->second);
        held_.erase(held_.begin());
        resolve(std::move(m), nullptr);
      }
      break;
    }
    case SlotType::kCts: onCts(h); break;
    case SlotType::kNotice: {
      liveness::Notice n;
      n.seq = static_cast<uint32_t>(h.message);
      n.waitedOn = h.tag == 0 ? -1 : static_cast<int>(h.tag - 1);
      n.waited = std::chrono::milliseconds(h.check);
      n.silent = std::chrono::milliseconds(h.length);
      n.firstLaterMessage = h.rkey;
      device_.monitor().onNotice(rank_, n);
      break;
    }
    case SlotType::kAbort:
      device_.onPeerAbort(rank_, static_cast<ErrorKind>(h.status),
                          std::string(reinterpret_cast<const char*>(payload), h.payloadBytes));
      break;
    case SlotType::kNone:
      return protocolError(detail::concat("slot ", index, " arrived without its header"), true);
    default: return protocolError(detail::concat("unknown slot type ", h.type));
  }
  consumed(index);
}

// Frees ring slot `index`; credits go back for the oldest positions once they are all free.
void Peer::consumed(uint32_t index) {
  consumed_[index] = true;
  while (consumed_[freeHead_ % slots_]) {
    consumed_[freeHead_ % slots_] = false;
    ++freeHead_;
    ++unreturned_;
  }
}

// Message m (the next in number order): to the first posted receive of its tag, or unexpected.
// `slotPayload`: an eager payload still in its slot (null: in m.payload).
void Peer::resolve(Inbound m, const std::byte* slotPayload) {
  ++nextResolve_;
  const SlotHeader& h = m.header;
  const bool eager = h.type == typeOf(SlotType::kData);
  auto it = std::find_if(posted_.begin(), posted_.end(), [&](RequestState* r) { return r->tag == h.tag; });
  if (it != posted_.end()) {
    RequestState& r = **it;
    posted_.erase(it);
    if (mismatch(r, h)) return;
    if (eager) {
      deliverEager(r, h, slotPayload != nullptr ? slotPayload : m.payload.get(), slotPayload == nullptr);
    } else {
      accept(r, h);
    }
    return;
  }
  if (eager && slotPayload != nullptr && h.length > 0) {
    m.payload.reset(new std::byte[h.length]);
    std::memcpy(m.payload.get(), slotPayload, h.length);
    device_.counters().receiveCopyBytes += h.length;
    device_.counters().bytesCopied += h.length;
  }
  if (!eager) {
    m.arrived = std::chrono::steady_clock::now();
    ++unexpectedRts_;
  }
  unexpected_.push_back(std::move(m));
}

void Peer::postRecv(RequestState& r) {
  r.posted = true;
  auto it = std::find_if(unexpected_.begin(), unexpected_.end(), [&](const Inbound& m) { return m.header.tag == r.tag; });
  if (it == unexpected_.end()) {
    if (gone_) return poisonGone();
    posted_.push_back(&r);
    return;
  }
  Inbound m = std::move(*it);
  unexpected_.erase(it);
  const bool rts = m.header.type == typeOf(SlotType::kRts);
  if (rts && m.bounce == kNoId) --unexpectedRts_;
  if (m.bounce != kNoId) m.header.rts = kNoId;  // its sender was answered: a mismatch only fails it
  if (mismatch(r, m.header)) return;
  if (!rts) {
    deliverEager(r, m.header, m.payload.get(), true);
  } else if (m.bounce != kNoId) {
    deliverBounce(r, m.bounce);
  } else {
    accept(r, m.header);
  }
}

void Peer::bounceUnexpected(std::chrono::steady_clock::duration minAge) {
  if (unexpectedRts_ == 0 || gone_ || device_.poisoned()) return;
  const auto arrivedBefore = std::chrono::steady_clock::now() - minAge;
  for (Inbound& m : unexpected_) {
    if (m.header.type != typeOf(SlotType::kRts) || m.bounce != kNoId || m.arrived >= arrivedBefore) continue;
    if (m.header.length > hostMemoryBytes()) {
      // A size no memory here can hold fails the link, with the size in the message, instead of
      // the process (tcp_uring's rule; tests/fuzz/rdma_slots_fuzz plays such a peer).
      device_.poisonIo(rank_, detail::concat("rank ", rank_, " sent a request to send ", m.header.length,
                                             " bytes before this rank posted its receive, and there is no memory "
                                             "to hold it until then (this host has ", hostMemoryBytes(), " bytes)"));
      return;
    }
    Buffer b;
    try {
      b = takeBuffer(m.header.length);
    } catch (...) {
      device_.poison(std::current_exception());
      return;
    }
    const uint64_t at = b.reg.remoteBase + static_cast<uint64_t>(b.data - static_cast<std::byte*>(b.reg.data));
    const Registration reg = b.reg;
    const uint32_t id = clearToSend(m.header, reg, at, m.header.length, nullptr, nullptr);
    bounces_[id] = Bounce{b, m.header.length, false, nullptr};
    m.bounce = id;
    --unexpectedRts_;
    ++device_.counters().bouncedMessages;
  }
}

// A receive took a bounced message: copy it out once it has landed.
void Peer::deliverBounce(RequestState& r, uint32_t id) {
  auto it = bounces_.find(id);
  if (it == bounces_.end()) return protocolError(detail::concat("unknown bounce ", id));
  Bounce& b = it->second;
  if (!b.landed) {
    b.req = &r;
    return;
  }
  if (b.length > 0) {
    std::memcpy(r.data, b.buffer.data, b.length);
    device_.counters().unexpectedCopyBytes += b.length;
    device_.counters().bytesCopied += b.length;
  }
  giveBuffer(b.buffer);
  bounces_.erase(it);
  finish(r);
}

Peer::Buffer Peer::takeBuffer(size_t bytes) {
  const size_t size = std::max<size_t>((bytes + 4095) & ~size_t{4095}, 4096);
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].size >= size && spare_[i].size <= 2 * size) {
      Buffer b = spare_[i];
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
      spareBytes_ -= b.size;
      return b;
    }
  }
  Buffer b;
  b.data = allocatePages(size, false);  // the sender's writes fill it before it is read
  b.size = size;
  try {
    b.reg = device_.fabric().registerMemory(b.data, size, MemoryKind::kHost);
  } catch (...) {
    std::free(b.data);
    throw;
  }
  return b;
}

void Peer::giveBuffer(Buffer b) noexcept {
  if (spareBytes_ + b.size <= kSpareBounceBytes) {
    spareBytes_ += b.size;
    spare_.push_back(b);
    return;
  }
  if (Fabric* f = device_.fabricIfOpen()) f->deregister(b.reg);
  std::free(b.data);
}

void Peer::deliverEager(RequestState& r, const SlotHeader& h, const std::byte* payload, bool fromBuffer) {
  if (h.length > 0) {
    std::memcpy(r.data, payload, h.length);
    (fromBuffer ? device_.counters().unexpectedCopyBytes : device_.counters().receiveCopyBytes) += h.length;
    device_.counters().bytesCopied += h.length;
  }
  finish(r);
}

// Length or check differ (for an up-to receive: the message is longer): fail here and tell the
// sender (its device fails the same way).
bool Peer::mismatch(RequestState& r, const SlotHeader& h) {
  if ((r.upTo ? h.length <= r.length : h.length == r.length) && r.check == h.check) {
    r.length = h.length;
    return false;
  }
  SlotHeader c;
  c.type = typeOf(SlotType::kCts);
  c.status = static_cast<uint16_t>(wire::CtsStatus::kMismatch);
  c.message = h.message;
  c.tag = h.tag;
  c.length = r.length;
  c.check = r.check;
  c.address = h.length;
  c.rkey = h.check;
  c.rts = h.type == typeOf(SlotType::kRts) ? h.rts : kNoId;
  c.rendezvous = kNoId;
  sendControl(c, {}, true);
  device_.poison(std::make_exception_ptr(CheckMismatch(rank_, h.tag, r.length, h.length, r.check, h.check)));
  return true;
}

// A request to send matched receive r: its destination is r's registered memory.
void Peer::accept(RequestState& r, const SlotHeader& h) {
  try {
    device_.registerFor(r);
  } catch (...) {
    device_.poison(std::current_exception());
    return;
  }
  const Registration& reg = *r.reg;
  clearToSend(h, reg, reg.remoteBase + static_cast<uint64_t>(r.data - static_cast<std::byte*>(reg.data)), r.length,
              &r, r.entry);
}

// Chooses the cut, expects its kDone immediates, answers kCts.
uint32_t Peer::clearToSend(const SlotHeader& h, const Registration& reg, uint64_t address, uint64_t length,
                           RequestState* r, RegistrationCache::Entry* fence) {
  Fabric& f = device_.fabric();
  const size_t maxWrite = std::max<size_t>(f.maxWriteBytes(), 1);
  const uint32_t lanes = static_cast<uint32_t>(std::max(f.lanes(), 1));
  uint64_t chunk = std::clamp<uint64_t>(device_.tuning().chunkBytes, 1, maxWrite);
  uint64_t chunks = (length + chunk - 1) / chunk;
  if (chunks < lanes) {  // smaller chunks (4 KiB multiples) to use more lanes
    const uint64_t spread = std::max<uint64_t>(4096, ((length + lanes - 1) / lanes + 4095) & ~uint64_t{4095});
    chunk = std::min<uint64_t>(spread, maxWrite);
    chunks = (length + chunk - 1) / chunk;
  }
  const uint32_t used = static_cast<uint32_t>(std::min<uint64_t>(lanes, chunks));
  const uint32_t expected = static_cast<uint32_t>(chunks);  // every chunk carries kDone (protocol.h)
  uint32_t id = nextRdv_++ & wire::kImmValueMask;
  while (rdvRecv_.count(id) != 0 || bounces_.count(id) != 0) id = nextRdv_++ & wire::kImmValueMask;
  rdvRecv_[id] = RdvRecv{r, fence, expected, 0};
  f.postImmReceives(rank_, static_cast<int>(expected));
  SlotHeader c;
  c.type = typeOf(SlotType::kCts);
  c.status = static_cast<uint16_t>(wire::CtsStatus::kAccept);
  c.message = h.message;
  c.tag = h.tag;
  c.length = length;
  c.address = address;
  c.rkey = reg.rkey;
  c.rts = h.rts;
  c.rendezvous = id;
  c.check = wire::packCut(chunk, used);
  sendControl(c, {}, false);
  return id;
}

void Peer::onDone(uint32_t id) {
  auto it = rdvRecv_.find(id);
  if (it == rdvRecv_.end()) {
    if (!device_.poisoned()) protocolError(detail::concat("completion of unknown rendezvous ", id));
    return;
  }
  if (++it->second.seen < it->second.expected) return;
  RequestState* r = it->second.req;
  rdvRecv_.erase(it);
  if (r != nullptr) return finish(*r);
  auto b = bounces_.find(id);  // a bounce landed: deliver it if a receive already took it
  if (b == bounces_.end()) return;
  b->second.landed = true;
  if (b->second.req != nullptr) deliverBounce(*b->second.req, id);
}

}  // namespace ringfold::transport::rdma
