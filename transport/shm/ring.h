// Ring: one direction of a shared-memory pair, a single-producer/single-consumer ring of
// fixed-size slots in a memfd segment that the consumer created and the producer maps.
//
// Layout (every field its own cache line where two processes write):
//   RingHeader  geometry (written once by the consumer before the segment is shared), then
//               tail (producer), head (consumer), and the two sleeping flags
//   slots       `slots` x `slotBytes`: a 64-byte SlotHeader, then payload
//   ack words   kAckWords 64-bit words: the consumer stores a request to send's id in word
//               (id % kAckWords) once it has read that message out of the producer's memory, so
//               the producer's send completes without the consumer needing ring space (or ever
//               driving its device again). The producer keeps at most kAckWords such sends
//               outstanding, so a word is never reused while its send waits.
//
// Protocol: the producer fills slot (tail % slots) and then publishes it with tail.store(+1,
// release); the consumer reads slots while head < tail.load(acquire) and frees them with
// head.store(+1, release). A slot is never read before it is published, so a producer killed
// half-way through writing one leaves nothing the consumer can see.
//
// Sleeping (spin briefly, then sleep without missing a wake-up): a side about to sleep sets its
// flag (seq_cst), checks the ring once more, and sleeps on its doorbell (an eventfd) only if
// nothing changed; the other side, after publishing (tail, or head that frees space), issues a
// seq_cst fence and, if the flag is set, clears it and rings that side's doorbell. Either the
// sleeper sees the new tail/head, or the waker sees the flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ringfold::transport::shm {

constexpr size_t kCacheLine = 64;
constexpr uint32_t kRingMagic = 0x52465349;  // "RFSI"
constexpr uint32_t kAckWords = 256;

struct SlotHeader {
  uint8_t type = 0;      // SlotType
  uint8_t status = 0;    // kAbort: ErrorKind
  uint16_t reserved = 0;
  uint32_t bytes = 0;    // payload bytes in this slot
  uint64_t tag = 0;
  uint64_t check = 0;
  uint64_t length = 0;   // the whole message's length
  uint64_t number = 0;   // message number (kEager, kRts), or a notice's next message number
  uint64_t address = 0;  // kRts: the sender's address of the data
  uint64_t id = 0;       // kRts: the send's id (its ack word); kNotice: seq
  uint64_t extra = 0;    // kMismatch: the receive's length; kNotice: waitedOn + 1 | waited << 32
};
static_assert(sizeof(SlotHeader) == kCacheLine, "a slot header is one cache line");

// Fields written by different sides are kPadding apart: two cache lines, since the adjacent-line
// prefetchers of current x86 cores fetch lines in pairs.
constexpr size_t kPadding = 2 * kCacheLine;
struct alignas(kPadding) RingHeader {
  uint32_t magic;
  uint32_t slots;
  uint32_t slotBytes;
  uint32_t reserved;
  alignas(kPadding) std::atomic<uint64_t> tail;  // slots published (producer)
  alignas(kPadding) std::atomic<uint64_t> head;  // slots consumed (consumer)
  alignas(kPadding) std::atomic<uint32_t> consumerSleeping;
  alignas(kPadding) std::atomic<uint32_t> producerSleeping;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "rings need lock-free 64-bit atomics");

// A spin-wait hint to the CPU (x86 PAUSE, Arm YIELD).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline size_t ringBytes(uint32_t slots, uint32_t slotBytes) {
  return sizeof(RingHeader) + static_cast<size_t>(slots) * slotBytes + kAckWords * sizeof(uint64_t);
}

// A view of a ring mapped at `base` (either side). The geometry is read once, when the view is
// made (or given): the other process can rewrite the header at any time, and every slot and ack
// word this process touches must stay inside the mapping whatever it writes there (found by
// tests/fuzz/shm_slots_fuzz: a peer that set `slots` to 0 made this rank divide by zero).
class Ring {
 public:
  Ring() = default;
  explicit Ring(void* base)
      : h_(static_cast<RingHeader*>(base)), slots_(h_->slots), slotBytes_(h_->slotBytes) {}
  Ring(void* base, uint32_t slots, uint32_t slotBytes)
      : h_(static_cast<RingHeader*>(base)), slots_(slots), slotBytes_(slotBytes) {}
  // The consumer formats a fresh segment.
  static Ring format(void* base, uint32_t slots, uint32_t slotBytes) {
    auto* h = new (base) RingHeader;
    h->magic = kRingMagic;
    h->slots = slots;
    h->slotBytes = slotBytes;
    h->reserved = 0;
    h->tail.store(0, std::memory_order_relaxed);
    h->head.store(0, std::memory_order_relaxed);
    h->consumerSleeping.store(0, std::memory_order_relaxed);
    h->producerSleeping.store(0, std::memory_order_relaxed);
    Ring r(base, slots, slotBytes);
    for (uint64_t i = 0; i < kAckWords; ++i) new (&r.ack(i)) std::atomic<uint64_t>(0);
    return r;
  }
  bool valid(size_t mappedBytes) const {
    return h_ != nullptr && mappedBytes >= sizeof(RingHeader) && h_->magic == kRingMagic && slots_ >= 2 &&
           slotBytes_ >= 2 * kCacheLine && slotBytes_ % kCacheLine == 0 && ringBytes(slots_, slotBytes_) <= mappedBytes;
  }
  RingHeader* header() const { return h_; }
  uint32_t slots() const { return slots_; }
  size_t payloadBytes() const { return slotBytes_ - sizeof(SlotHeader); }
  SlotHeader* slot(uint64_t position) const {
    auto* first = reinterpret_cast<std::byte*>(h_) + sizeof(RingHeader);
    return reinterpret_cast<SlotHeader*>(first + (position % slots_) * slotBytes_);
  }
  static std::byte* payload(SlotHeader* s) { return reinterpret_cast<std::byte*>(s) + sizeof(SlotHeader); }
  std::atomic<uint64_t>& ack(uint64_t id) const {
    auto* words = reinterpret_cast<std::byte*>(h_) + sizeof(RingHeader) + static_cast<size_t>(slots_) * slotBytes_;
    return reinterpret_cast<std::atomic<uint64_t>*>(words)[id % kAckWords];
  }

 private:
  RingHeader* h_ = nullptr;
  uint32_t slots_ = 0, slotBytes_ = 0;
};

}  // namespace ringfold::transport::shm
