// The shm protocol: how the shm backend carries tagged messages between two processes of one
// host through shared memory. Prose only; the code is peer.{h,cc} (one peer), device_state.{h,cc}
// (start-up, progress, waiting, failure), ring.h (the rings), segment.{h,cc} (memfd segments,
// descriptor passing, cross-memory attach).
//
// Start-up
//   The pairs are joined by the tcp_uring backend's Unix mesh (tcp_uring/mesh.h): one
//   abstract-namespace Unix socket per pair, proven by both ranks' tokens from the store, so
//   only a rank of this job (a holder of the job secret) gets this far. Over it each rank sends
//   its peer a Hello {magic, rank, slots, slot bytes, probe address, probe word} with two
//   descriptors attached: the memfd of the ring the peer will write to this rank (created and
//   formatted here), and this rank's doorbell (an eventfd). Each maps the peer's ring, checks its
//   geometry, and tries a cross-memory read of the peer's probe word; it answers with one byte:
//   whether that read worked (and logs why not). The socket stays open, and carries nothing
//   more: its hang-up is how a rank learns at once that a peer process has ended.
//   A pair the mesh cannot join (a security module refuses the Unix connect) is left out at both
//   ends, and the caller joins it another way (per_peer: Unix sockets, or the remote backend).
//
// Messages (per direction, in ring order; FIFO per tag, as over TCP)
//   eager     : a message of at most RINGFOLD_SHM_CMA_MIN_BYTES (or any message, where the
//               receiver cannot read the sender's memory) is copied into consecutive slots: kEager
//               {tag, check, length, number} with the first payload bytes, then kMore slots with
//               the rest, as fast as slots free up. The receiver copies each slot out into the
//               matching posted receive, or into a buffer kept with the unexpected message (and
//               from there into the receive posted later). A send completes when its last byte is
//               in the ring: copy-in/copy-out, two copies, pipelined through the ring.
//   lazy      : a receive posted with irecvLazy (the collectives' folds of one received message
//               into this rank's own data) leaves its eager message in the ring: the inbox is
//               read up to the message's first slot and stops there (parked) until the
//               request's deliver() gives it a sink; the receiver then folds each slot's payload
//               straight from the ring as it arrives, and frees it: one copy, where copy-out
//               then fold would read and write the bytes twice. A wait that polls without
//               progress, a sleep, or a composite's progress call unparks instead: the message
//               is copied into the receive's memory as an eager one is, so a parked message never
//               holds a peer up for longer than a spin (its sends behind a full ring, or a message
//               behind it that this rank waits for).
//   cma       : a larger message, when the receiver can read the sender's memory, goes as kRts
//               {tag, check, length, number, address, id}. The receiver, once a receive matches,
//               reads the bytes straight from the sender's buffer into the receive's with
//               process_vm_readv (one copy) and stores the id in the ring's ack word for it
//               (ring.h), waking the sender if it sleeps; the send completes when the sender sees
//               it. (An answer through the other ring would need space there at a moment the
//               receiver may be leaving the transport for good: its receive is complete.)
//   bounce    : a send may complete before its receive is posted (the collectives rely on it),
//               so a kRts left unmatched is read into a buffer of the receiver's and acknowledged
//               once it has waited kBounceAfter, or when the receiver is about to sleep; the
//               receive posted later copies it out.
//   mismatch  : a receive whose length or check differs from the message's fails with
//               CheckMismatch and poisons the device; the receiver also sends kMismatch, and the
//               sender poisons its own device with the same CheckMismatch.
//   control   : kNotice (liveness::Notice: id = seq, extra = waitedOn + 1 | waited ms << 32,
//               length = silent ms, number = the sender's next message number), kAbort (status =
//               ErrorKind, payload = text). Control slots may come between the slots of an eager
//               message; data messages never interleave.
//
// Failure
//   A peer process that ends closes its socket: pending and later requests on that peer fail
//   with IoError naming it and its pid, after whatever it had already published in the ring was
//   delivered. A half-written slot is never published (ring.h), and an eager message whose last
//   slot never came never completes its receive, so a dead peer's partial message never reaches
//   a reduction. A frozen peer is found by the wait's timeout and the liveness layer's notices
//   and blame (transport/liveness/), with "is stopped" from its pid.
#pragma once

#include <chrono>
#include <cstdint>

namespace ringfold::transport::shm {

enum SlotType : uint8_t { kEager = 1, kMore = 2, kRts = 3, kMismatch = 5, kNotice = 6, kAbort = 7 };

constexpr uint32_t kHelloMagic = 0x52465332;  // "RFS2"

struct Hello {
  uint32_t magic = kHelloMagic;
  int32_t rank = -1;
  uint32_t slots = 0;
  uint32_t slotBytes = 0;
  uint64_t probeAddress = 0;
  uint64_t probeWord = 0;
};

// An unmatched kRts is read into a bounce buffer once it has waited this long.
constexpr auto kBounceAfter = std::chrono::microseconds(200);

}  // namespace ringfold::transport::shm
