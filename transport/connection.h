// Connection: the link from this rank to one peer, carrying tagged messages both ways at once.
//
// Vocabulary
//   message : `length` bytes from a MemoryRegion, sent with a 64-bit `tag` and a 64-bit `check`.
//   matching: a message is delivered to the receive posted with the same tag on the peer's
//             connection back to us. Messages and receives with equal tags pair up in the order
//             they were sent and posted (FIFO per tag); different tags are independent.
//   check   : an opaque word the layer above uses to detect disagreement (collectives pack their
//             arguments into it). The receive's length and check must equal the sender's;
//             otherwise the receive fails with CheckMismatch, carrying both sides' values.
//
// Contract
//   * isend/irecv never block; they return a Request. Progress happens in Request::test/wait
//     (and, for kernel-driven backends, in the kernel). The region must stay valid until the
//     request completes; a message may arrive before its receive is posted, in which case the
//     backend buffers it.
//   * A reset, closed or silent peer fails the request with IoError naming the peer's rank. A
//     wait that passes its timeout throws IoError("... timed out ...") naming the peer.
//   * After any failure the Device is poisoned (see device.h): later requests fail at once.
//   * One thread drives a Device and its Connections at a time; they are not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/error.h"
#include "transport/memory_region.h"

namespace ringfold::transport {

// Where a lazy receive's bytes go when the caller takes them where they lie (Request::deliver):
// take() gets [offset, offset + length) of the message, in order, each byte once. Every piece
// but the last is a multiple of 64 bytes long, so pieces split no element of any dtype. take()
// runs inside the transport's progress and must not call back into the device.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void take(size_t offset, const std::byte* data, size_t length) = 0;
};

// Completion of one isend or irecv (the shape of c10d's Work: test / wait / exception).
class Request {
 public:
  virtual ~Request() = default;
  // Drives progress without blocking. Returns true once the request has completed; throws the
  // request's error (IoError, CheckMismatch, ...) if it failed.
  virtual bool test() = 0;
  // Blocks until complete. Throws IoError naming the peer if `timeout` passes first.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // For a receive from Connection::irecvLazy: waits as wait() does while handing the message's
  // bytes to `sink`, first those already stored in the region, then the rest straight from the
  // backend's own memory as they arrive (one copy saved: the caller folds from there). Returns
  // false, having done nothing, where the backend keeps no message of its own (then wait, and
  // read the region).
  virtual bool deliver(Sink& sink, std::chrono::milliseconds timeout) {
    (void)sink;
    (void)timeout;
    return false;
  }
};

// A receive met a message whose length or check differs from the receive's.
class CheckMismatch : public MismatchError {
 public:
  CheckMismatch(int peerRank, uint64_t tag, size_t expectedLength, size_t actualLength,
                uint64_t expectedCheck, uint64_t actualCheck);
  int peerRank;
  uint64_t tag;
  size_t expectedLength, actualLength;
  uint64_t expectedCheck, actualCheck;
};

// Throws InvalidArgument naming `what` ("isend", "irecv") unless [offset, offset + length) lies
// inside `region` and, when length > 0, the region has memory. Every backend checks its requests
// with it.
void checkRange(const MemoryRegion& region, size_t offset, size_t length, const char* what);

class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peerRank() const = 0;
  virtual std::unique_ptr<Request> isend(const MemoryRegion& region, size_t offset, size_t length,
                                         uint64_t tag, uint64_t check = 0) = 0;
  virtual std::unique_ptr<Request> irecv(MemoryRegion& region, size_t offset, size_t length,
                                         uint64_t tag, uint64_t check = 0) = 0;
  // irecv whose message the backend may leave where it arrived (shm: in the ring) until the
  // request's deliver(), so that the caller reads it once instead of having it copied first.
  // The region is still the receive's: a wait without deliver, or a backend that must free the
  // space meanwhile (another wait makes no progress), stores the message there as irecv would.
  // Default: irecv.
  virtual std::unique_ptr<Request> irecvLazy(MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                             uint64_t check = 0) {
    return irecv(region, offset, length, tag, check);
  }
};

}  // namespace ringfold::transport
