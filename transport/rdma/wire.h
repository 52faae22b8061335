// Wire format of the RDMA protocol (see protocol.h for how it is used): what an immediate means,
// and the header at the start of every eager slot.
//
//   immediate (32 bits) = type (3 bits) << 29 | value (29 bits)
//     kSlot     value = index of the slot of this rank's eager ring that the write filled
//     kCredits  value = how many slots of the sender's ring (this write's target's ring at the
//                       peer) were consumed since the last kCredits: a zero-length write
//     kDone     value = the receiver's rendezvous id (from its CTS) that this write completes
//
//   eager slot = SlotHeader + payload (at most slotBytes - sizeof(SlotHeader) bytes)
//     kData    a whole message (message number, tag, check, length, payload)
//     kRts     request to send: a message too large for a slot (number, tag, check, length, rts)
//     kCts     clear to send, receiver to sender: rts, status, destination, rendezvous id, chunk
//              bytes, lanes (the receiver decides how the data is cut and how many immediates it
//              waits for)
//     kHello   first slot each way, once the pair is connected
//     kNotice  liveness::Notice (WAITING) fields
//     kAbort   ErrorKind + text (payload)
//
// Message numbers count kData and kRts per direction from 0; the receiver resolves them in that
// order whatever order slots arrive in, so FIFO-per-tag matching is the same as over TCP.
#pragma once

#include <cstdint>

namespace ringfold::transport::rdma::wire {

enum class ImmType : uint32_t { kSlot = 1, kCredits = 2, kDone = 3 };

constexpr uint32_t kImmValueBits = 29;
constexpr uint32_t kImmValueMask = (1u << kImmValueBits) - 1;

constexpr uint32_t imm(ImmType type, uint32_t value) {
  return static_cast<uint32_t>(type) << kImmValueBits | (value & kImmValueMask);
}
constexpr ImmType immType(uint32_t imm) { return static_cast<ImmType>(imm >> kImmValueBits); }
constexpr uint32_t immValue(uint32_t imm) { return imm & kImmValueMask; }

enum class SlotType : uint16_t { kNone = 0, kData = 1, kRts = 2, kCts = 3, kHello = 4, kNotice = 5, kAbort = 6 };

enum class CtsStatus : uint16_t { kAccept = 0, kMismatch = 1 };

// 64 bytes at the start of every slot; little-endian as the hosts are (both ends are x86-64 or
// both aarch64: the fabrics used here do not cross byte orders).
struct SlotHeader {
  uint16_t type = 0;         // SlotType
  uint16_t status = 0;       // kCts: CtsStatus; kAbort: ErrorKind
  uint32_t payloadBytes = 0; // bytes after the header in this slot
  uint64_t message = 0;      // kData, kRts: message number; kNotice: seq
  uint64_t tag = 0;          // kData, kRts; kNotice: waitedOn (+1, 0 = withdrawn)
  uint64_t check = 0;        // kData, kRts; kNotice: waited ms
  uint64_t length = 0;       // kData, kRts: message length; kCts: accepted length; kNotice: silent ms
  uint64_t address = 0;      // kCts: destination address (as the sender must name it); kData
                             // whose payload came in its own write: ring position + 1 (else 0)
  uint64_t rkey = 0;         // kCts: destination key; kNotice: firstLaterMessage
  uint32_t rts = 0;          // kRts, kCts: the sender's rendezvous id
  uint32_t rendezvous = 0;   // kCts: the receiver's rendezvous id (kDone's value)
};
static_assert(sizeof(SlotHeader) == 64, "one cache line");

// kCts: how the sender cuts the data (in the CTS's `check` field: chunkBytes in the low 48 bits,
// lanes in the top 16).
constexpr uint64_t packCut(uint64_t chunkBytes, uint32_t lanes) { return uint64_t{lanes} << 48 | chunkBytes; }
constexpr uint64_t cutChunkBytes(uint64_t cut) { return cut & ((uint64_t{1} << 48) - 1); }
constexpr uint32_t cutLanes(uint64_t cut) { return static_cast<uint32_t>(cut >> 48); }

}  // namespace ringfold::transport::rdma::wire
