// The RDMA protocol: how the rdma backend carries tagged messages over a Fabric (fabric.h), in
// the wire format of wire.h. Prose only; the code is peer.{h,cc} (one peer), device_state.{h,cc}
// (progress, wait, failure, start-up), registration_cache.{h,cc}, connection/device/memory_region.
//
// Vocabulary
//   ring      : per peer, RINGFOLD_RDMA_SLOTS slots of RINGFOLD_RDMA_SLOT_BYTES in this rank's
//               registered memory that THAT peer writes into; slot = SlotHeader (64 B) + payload.
//               A sender fills the peer's ring in order (ring position n -> slot n % slots) from
//               a staging area laid out like that ring, and announces each slot with
//               write-with-imm imm(kSlot, index), always on lane 0.
//   credit    : a free slot of the peer's ring. A sender starts with `slots` credits and spends
//               one per slot. The receiver handles every slot as it arrives, whatever its type
//               (so slots always free up: nothing waits in a slot), and gives back the oldest
//               ring positions that are free, in order, as a zero-length write-with-imm
//               imm(kCredits, n) to the peer's ring base: in batches of slots/4, and whenever it
//               is about to block in a wait with any unreturned. (Slots may be consumed out of
//               order on an unordered fabric: a credit is only returned once every earlier ring
//               position is free too, so a sender never overwrites a slot not yet read.)
//   message   : per direction, kData and kRts slots are numbered 0, 1, 2, ... (control slots,
//               kHello/kCts/kNotice/kAbort, are not). The receiver resolves messages in number
//               order: one that arrives early is held (an eager payload is copied out so its
//               slot frees at once) until the ones before it are resolved. Resolving matches
//               a message to the first posted receive with its tag, else queues it unexpected;
//               a receive posted later takes the first unexpected message of its tag. So
//               matching is FIFO per tag exactly as over TCP.
//   eager     : a message whose length fits the peer's slot payload (slot bytes - 64) goes in one
//               slot (kData). Sender: up to 256 bytes are copied into the staging slot and go as
//               one write-with-imm; larger ones, when the fabric orders writes on a lane, go with
//               no sender copy: the 64-byte header (stamped: `address` = ring position + 1) as a
//               plain write, then the payload straight from the user's registered memory into the
//               slot's payload area with the immediate, on the same lane. The immediate proves
//               the payload landed and, the lane being ordered, that the header did unless its
//               write failed; the receiver checks the stamp against the position it expects
//               for that slot, so a header that never landed is an error, not a stale message
//               delivered. (On an unordered fabric the payload is copied into staging.) Receiver: the
//               payload is copied into the posted receive (1 copy), or into a buffer kept with
//               the unexpected message and from there into the receive posted later (2 copies).
//               The send completes when its write(s) completed.
//   rendezvous: a larger message goes as kRts {number, tag, check, length, rts id}. When the
//               receiver matches it, it compares length and check; if equal it answers kCts
//               {rts, kAccept, destination address + key (remoteBase + offset of the receive's
//               registration), its rendezvous id, packCut(chunk bytes, lanes)} and waits for
//               kDone immediates. The sender cuts the data into chunks of `chunk bytes` dealt
//               round-robin over `lanes` lanes and writes them from its registered memory
//               straight into the destination (zero copies); every chunk carries
//               imm(kDone, rendezvous id), and the receive completes at the chunk count's kDone,
//               the send when all its writes completed. (Only the last chunk of each lane would
//               do on an RC queue pair, where a failed write flushes the lane; but a fabric may
//               fail one write and still land the later ones of its lane, as fabric_fake's
//               injected errors do, and then a receive would complete without that chunk's
//               bytes. One immediate per chunk of at least 64 KiB costs nothing measurable.)
//               The receiver picks the cut: chunk = RINGFOLD_RDMA_CHUNK_BYTES
//               capped by maxWriteBytes(), smaller (4 KiB multiples) when that spreads the
//               message over more lanes.
//   bounce    : Connection's contract lets a send complete before its receive is posted (over TCP
//               the kernel buffers it), and the collectives rely on it: a ring rank may wait for
//               its send to the next rank before posting its receive from the previous one. A
//               rendezvous send cannot complete before the receiver answers, so a request to send
//               left unmatched is taken into a bounce buffer of the receiver's (registered once,
//               kept for reuse up to kSpareBounceBytes per peer): the receiver answers kCts with
//               that buffer as the destination, and the receive posted later copies it out (1
//               copy, as for an unexpected eager message). It happens when the receiver is about
//               to block in a wait, or once the request has waited kBounceAfter unmatched (so a
//               rank driving another backend bounces too); a receive posted in time gets the data
//               with no copy. A mismatch found then is reported as for an eager message (the
//               sender's data already went; both sides fail with CheckMismatch).
//   mismatch  : a receive whose length or check differs from the message's fails with
//               CheckMismatch(peer, tag, expected/actual length, expected/actual check) and
//               poisons the device, as over TCP; the receiver also answers kCts {kMismatch}
//               (tag; length/check: the receive's; address/rkey: the message's length/check),
//               for an eager message too, and the sender poisons its own device with the same
//               CheckMismatch (its send fails, or its next request does).
//   immediates: this rank keeps, per peer, one immediate receive for each slot of its ring and
//               each slot of the peer's ring (the most kSlot and kCredits writes that can be in
//               flight), reposted one for one as they are consumed, plus, at each kCts it sends,
//               as many as the kDone immediates it will get for it (one per chunk).
//   control   : kHello (first slot each way: rank, process identity), kNotice (liveness::Notice:
//               message = seq, tag = waitedOn + 1 or 0, check = waited ms, length = silent ms,
//               rkey = the sender's next message number), kAbort (status = ErrorKind, payload =
//               text). A notice is skipped when no credit is free; an abort waits for one for at
//               most 2 s.
//
// Start-up (connectAll): the fabric is opened for (rank, size) unless the creator gave one.
// For every selected peer a ring is registered; one blob under "<prefix>/addr/<rank>" holds, per
// selected peer: localAddress(peer), the ring's remote address and key, slot count and bytes.
// Each selected peer's blob is read (a peer that never publishes: TimeoutError naming it), then
// insertPeer, the immediate receives, and "<prefix>/ready/<rank>" is set once every pair is
// inserted here; a hello goes to a peer only after its ready key is seen (a verbs QP must be
// ready at both ends before the first write), and connectAll returns when every peer's hello
// arrived and this rank's landed at every peer (a rank may close right after connectAll; else
// IoError naming the first that did not answer), all within spec.timeout.
//
// Failure: a kError completion of a write that pending work depends on poisons the device with
// IoError(peer, "RDMA write to rank P failed: ..."); one of a write nothing waits on (a credit
// return or notice to a peer that finished and left) only marks the peer gone, and work later
// posted to it, or still pending with it, then fails the same way. After poisoning nothing new
// is sent but control slots (aborts, a mismatch's kCts); writes already handed to the fabric
// are drained (at most 2 s) before the error reaches the caller; the destination registrations
// of accepted rendezvous receives are then deregistered, so a sender still writing there fails
// instead of writing into memory the caller may reuse. Waits, notices, blame and aborts are
// those of tcp_uring (device_state.h). Teardown never waits on a peer.
//
// Registration cache (registration_cache.h): a send or receive that needs a registration (every
// rendezvous, and eager sends with no copy) finds one covering its bytes, by page-aligned range,
// registered once and kept while unused up to RINGFOLD_RDMA_REG_CACHE_BYTES (LRU beyond).
// Caveat: host memory freed and allocated again at the same address keeps its cached
// registration, which on verbs still pins the OLD pages: writes then land in memory the process
// no longer sees (silently wrong data). An application that frees and reallocates communication
// buffers (rather than keeping them, as frameworks' caching allocators do) sets
// RINGFOLD_RDMA_REG_CACHE_BYTES=0, so that a registration ends with its last use. (Memory held
// by a live MemoryRegion is the caller's and must stay allocated in either case.)
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ringfold::transport::rdma {

// A request to send still unmatched after this long is bounced even while this rank is busy.
constexpr std::chrono::milliseconds kBounceAfter{2};
// Bounce buffers a peer keeps for reuse (registered once), beyond which they are freed.
constexpr size_t kSpareBounceBytes = size_t{32} << 20;
// Eager payloads up to this size are copied into a staging slot (one post beats two).
constexpr size_t kEagerCopyMaxBytes = 256;
// Sent in rts/rendezvous fields that name nothing (a kCts kMismatch for an eager message).
constexpr uint32_t kNoId = 0xFFFFFFFFu;

}  // namespace ringfold::transport::rdma
