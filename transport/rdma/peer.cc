// Peer (peer.h): the protocol of protocol.h with one peer: start-up, sending (slots, credits,
// the sender's side of rendezvous), liveness and failure. Receiving is peer_receive.cc.
#include "transport/rdma/peer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "common/error.h"
#include "common/logging.h"
#include "transport/liveness/process.h"
#include "transport/rdma/device_state.h"
#include "transport/rdma/protocol.h"

namespace ringfold::transport::rdma {

using wire::SlotHeader;
using wire::SlotType;

namespace {

constexpr size_t kHeader = sizeof(SlotHeader);

uint16_t typeOf(SlotType t) { return static_cast<uint16_t>(t); }

// Whether a write reads the caller's memory (rather than this device's staging area).
bool fromUser(uint64_t context) {
  const WriteKind k = contextKind(context);
  return k == WriteKind::kSlotPayload || k == WriteKind::kChunk;
}

}  // namespace

std::byte* allocatePages(size_t bytes, bool zeroed) {
  const size_t size = (bytes + 4095) & ~size_t{4095};
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, size) != 0) RF_THROW(Error, "rdma: cannot allocate ", size, " bytes");
  if (zeroed) std::memset(p, 0, size);
  return static_cast<std::byte*>(p);
}

size_t hostMemoryBytes() {
  static const size_t bytes =
      static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return bytes;
}

Peer::Peer(DeviceState& device, int rank) : device_(device), rank_(rank) {}

Peer::~Peer() {
  // Bounce buffers may still be registered if the fabric closed first; their memory goes last.
  for (auto& [id, b] : bounces_) std::free(b.buffer.data);
  for (Buffer& b : spare_) std::free(b.data);
  std::free(ring_);
  std::free(staging_);
}

// ---- start-up -------------------------------------------------------------------------------

void Peer::createRing(uint32_t slots, uint32_t slotBytes) {
  slots_ = slots;
  slotBytes_ = slotBytes;
  const size_t bytes = size_t{slots} * slotBytes;
  ring_ = allocatePages(bytes);
  ringReg_ = device_.fabric().registerMemory(ring_, bytes, MemoryKind::kHost);
  ringRegistered_ = true;
  consumed_.assign(slots, false);
}

RingAddress Peer::ring() const {
  const uint64_t offset = static_cast<uint64_t>(ring_ - static_cast<std::byte*>(ringReg_.data));
  return RingAddress{ringReg_.remoteBase + offset, ringReg_.rkey, slots_, slotBytes_};
}

void Peer::setRemote(const RingAddress& remote) {
  // The staging area mirrors the peer's ring: no larger than this host's memory (found by
  // tests/fuzz/rdma_slots_fuzz: a ring of 2^29 slots of 4 KiB aborted the process).
  const size_t bytes = size_t{remote.slots} * remote.slotBytes;
  RF_ENFORCE(remote.slots >= 2 && remote.slots <= wire::kImmValueMask && remote.slotBytes >= 2 * kHeader &&
                 bytes <= hostMemoryBytes(),
             "rank ", rank_, " published a ring of ", remote.slots, " slots of ", remote.slotBytes,
             " bytes (this host has ", hostMemoryBytes(), " bytes)");
  remote_ = remote;
  staging_ = allocatePages(bytes, false);  // every write copies its bytes in first
  stagingReg_ = device_.fabric().registerMemory(staging_, bytes, MemoryKind::kHost);
  stagingRegistered_ = true;
  credits_ = remote.slots;
  sendSlots_.assign(remote.slots, SendSlot{});
}

void Peer::start(const std::string& hello) {
  // One receive per slot each way: the most kSlot and kCredits immediates in flight (protocol.h).
  device_.fabric().postImmReceives(rank_, static_cast<int>(slots_ + remote_.slots));
  SlotHeader h;
  h.type = typeOf(SlotType::kHello);
  sendControl(h, hello, true);
}

void Peer::releaseMemory() noexcept {
  Fabric* f = device_.fabricIfOpen();
  if (f == nullptr) return;
  if (ringRegistered_) f->deregister(ringReg_);
  if (stagingRegistered_) f->deregister(stagingReg_);
  for (auto& [id, b] : bounces_) f->deregister(b.buffer.reg);
  for (Buffer& b : spare_) f->deregister(b.reg);
  ringRegistered_ = stagingRegistered_ = false;
}

// ---- sending --------------------------------------------------------------------------------

bool Peer::sendNeedsRegistration(size_t length) const {
  return length > sendEagerLimit() || (device_.writesOrdered() && length > kEagerCopyMaxBytes);
}

void Peer::postSend(RequestState& r) {
  if (gone_) return poisonGone();
  r.posted = true;
  SlotHeader h;
  h.message = nextMessage_++;
  h.tag = r.tag;
  h.check = r.check;
  h.length = r.length;
  OutSlot s;
  if (r.length <= sendEagerLimit()) {
    h.type = typeOf(SlotType::kData);
    h.payloadBytes = static_cast<uint32_t>(r.length);
    s.req = &r;
    s.payload = r.data;
    ++device_.counters().eagerMessages;
  } else {
    uint32_t id = nextRts_++;
    while (id == kNoId || rdvSend_.count(id) != 0) id = nextRts_++;
    h.type = typeOf(SlotType::kRts);
    h.rts = id;
    rdvSend_[id] = &r;
    ++device_.counters().rendezvousMessages;
  }
  s.header = h;
  outSlots_.push_back(std::move(s));
  flush();
}

void Peer::sendControl(SlotHeader h, std::string text, bool control) {
  h.payloadBytes = static_cast<uint32_t>(text.size());
  OutSlot s;
  s.header = h;
  s.text = std::move(text);
  s.control = control;
  outSlots_.push_back(std::move(s));
  flush();
}

// Gives the first queued slot the next ring position if a credit and its staging slot are free.
bool Peer::assignSlot(OutSlot& s) {
  if (credits_ == 0) return false;
  const uint32_t j = static_cast<uint32_t>(sendSeq_ % remote_.slots);
  SendSlot& ss = sendSlots_[j];
  if (ss.busy > 0) return false;  // its last write has not completed yet
  std::byte* st = staging_ + size_t{j} * remote_.slotBytes;
  const uint64_t at = remote_.address + uint64_t{j} * remote_.slotBytes;
  const size_t n = s.header.payloadBytes;
  ss = SendSlot{0, s.header.type, s.req};
  const uint32_t imm = wire::imm(wire::ImmType::kSlot, j);
  if (s.req != nullptr && s.req->reg != nullptr && n > kEagerCopyMaxBytes && device_.writesOrdered()) {
    // The header (stamped with its ring position), then the payload straight from the user's
    // memory with the immediate, on one lane: the immediate proves the payload landed, the stamp
    // that the header did (protocol.h).
    SlotHeader h = s.header;
    h.address = sendSeq_ + 1;
    std::memcpy(st, &h, kHeader);
    posts_.push_back(PostOp{0, st, kHeader, &stagingReg_, {at, remote_.rkey}, false, 0,
                            packContext(WriteKind::kSlotHeader, rank_, j)});
    posts_.push_back(PostOp{0, s.payload, n, s.req->reg, {at + kHeader, remote_.rkey}, true, imm,
                            packContext(WriteKind::kSlotPayload, rank_, j)});
    ss.busy = 2;
  } else {
    std::memcpy(st, &s.header, kHeader);
    if (n > 0) {
      std::memcpy(st + kHeader, s.payload != nullptr ? s.payload : reinterpret_cast<const std::byte*>(s.text.data()), n);
      if (s.req != nullptr) {
        device_.counters().stagingCopyBytes += n;
        device_.counters().bytesCopied += n;
      }
    }
    posts_.push_back(PostOp{0, st, kHeader + n, &stagingReg_, {at, remote_.rkey}, true, imm,
                            packContext(WriteKind::kSlotHeader, rank_, j)});
    ss.busy = 1;
  }
  if (s.req != nullptr) s.req->pending += ss.busy;
  --credits_;
  ++sendSeq_;
  return true;
}

unsigned Peer::flushPosts() {
  Fabric& f = device_.fabric();
  unsigned n = 0;
  while (!posts_.empty()) {
    const PostOp op = posts_.front();
    int rc = op.withImm ? f.postWriteImm(rank_, op.lane, op.local, op.length, *op.reg, op.remote, op.imm, op.context)
                        : f.postWrite(rank_, op.lane, op.local, op.length, *op.reg, op.remote, op.context);
    if (rc == -EAGAIN) break;
    posts_.pop_front();
    if (rc < 0) {
      const std::string error = detail::concat("posting the write failed: ", std::strerror(-rc));
      written(contextKind(op.context), contextIndex(op.context), &error);
      continue;
    }
    ++inflight_;
    if (fromUser(op.context)) ++userInflight_;
    ++n;
  }
  return n;
}

unsigned Peer::flush() {
  if (immRepost_ > 0 && !gone_) {
    device_.fabric().postImmReceives(rank_, static_cast<int>(immRepost_));
    immRepost_ = 0;
  }
  while (!outSlots_.empty() && assignSlot(outSlots_.front())) outSlots_.pop_front();
  if (unreturned_ >= std::max<uint32_t>(1, slots_ / 4)) returnCredits();
  return flushPosts();
}

void Peer::returnCredits() {
  if (unreturned_ == 0 || gone_) return;
  // A zero-length write needs a destination: the peer's ring base.
  posts_.push_back(PostOp{0, staging_, 0, &stagingReg_, {remote_.address, remote_.rkey}, true,
                          wire::imm(wire::ImmType::kCredits, unreturned_), packContext(WriteKind::kCredits, rank_, 0)});
  unreturned_ = 0;
  flushPosts();
}

bool Peer::busy() const {
  if (userInflight_ > 0) return true;
  return std::any_of(posts_.begin(), posts_.end(), [](const PostOp& op) { return fromUser(op.context); });
}

void Peer::onWriteDone(WriteKind kind, uint32_t index, const std::string* error) {
  if (inflight_ > 0) --inflight_;
  if ((kind == WriteKind::kSlotPayload || kind == WriteKind::kChunk) && userInflight_ > 0) --userInflight_;
  written(kind, index, error);
}

void Peer::written(WriteKind kind, uint32_t index, const std::string* error) {
  switch (kind) {
    case WriteKind::kSlotHeader:
    case WriteKind::kSlotPayload: {
      if (index >= sendSlots_.size()) return;
      SendSlot& ss = sendSlots_[index];
      RequestState* r = ss.req;
      const uint16_t type = ss.type;
      if (ss.busy > 0) --ss.busy;
      if (ss.busy == 0) ss.req = nullptr;
      if (kind == WriteKind::kSlotHeader && type == typeOf(SlotType::kAbort) && abortsPending_ > 0) --abortsPending_;
      if (error != nullptr) {
        const bool work = r != nullptr || (type != typeOf(SlotType::kNotice) && type != typeOf(SlotType::kAbort));
        return writeFailed(*error, work);
      }
      if (type == typeOf(SlotType::kHello)) helloLanded_ = true;
      if (r != nullptr && --r->pending == 0) finish(*r);
      return;
    }
    case WriteKind::kChunk: {
      auto it = rdvSend_.find(index);
      if (it == rdvSend_.end()) return;
      if (error != nullptr) return writeFailed(*error, true);
      RequestState& r = *it->second;
      if (--r.pending == 0) {
        rdvSend_.erase(it);
        finish(r);
      }
      return;
    }
    case WriteKind::kCredits:
      if (error != nullptr) writeFailed(*error, false);
      return;
  }
}

// The receiver's answer to a kRts (or its report of an eager message's mismatch).
void Peer::onCts(const SlotHeader& h) {
  if (h.status == static_cast<uint16_t>(wire::CtsStatus::kMismatch)) {
    device_.poison(std::make_exception_ptr(CheckMismatch(rank_, h.tag, h.length, h.address, h.check, h.rkey)));
    return;
  }
  auto it = rdvSend_.find(h.rts);
  if (it == rdvSend_.end()) return protocolError(detail::concat("clear to send for unknown request ", h.rts));
  RequestState& r = *it->second;
  const uint64_t chunk = wire::cutChunkBytes(h.check);
  const uint32_t lanes = wire::cutLanes(h.check);
  Fabric& f = device_.fabric();
  if (h.length != r.length || chunk == 0 || chunk > f.maxWriteBytes() || lanes == 0 ||
      lanes > static_cast<uint32_t>(f.lanes())) {
    return protocolError(detail::concat("clear to send for ", h.length, " bytes in chunks of ", chunk, " over ", lanes,
                                        " lanes, for a message of ", r.length));
  }
  const uint64_t chunks = (r.length + chunk - 1) / chunk;
  const uint32_t done = wire::imm(wire::ImmType::kDone, h.rendezvous);
  for (uint64_t i = 0; i < chunks; ++i) {
    const uint64_t offset = i * chunk;
    posts_.push_back(PostOp{static_cast<int>(i % lanes), r.data + offset, std::min<uint64_t>(chunk, r.length - offset),
                            r.reg, {h.address + offset, h.rkey}, true, done,
                            packContext(WriteKind::kChunk, rank_, h.rts)});
  }
  r.pending = static_cast<uint32_t>(chunks);
  flushPosts();
}

void Peer::finish(RequestState& r) { device_.finish(r); }

// ---- liveness -------------------------------------------------------------------------------

void Peer::queueNotice(const liveness::Notice& n) {
  if (gone_ || device_.poisoned() || credits_ == 0 || !outSlots_.empty()) return;  // best effort
  SlotHeader h;
  h.type = typeOf(SlotType::kNotice);
  h.message = n.seq;
  h.tag = n.waitedOn < 0 ? 0 : static_cast<uint64_t>(n.waitedOn) + 1;
  h.check = static_cast<uint64_t>(std::max<int64_t>(n.waited.count(), 0));
  h.length = static_cast<uint64_t>(std::max<int64_t>(n.silent.count(), 0));
  h.rkey = nextMessage_;  // a message numbered this or later was sent after the notice
  sendControl(h, {}, false);
}

void Peer::queueAbort(ErrorKind kind, const std::string& text) {
  // Even to a peer whose write failed: a fabric may have lost one write and still carry the next.
  SlotHeader h;
  h.type = typeOf(SlotType::kAbort);
  h.status = static_cast<uint16_t>(kind);
  ++abortsPending_;
  sendControl(h, text.substr(0, sendEagerLimit()), true);
}

// ---- failure --------------------------------------------------------------------------------

void Peer::protocolError(const std::string& what, bool lostWrite) {
  device_.poisonIo(rank_, lostWrite ? detail::concat("the rdma link from rank ", rank_, " lost a write: ", what)
                                    : detail::concat("protocol error on the rdma link to rank ", rank_, ": ", what,
                                                     "; is rank ", rank_, " running the same ringfold version?"));
}

// A write to the peer failed: the link is gone. That fails the device when anything depends on
// the link now (`pendingWork`, or pending requests), and later when something would.
void Peer::writeFailed(const std::string& error, bool pendingWork) {
  if (!gone_) {
    gone_ = true;
    goneText_ = error;
    abortsPending_ = 0;
  }
  if (pendingWork || hasPendingWork()) poisonGone();
}

void Peer::poisonGone() {
  if (device_.poisoned()) return;
  // What /proc says of the peer's process, where this rank can look (same host), as over TCP.
  std::string process;
  if (pid_ > 0) {
    const std::string who = detail::concat("the process of rank ", rank_, " (pid ", pid_, ")");
    switch (liveness::processState(pid_, std::chrono::milliseconds(500))) {
      case liveness::ProcessState::kExited: process = ": " + who + " exited"; break;
      case liveness::ProcessState::kStopped: process = ": " + who + " is stopped (SIGSTOP, or a debugger)"; break;
      case liveness::ProcessState::kRunning: process = ": " + who + " is still running, so the link to it failed"; break;
      case liveness::ProcessState::kUnknown: break;
    }
  }
  device_.poisonIo(rank_, detail::concat("RDMA write to rank ", rank_, " failed: ", goneText_, process));
}

bool Peer::hasPendingWork() const {
  if (!posted_.empty() || !rdvSend_.empty() || !rdvRecv_.empty()) return true;
  for (const OutSlot& s : outSlots_) {
    if (s.req != nullptr) return true;
  }
  for (const SendSlot& s : sendSlots_) {
    if (s.req != nullptr) return true;
  }
  return false;
}

void Peer::onPoison() {
  // Sends not yet given a ring position go nowhere (their requests fail); control slots still go.
  outSlots_.erase(std::remove_if(outSlots_.begin(), outSlots_.end(), [](const OutSlot& s) { return !s.control; }),
                  outSlots_.end());
  // Rendezvous chunks not posted yet are dropped; writes tied to a ring position are kept (the
  // peer's credits depend on every position being written).
  posts_.erase(std::remove_if(posts_.begin(), posts_.end(),
                              [](const PostOp& op) { return contextKind(op.context) == WriteKind::kChunk; }),
               posts_.end());
}

void Peer::forgetRequests() {
  posted_.clear();
  rdvSend_.clear();
  // A sender may still be writing into an accepted receive's memory: end its registration, so
  // that such writes fail at the sender instead of landing in memory the caller may reuse.
  for (auto& [id, rv] : rdvRecv_) {
    if (device_.cache() != nullptr && rv.fence != nullptr) device_.cache()->invalidate(rv.fence);
  }
  rdvRecv_.clear();
  for (auto& [id, b] : bounces_) b.req = nullptr;  // the buffers stay this rank's until release
  for (OutSlot& s : outSlots_) s.req = nullptr;
  for (SendSlot& s : sendSlots_) s.req = nullptr;
}

}  // namespace ringfold::transport::rdma
