// allreduce: direct and pipelined ring (vocabulary in allreduce.h and schedules.h).
#include "collectives/allreduce.h"

#include <algorithm>
#include <cstring>

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

namespace {

using coll::Flight;
using sched::Range;

// Reduce-scatter receives land in scratch slots and are posted up to kRecvSlots ahead of the
// fold, while a rank sends its own contribution (step 0) only kSendLead segments ahead of its
// fold: a receiver window wider than the sender's lead means segments rarely arrive before
// their receive (which costs a copy out of the transport's unexpected buffer), and a short lead
// keeps socket buffers and scratch small and cache-hot. Measured on loopback, 2 ranks, 16 MiB:
// window 4 / lead 4 gave 2.55 GB/s busbw, 8 / 2 gave 2.85-3.25, 8 / 1 gave 3.66 (MPI: 2.7).
// At 4 ranks and 64 MiB (32 segments a chunk) neighbours drift further apart: with 8 or 16
// slots a quarter of all receives arrived before they were posted and were copied twice; 32
// slots (16 MiB of scratch at the default segment size) brought that to 1%.
constexpr size_t kRecvSlots = 32;
constexpr size_t kSendLead = 1;
// Allgather receives land in recvbuf and need no scratch, so they have their own cursor and
// are posted as soon as the region they overwrite has been sent on, up to kGatherWindow ahead:
// a receive posted after its message arrived costs a copy out of the transport's unexpected
// buffer (measured: ~5% of the CPU of a 16 MiB allreduce on loopback when allgather receives
// queued behind the reduce-scatter ones).
constexpr size_t kGatherWindow = 128;
constexpr size_t kSendWindow = 16;  // sends in flight before the oldest is waited for

struct Args {
  const std::byte* src;
  std::byte* dst;
  size_t count;
  size_t es;
  DataType dtype;
  ReduceOp op;       // kAvg folds as kSum
  double preScale;
  double finalScale; // postScale, divided by n for kAvg
  uint64_t sequence;
  uint64_t check;
};

// One rank: sendbuf scaled by preScale, then by the final factor.
void localAllreduce(Communicator& comm, const Args& a) {
  if (a.count == 0) return;
  const std::byte* cur = a.src;
  if (a.preScale != 1.0) {
    comm.reducer().scale(a.dst, cur, a.count, a.dtype, a.preScale);
    cur = a.dst;
  }
  if (a.finalScale != 1.0) {
    comm.reducer().scale(a.dst, cur, a.count, a.dtype, a.finalScale);
    cur = a.dst;
  }
  if (cur != a.dst) std::memcpy(a.dst, cur, a.count * a.es);
}

// Direct, pipelined: each buffer travels in segments (sched::directSegmentBytes), all posted at
// once, and segment k is folded as soon as it has arrived from every peer, so folding overlaps
// the transfer of the segments behind it.
void directAllreduce(Communicator& comm, const Args& a) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = a.es;
  const size_t bytes = a.count * es;
  const bool inPlace = a.src == a.dst;
  Reducer& red = comm.reducer();
  const size_t segE = sched::segmentElems(sched::directSegmentBytes(comm.segmentBytes(), bytes), es);
  const size_t segments = sched::segmentCount(a.count, segE);
  const Range all{0, a.count};
  const size_t peers = static_cast<size_t>(n - 1);
  Flight flight(comm, peers * segments, peers * segments);
  // Own contribution goes to scratch when it must be scaled, or when folding in rank order would
  // overwrite it in recvbuf before its turn (in place, rank >= 2).
  const bool ownCopy = a.preScale != 1.0 || (inPlace && r >= 2);
  const size_t scratchBytes = (peers + (ownCopy ? 1 : 0)) * bytes;
  std::byte* scratch = comm.scratch(scratchBytes);
  auto& scratchRegion = flight.region(scratch, scratchBytes);
  std::byte* ownScratch = scratch + peers * bytes;
  const std::byte* own = ownCopy ? ownScratch : a.src;
  const transport::MemoryRegion& ownRegion = ownCopy ? scratchRegion : flight.region(a.src, bytes);
  const size_t ownOffset = ownCopy ? peers * bytes : 0;
  auto slotOf = [r](int p) { return static_cast<size_t>(p < r ? p : p - 1); };
  const uint64_t tag = coll::collectiveTag(a.sequence, 0);
  for (size_t k = 0; k < segments; ++k) {
    const Range sg = sched::segment(all, segE, k);
    for (int i = 1; i < n; ++i) {
      const int p = sched::mod(r - i, n);
      flight.postRecv(k * peers + slotOf(p), p, scratchRegion, slotOf(p) * bytes + sg.offset * es, sg.length * es,
                      tag, a.check);
    }
  }
  // The last send of segment k has key k+1: retiring it retires the whole segment (FIFO).
  for (size_t k = 0; k < segments; ++k) {
    const Range sg = sched::segment(all, segE, k);
    if (ownCopy && sg.length > 0) {
      if (a.preScale != 1.0) {
        red.scale(ownScratch + sg.offset * es, a.src + sg.offset * es, sg.length, a.dtype, a.preScale);
      } else {
        std::memcpy(ownScratch + sg.offset * es, a.src + sg.offset * es, sg.length * es);
      }
    }
    for (int i = 1; i < n; ++i) {
      flight.postSend(sched::mod(r + i, n), ownRegion, ownOffset + sg.offset * es, sg.length * es, tag, a.check,
                      i == n - 1 ? k + 1 : 0);
    }
  }
  for (size_t k = 0; k < segments; ++k) {
    const Range sg = sched::segment(all, segE, k);
    for (int i = 0; i < n; ++i) {
      if (i != r) flight.waitRecv(k * peers + slotOf(i));
    }
    if (inPlace && !ownCopy) flight.waitSend(k + 1);  // segment k of recvbuf is about to be overwritten
    if (sg.length == 0) continue;
    auto contribution = [&](int i) { return (i == r ? own : scratch + slotOf(i) * bytes) + sg.offset * es; };
    std::byte* d = a.dst + sg.offset * es;
    red.reduce(d, contribution(0), contribution(1), sg.length, a.dtype, a.op, n == 2 ? a.finalScale : 1.0);
    for (int i = 2; i < n; ++i) {
      red.reduce(d, d, contribution(i), sg.length, a.dtype, a.op, i == n - 1 ? a.finalScale : 1.0);
    }
  }
  flight.waitAllSends();
}

// A receive of the ring: phase 0 = reduce-scatter, 1 = allgather; step s; segment k.
struct Unit {
  int phase = 0;
  int s = 0;
  size_t k = 0;
  bool operator<(const Unit& o) const {
    if (phase != o.phase) return phase < o.phase;
    if (s != o.s) return s < o.s;
    return k < o.k;
  }
};

void ringRound(Communicator& comm, const Args& a) {
  const int n = comm.size(), r = comm.rank();
  const int left = sched::mod(r - 1, n), right = sched::mod(r + 1, n);
  const size_t es = a.es;
  const size_t segE = sched::segmentElems(comm.segmentBytes(), es);
  const bool pre = a.preScale != 1.0;
  Reducer& red = comm.reducer();

  const size_t slotElems = std::max<size_t>(1, std::min(segE, sched::chunk(a.count, n, 0).length));
  const size_t slotBytes = slotElems * es;
  std::byte* slots = comm.scratch(kRecvSlots * slotBytes);
  // Receive slots: [0, kRecvSlots) reduce-scatter (slot i uses scratch buffer i), then
  // kGatherWindow allgather slots.
  Flight flight(comm, kRecvSlots + kGatherWindow, kSendWindow);
  auto& slotRegion = flight.region(slots, kRecvSlots * slotBytes);
  auto& dstRegion = flight.region(a.dst, a.count * es);
  auto& srcRegion = a.src == a.dst ? dstRegion : flight.region(a.src, a.count * es);

  auto chunkOf = [&](int c) { return sched::chunk(a.count, n, c); };
  auto recvChunk = [&](const Unit& u) {
    return u.phase == 0 ? sched::ringReduceRecvChunk(r, u.s, n) : sched::ringGatherRecvChunk(r, u.s, n);
  };
  auto advance = [&](Unit& u) {
    if (++u.k == sched::segmentCount(chunkOf(recvChunk(u)).length, segE)) {
      u.k = 0;
      if (++u.s == n - 1) {
        u.s = 0;
        ++u.phase;
      }
    }
  };
  auto tagOf = [&](int phase, int s) { return coll::collectiveTag(a.sequence, phase * (n - 1) + s); };
  // The reduce-scatter send of step s, segment k: the allgather receive (s, k) overwrites it.
  auto keyOf = [](int s, size_t k) { return (static_cast<uint64_t>(s + 1) << 40) | (k + 1); };

  // Step 0 sends this rank's own contribution to chunk r-1, a window ahead of the receives.
  const Range chunk0 = chunkOf(sched::ringReduceSendChunk(r, 0, n));
  const size_t segments0 = sched::segmentCount(chunk0.length, segE);
  size_t sent0 = 0;
  Unit rsPost, agPost{1, 0, 0}, proc;  // next reduce-scatter / allgather receive to post; next to fold
  size_t rsPosted = 0, agPosted = 0, processed = 0, agProcessed = 0;  // agProcessed: allgather units folded

  auto topUpStep0 = [&](bool all = false) {
    while (sent0 < segments0 && (all || sent0 < processed + kSendLead)) {
      const Range sg = sched::segment(chunk0, segE, sent0);
      if (pre && sg.length > 0) {
        red.scale(a.dst + sg.offset * es, a.src + sg.offset * es, sg.length, a.dtype, a.preScale);
      }
      flight.postSend(right, pre ? dstRegion : srcRegion, sg.offset * es, sg.length * es, tagOf(0, 0),
                      a.check, keyOf(0, sent0));
      ++sent0;
    }
  };
  // An allgather receive (s, k) overwrites what the reduce-scatter send (s, k) reads (out of
  // place, step 0's sends read sendbuf, so nothing). It is posted once that send was posted
  // and has completed; with block=false a send still in flight stops the cursor for now.
  auto gatherReady = [&](const Unit& u, bool block) {
    if (u.s == 0 ? sent0 <= u.k : !(Unit{0, u.s - 1, u.k} < proc)) return false;
    if (u.s == 0 && !pre && a.src != a.dst) return true;
    return flight.retireSend(keyOf(u.s, u.k), block);
  };
  auto postReceives = [&](bool block = false) {
    while (rsPost.phase == 0 && rsPosted < processed + kRecvSlots) {
      const Range sg = sched::segment(chunkOf(recvChunk(rsPost)), segE, rsPost.k);
      const size_t slot = rsPosted % kRecvSlots;
      flight.postRecv(slot, left, slotRegion, slot * slotBytes, sg.length * es, tagOf(0, rsPost.s), a.check);
      advance(rsPost);
      ++rsPosted;
    }
    while (agPost.phase == 1 && agPosted < agProcessed + kGatherWindow && gatherReady(agPost, block)) {
      const Range sg = sched::segment(chunkOf(recvChunk(agPost)), segE, agPost.k);
      flight.postRecv(kRecvSlots + agPosted % kGatherWindow, left, dstRegion, sg.offset * es, sg.length * es,
                      tagOf(1, agPost.s), a.check);
      advance(agPost);
      ++agPosted;
      block = false;
    }
  };

  topUpStep0();
  postReceives();
  while (proc.phase < 2) {
    size_t slot;
    if (proc.phase == 0) {
      RF_ENFORCE_GT(rsPosted, processed, "ring pipeline stalled");
      slot = processed % kRecvSlots;
    } else {
      if (agPosted == agProcessed) postReceives(true);  // its send is the only thing left to wait for
      RF_ENFORCE_GT(agPosted, agProcessed, "ring pipeline stalled");
      slot = kRecvSlots + agProcessed % kGatherWindow;
    }
    const Range sg = sched::segment(chunkOf(recvChunk(proc)), segE, proc.k);
    flight.waitRecv(slot);
    if (proc.phase == 0) {
      const bool last = proc.s == n - 2;
      if (sg.length > 0) {
        std::byte* d = a.dst + sg.offset * es;
        const std::byte* own = a.src + sg.offset * es;
        if (pre) {
          red.scale(d, own, sg.length, a.dtype, a.preScale);
          own = d;
        }
        red.reduce(d, slots + slot * slotBytes, own, sg.length, a.dtype, a.op, last ? a.finalScale : 1.0);
      }
      if (!last) {
        flight.postSend(right, dstRegion, sg.offset * es, sg.length * es, tagOf(0, proc.s + 1), a.check,
                        keyOf(proc.s + 1, proc.k));
      } else {
        flight.postSend(right, dstRegion, sg.offset * es, sg.length * es, tagOf(1, 0), a.check);
      }
    } else if (proc.s < n - 2) {
      flight.postSend(right, dstRegion, sg.offset * es, sg.length * es, tagOf(1, proc.s + 1), a.check);
    }
    if (proc.phase == 1) ++agProcessed;
    advance(proc);
    ++processed;
    topUpStep0();
    postReceives();
  }
  topUpStep0(true);  // a block with more segments than this rank receives
  flight.waitAllSends();
}

// The ring in rounds of n chunks of at most RINGFOLD_RING_CHUNK_BYTES, each a whole ring
// allreduce: what a rank folds or receives in a round is forwarded while it is still in cache.
// Over the whole buffer at once, a rank's chunk of a 64 MiB buffer at 4 ranks is 16 MiB, and it
// drains its socket buffers and folds from memory. Measured on loopback, 4 ranks, 64 MiB,
// in-place busbw: one round 1.06-1.15 GB/s over TCP, rounds of 4 x 256 KiB 1.61-1.73 (4 x 128
// KiB 0.98-1.15, 4 x 512 KiB 1.48-1.52); over Unix sockets 1.49-1.51 against 2.08-2.12. Every
// round reuses the collective's tags: the transport pairs equal tags in order, and every rank
// runs the same rounds (a count, dtype or op mismatch is caught in the first, by its check).
void ringAllreduce(Communicator& comm, const Args& a) {
  const size_t roundElems = sched::ringRoundElems(a.count, comm.size(), comm.tuning().ringChunkBytes, a.es);
  if (roundElems == a.count) return ringRound(comm, a);
  for (size_t off = 0; off < a.count; off += roundElems) {
    Args part = a;
    part.src = a.src + off * a.es;
    part.dst = a.dst + off * a.es;
    part.count = std::min(roundElems, a.count - off);
    ringRound(comm, part);
  }
}

}  // namespace

AllreduceAlgorithm chooseAllreduceAlgorithm(const Communicator& comm, size_t bytes) {
  const auto& t = comm.tuning();
  if (t.allreduceAlgorithm == "ring") return AllreduceAlgorithm::kRing;
  if (t.allreduceAlgorithm == "direct") return AllreduceAlgorithm::kDirect;
  const uint64_t limit = t.directMaxBytes ? *t.directMaxBytes : sched::directMaxBytes(comm.size());
  return bytes <= limit ? AllreduceAlgorithm::kDirect : AllreduceAlgorithm::kRing;
}

void allreduce(Communicator& comm, const AllreduceOptions& o) {
  coll::run(comm, "allreduce", [&] {
    const char* name = "allreduce";
    const int r = comm.rank();
    coll::requireReducible(name, r, o.dtype);
    if (static_cast<int>(o.op) >= kNumReduceOps) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": unknown op ", static_cast<int>(o.op));
    }
    const size_t bytes = coll::byteSize(name, r, o.count, o.dtype);
    coll::requireBuffer(name, r, o.sendbuf, bytes, "sendbuf");
    coll::requireBuffer(name, r, o.recvbuf, bytes, "recvbuf");
    if (o.sendbuf != o.recvbuf && coll::overlaps(o.sendbuf, bytes, o.recvbuf, bytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r,
               ": sendbuf and recvbuf overlap without being equal (in place needs sendbuf == recvbuf)");
    }
    AllreduceAlgorithm algo = o.algorithm == AllreduceAlgorithm::kAuto ? chooseAllreduceAlgorithm(comm, bytes)
                                                                       : o.algorithm;
    if (algo != AllreduceAlgorithm::kRing && algo != AllreduceAlgorithm::kDirect) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": unknown algorithm ", static_cast<int>(algo));
    }
    Args a;
    a.src = static_cast<const std::byte*>(o.sendbuf);
    a.dst = static_cast<std::byte*>(o.recvbuf);
    a.count = o.count;
    a.es = dataTypeSize(o.dtype);
    a.dtype = o.dtype;
    a.op = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
    a.preScale = o.preScale;
    a.finalScale = sched::finalScale(o.op, o.postScale, comm.size());
    a.sequence = comm.nextSequence();
    coll::CheckFields fields;
    fields.kind = algo == AllreduceAlgorithm::kRing ? coll::Kind::kAllreduceRing : coll::Kind::kAllreduceDirect;
    fields.dtype = o.dtype;
    fields.op = o.op;
    fields.count = o.count;
    a.check = coll::packCheck(fields);
    if (comm.size() == 1) {
      localAllreduce(comm, a);
    } else if (algo == AllreduceAlgorithm::kDirect) {
      directAllreduce(comm, a);
    } else {
      ringAllreduce(comm, a);
    }
  });
}

}  // namespace ringfold
