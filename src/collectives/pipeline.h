// Pipeline helpers shared by the collectives: the wrapper that runs a collective guarded, the
// request windows kept in the communicator's in-flight storage, and argument checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/check.h"
#include "collectives/communicator.h"
#include "common/error.h"

namespace ringfold::coll {

// Runs `body` as collective `name`: inside comm.guarded(), with a transport check mismatch
// turned into a readable MismatchError (see check.h).
template <typename Body>
void run(Communicator& comm, const char* name, Body&& body) {
  comm.guarded(name, [&] {
    try {
      body();
    } catch (const transport::CheckMismatch& m) {
      throw MismatchError(describeMismatch(m, comm.rank()));
    }
  });
}

// What every collective starts with: its sequence number (the high bits of its tags) and the
// check word of its arguments (check.h), which every message it sends carries.
struct Call {
  uint64_t sequence = 0;
  uint64_t check = 0;
  uint64_t tag(uint32_t sub) const { return collectiveTag(sequence, sub); }
};
inline Call begin(Communicator& comm, const CheckFields& fields) {
  return Call{comm.nextSequence(), packCheck(fields)};
}

// The requests of one collective: `recvSlots` receive slots addressed by index, then a FIFO
// window of at most `sendWindow` sends (posting into a full window first waits for the oldest).
// Requests and regions live in comm.inflight(), so a failure aborts the device before they go.
class Flight {
 public:
  Flight(Communicator& comm, size_t recvSlots, size_t sendWindow);

  // Registers [data, data+bytes) for this collective (null with 0 bytes is allowed).
  transport::MemoryRegion& region(const void* data, size_t bytes);

  // lazy: Connection::irecvLazy (finish it with deliverRecv).
  void postRecv(size_t slot, int peer, transport::MemoryRegion& region, size_t offset, size_t length,
                uint64_t tag, uint64_t check, bool lazy = false);
  void waitRecv(size_t slot);
  // Waits for the receive in `slot` while handing its bytes to `sink` (Request::deliver); false
  // where the backend cannot, after waiting for the bytes to be in the receive's region.
  bool deliverRecv(size_t slot, transport::Sink& sink);
  // True once the receive in `slot` has completed (drives progress without blocking; throws its
  // error); the slot stays posted until waitRecv.
  bool recvDone(size_t slot);

  // `key` (nonzero) names the send for waitSend().
  void postSend(int peer, const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                uint64_t check, uint64_t key = 0);
  // Retires the send posted with `key` and every older one, in order, and returns true once
  // they are all complete (at once if it already is or was never posted). With block=false it
  // never waits: it stops at the first send still in flight and returns false.
  bool retireSend(uint64_t key, bool block);
  void waitSend(uint64_t key) { retireSend(key, true); }
  void waitAllSends();

 private:
  bool popOldestSend(bool block);

  Communicator& comm_;
  std::vector<std::unique_ptr<transport::Request>>& requests_;
  size_t recvSlots_;
  size_t sendWindow_;
  std::vector<uint64_t> keys_;  // key of each send slot
  size_t head_ = 0;             // oldest send still in the window
  size_t tail_ = 0;             // next send number
};

// Argument checks; each throws InvalidArgument naming the collective and the rank.
size_t byteSize(const char* coll, int rank, size_t count, DataType dtype);
void requireBuffer(const char* coll, int rank, const void* p, size_t bytes, const char* what);
void requireReducible(const char* coll, int rank, DataType dtype);
bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes);

}  // namespace ringfold::coll
