// Peer: the RDMA protocol (protocol.h) between this rank and one peer: the ring the peer writes
// into, the staging area and credits for writing into the peer's ring, message numbering and
// matching, rendezvous in both directions, and the failure of this one link.
//
// Contract: the thread driving the device calls everything. postSend/postRecv take a request
// that stays valid until it is done or forgetRequests() ran. onImmediate/onWriteDone handle the
// fabric's completions for this peer; flush() hands queued work to the fabric (slots as credits
// allow, posts the fabric refused with -EAGAIN, batched credit returns and immediate receives)
// and never blocks. After the device is poisoned only control slots (aborts, a mismatch's kCts)
// and writes already tied to a ring position still go out.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/rdma/connection.h"
#include "transport/rdma/fabric.h"
#include "transport/rdma/wire.h"

namespace ringfold::transport::rdma {

class DeviceState;

// What a write's completion context says (kind << 56 | peer << 32 | index).
enum class WriteKind : uint8_t { kSlotHeader = 1, kSlotPayload = 2, kChunk = 3, kCredits = 4 };
inline uint64_t packContext(WriteKind kind, int peer, uint32_t index) {
  return uint64_t{static_cast<uint8_t>(kind)} << 56 | uint64_t(static_cast<uint32_t>(peer) & 0xFFFFFF) << 32 | index;
}
inline WriteKind contextKind(uint64_t c) { return static_cast<WriteKind>(c >> 56); }
inline int contextPeer(uint64_t c) { return static_cast<int>((c >> 32) & 0xFFFFFF); }
inline uint32_t contextIndex(uint64_t c) { return static_cast<uint32_t>(c); }

// A ring as its owner publishes it for one writer.
struct RingAddress {
  uint64_t address = 0;  // of slot 0, as the writer names it
  uint64_t rkey = 0;
  uint32_t slots = 0;
  uint32_t slotBytes = 0;
};

// Page-aligned memory for rings, staging areas and bounce buffers (std::free it): zeroed, unless
// `zeroed` is false (memory that is always written before it is read).
std::byte* allocatePages(size_t bytes, bool zeroed = true);
// This host's physical memory in bytes: no ring or buffer a peer asks for may be larger.
size_t hostMemoryBytes();

class Peer {
 public:
  Peer(DeviceState& device, int rank);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  int rank() const { return rank_; }

  // ---- start-up ----
  void createRing(uint32_t slots, uint32_t slotBytes);  // allocates and registers (throws)
  RingAddress ring() const;
  void setRemote(const RingAddress& remote);  // the peer's ring for this rank; makes the staging area
  void start(const std::string& hello);       // immediate receives, then the hello slot
  // The peer's hello arrived, and this rank's landed (a rank may close right after connectAll).
  bool helloDone() const { return helloSeen_ && helloLanded_; }
  int pid() const { return pid_; }

  // ---- requests ----
  // The largest eager message each way (slot payload of the ring written into).
  size_t sendEagerLimit() const { return remote_.slotBytes - sizeof(wire::SlotHeader); }
  size_t recvEagerLimit() const { return slotBytes_ - sizeof(wire::SlotHeader); }
  bool sendNeedsRegistration(size_t length) const;
  bool recvNeedsRegistration(size_t length) const { return length > recvEagerLimit(); }
  void postSend(RequestState& r);
  void postRecv(RequestState& r);

  // ---- completions and driving ----
  void onImmediate(uint32_t imm);
  void onWriteDone(WriteKind kind, uint32_t index, const std::string* error);
  unsigned flush();
  void returnCredits();  // every unreturned credit now (before this rank blocks)
  // Takes every request to send that has waited unmatched for longer than `minAge` into a
  // buffer of this rank's (protocol.h, "bounce"), so that its sender can complete; the device
  // calls it with 0 before it blocks, and with kBounceAfter from progress(). Reads the clock only
  // when such a request waits.
  void bounceUnexpected(std::chrono::steady_clock::duration minAge);

  // ---- liveness (liveness::Links, through DeviceState) ----
  void queueNotice(const liveness::Notice& notice);
  void queueAbort(ErrorKind kind, const std::string& text);
  bool abortsPending() const { return abortsPending_ > 0; }

  // ---- failure ----
  // The fabric reported the link to this peer failed (no write of ours named): as a failed write.
  void linkFailed(const std::string& error) { writeFailed(error, false); }
  // Writes from the caller's memory not completed (posted or queued): settling waits for them.
  bool busy() const;
  void onPoison();        // drops queued sends that have no ring position yet, and chunks not posted
  void forgetRequests();  // after settling: drops every pointer to a RequestState
  void releaseMemory() noexcept;  // deregisters the ring and staging area (before the fabric closes)

 private:
  struct OutSlot {
    wire::SlotHeader header;
    RequestState* req = nullptr;  // kData: the send it carries
    const std::byte* payload = nullptr;
    std::string text;             // kHello, kAbort payload
    bool control = false;         // goes out after poisoning too
  };
  struct SendSlot {
    uint8_t busy = 0;  // its writes not completed
    uint16_t type = 0;
    RequestState* req = nullptr;
  };
  struct PostOp {
    int lane = 0;
    const void* local = nullptr;
    size_t length = 0;
    const Registration* reg = nullptr;
    RemoteAddress remote;
    bool withImm = false;
    uint32_t imm = 0;
    uint64_t context = 0;
  };
  struct Inbound {
    wire::SlotHeader header;
    std::unique_ptr<std::byte[]> payload;  // kData
    std::chrono::steady_clock::time_point arrived{};
    uint32_t bounce = 0xFFFFFFFFu;  // kRts taken into a bounce buffer: its rendezvous id
  };
  // A bounce buffer: registered memory of this rank's that an unmatched message is written into.
  struct Buffer {
    std::byte* data = nullptr;
    size_t size = 0;
    Registration reg{};
  };
  struct Bounce {
    Buffer buffer;
    uint64_t length = 0;
    bool landed = false;
    RequestState* req = nullptr;  // the receive that took it before it landed
  };
  struct RdvRecv {
    RequestState* req = nullptr;  // null: a bounce (bounces_ has it)
    RegistrationCache::Entry* fence = nullptr;  // its registration, invalidated if abandoned
    uint32_t expected = 0, seen = 0;
  };

  void sendControl(wire::SlotHeader header, std::string text, bool control);
  bool assignSlot(OutSlot& s);
  unsigned flushPosts();
  void written(WriteKind kind, uint32_t index, const std::string* error);  // a write's outcome
  void onSlot(uint32_t index);
  void consumed(uint32_t index);
  void resolve(Inbound m, const std::byte* slotPayload);
  void deliverEager(RequestState& r, const wire::SlotHeader& h, const std::byte* payload, bool fromBuffer);
  void accept(RequestState& r, const wire::SlotHeader& h);
  // Answers kCts for a rendezvous into [address, +length) of `reg`; returns its rendezvous id.
  uint32_t clearToSend(const wire::SlotHeader& h, const Registration& reg, uint64_t address, uint64_t length,
                       RequestState* r, RegistrationCache::Entry* fence);
  void deliverBounce(RequestState& r, uint32_t id);
  Buffer takeBuffer(size_t bytes);
  void giveBuffer(Buffer b) noexcept;
  bool mismatch(RequestState& r, const wire::SlotHeader& h);
  void onCts(const wire::SlotHeader& h);
  void onDone(uint32_t id);
  void finish(RequestState& r);
  // `lostWrite`: what arrived shows that a write of the peer's failed on its way here.
  void protocolError(const std::string& what, bool lostWrite = false);
  void writeFailed(const std::string& error, bool pendingWork);
  void poisonGone();
  bool hasPendingWork() const;

  DeviceState& device_;
  int rank_;
  // This rank's ring (the peer writes it) and the credits owed for it.
  std::byte* ring_ = nullptr;
  Registration ringReg_{};
  bool ringRegistered_ = false;
  uint32_t slots_ = 0, slotBytes_ = 0;
  std::vector<bool> consumed_;
  uint64_t freeHead_ = 0;  // oldest ring position not consumed yet
  uint32_t unreturned_ = 0;
  uint32_t immRepost_ = 0;
  // The peer's ring (this rank writes it), from a staging area of the same layout.
  RingAddress remote_;
  std::byte* staging_ = nullptr;
  Registration stagingReg_{};
  bool stagingRegistered_ = false;
  uint32_t credits_ = 0;
  uint64_t sendSeq_ = 0;
  std::vector<SendSlot> sendSlots_;
  std::deque<OutSlot> outSlots_;
  std::deque<PostOp> posts_;  // refused with -EAGAIN (or behind one that was), in order
  uint64_t inflight_ = 0;
  uint64_t userInflight_ = 0;  // of those, writes from the caller's memory (payloads, chunks)
  // Messages.
  uint64_t nextMessage_ = 0;  // sent
  uint32_t nextRts_ = 0;
  std::unordered_map<uint32_t, RequestState*> rdvSend_;  // by rts id: waiting for kCts or writes
  uint64_t nextResolve_ = 0;  // received
  std::map<uint64_t, Inbound> held_;  // arrived before an earlier message
  std::deque<RequestState*> posted_;
  std::deque<Inbound> unexpected_;
  uint32_t nextRdv_ = 0;
  std::unordered_map<uint32_t, RdvRecv> rdvRecv_;
  size_t unexpectedRts_ = 0;  // kRts in unexpected_ not bounced yet
  std::unordered_map<uint32_t, Bounce> bounces_;
  std::vector<Buffer> spare_;  // bounce buffers kept for reuse (at most kSpareBytes)
  size_t spareBytes_ = 0;
  // Control and failure.
  int abortsPending_ = 0;
  bool helloSeen_ = false;
  bool helloLanded_ = false;
  int pid_ = 0;
  bool gone_ = false;
  std::string goneText_;
};

}  // namespace ringfold::transport::rdma
