// reduce-scatter: pipelined ring (schedules.h). Partial folds of other ranks' blocks are made
// in the receive slot itself and forwarded from there, so the only scratch is the slots.
#include "collectives/reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

namespace {
constexpr size_t kRecvSlots = 4;
constexpr size_t kSendWindow = 16;
}  // namespace

void reduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  coll::run(comm, "reduce_scatter", [&] {
    const char* name = "reduce_scatter";
    const int n = comm.size(), r = comm.rank();
    coll::requireReducible(name, r, o.dtype);
    if (static_cast<int>(o.op) >= kNumReduceOps) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": unknown op ", static_cast<int>(o.op));
    }
    const size_t blockBytes = coll::byteSize(name, r, o.recvCount, o.dtype);
    if (blockBytes > 0 && static_cast<size_t>(n) > SIZE_MAX / blockBytes) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": recvCount ", o.recvCount, " overflows");
    }
    const size_t totalBytes = blockBytes * n;
    coll::requireBuffer(name, r, o.sendbuf, totalBytes, "sendbuf");
    coll::requireBuffer(name, r, o.recvbuf, blockBytes, "recvbuf");
    const auto* src = static_cast<const std::byte*>(o.sendbuf);
    auto* dst = static_cast<std::byte*>(o.recvbuf);
    const bool inPlace = blockBytes > 0 && dst == src + r * blockBytes;
    if (!inPlace && coll::overlaps(src, totalBytes, dst, blockBytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r,
               ": sendbuf and recvbuf overlap, but in place needs recvbuf == sendbuf + rank*recvCount");
    }
    const size_t es = dataTypeSize(o.dtype);
    const ReduceOp op = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
    const double finalScale = sched::finalScale(o.op, o.postScale, n);
    const bool pre = o.preScale != 1.0;
    const uint64_t sequence = comm.nextSequence();
    coll::CheckFields fields;
    fields.kind = coll::Kind::kReduceScatter;
    fields.dtype = o.dtype;
    fields.op = o.op;
    fields.count = o.recvCount;
    const uint64_t check = coll::packCheck(fields);
    Reducer& red = comm.reducer();
    const size_t rc = o.recvCount;

    if (n == 1) {
      if (rc == 0) return;
      const std::byte* cur = src;
      if (pre) {
        red.scale(dst, cur, rc, o.dtype, o.preScale);
        cur = dst;
      }
      if (finalScale != 1.0) {
        red.scale(dst, cur, rc, o.dtype, finalScale);
        cur = dst;
      }
      if (cur != dst) std::memcpy(dst, cur, blockBytes);
      return;
    }

    const int left = sched::mod(r - 1, n), right = sched::mod(r + 1, n);
    const size_t segE = sched::segmentElems(comm.segmentBytes(), es);
    const size_t segments = sched::segmentCount(rc, segE);
    const size_t slotElems = std::max<size_t>(1, std::min(segE, rc));
    const size_t slotBytes = slotElems * es;
    std::byte* slots = comm.scratch(kRecvSlots * slotBytes, 0);
    std::byte* preBlock = pre ? comm.scratch(blockBytes, 1) : nullptr;  // scaled block r-1
    std::byte* preSegment = pre ? comm.scratch(slotBytes, 2) : nullptr;
    coll::Flight flight(comm, kRecvSlots, kSendWindow);
    auto& slotRegion = flight.region(slots, kRecvSlots * slotBytes);
    auto& srcRegion = flight.region(src, totalBytes);
    auto& preRegion = flight.region(preBlock, pre ? blockBytes : 0);
    auto block = [&](int c) { return sched::Range{static_cast<size_t>(c) * rc, rc}; };
    auto tagOf = [&](int s) { return coll::collectiveTag(sequence, s); };
    const size_t units = static_cast<size_t>(n - 1) * segments;  // receive (s, k) is unit s*segments+k

    const int block0 = sched::ringReduceSendChunk(r, 0, n);
    size_t sent0 = 0, posted = 0, processed = 0;
    auto topUpStep0 = [&](bool all = false) {
      while (sent0 < segments && (all || sent0 < processed + kRecvSlots)) {
        const sched::Range sg = sched::segment(block(block0), segE, sent0);
        if (pre) {
          const size_t within = (sg.offset - block(block0).offset) * es;
          if (sg.length > 0) red.scale(preBlock + within, src + sg.offset * es, sg.length, o.dtype, o.preScale);
          flight.postSend(right, preRegion, within, sg.length * es, tagOf(0), check);
        } else {
          flight.postSend(right, srcRegion, sg.offset * es, sg.length * es, tagOf(0), check);
        }
        ++sent0;
      }
    };
    auto postReceives = [&] {
      while (posted < units && posted < processed + kRecvSlots) {
        const int s = static_cast<int>(posted / segments);
        const size_t k = posted % segments;
        const sched::Range sg = sched::segment(block(sched::ringReduceRecvChunk(r, s, n)), segE, k);
        const size_t slot = posted % kRecvSlots;
        if (posted >= kRecvSlots) flight.waitSend(posted - kRecvSlots + 1);  // forwarded from this slot
        flight.postRecv(slot, left, slotRegion, slot * slotBytes, sg.length * es, tagOf(s), check);
        ++posted;
      }
    };

    topUpStep0();
    postReceives();
    while (processed < units) {
      const int s = static_cast<int>(processed / segments);
      const size_t k = processed % segments;
      const int c = sched::ringReduceRecvChunk(r, s, n);
      const sched::Range sg = sched::segment(block(c), segE, k);
      const size_t slot = processed % kRecvSlots;
      std::byte* in = slots + slot * slotBytes;
      flight.waitRecv(slot);
      const std::byte* own = src + sg.offset * es;
      if (pre && sg.length > 0) {
        red.scale(preSegment, own, sg.length, o.dtype, o.preScale);
        own = preSegment;
      }
      if (s < n - 2) {
        if (sg.length > 0) red.reduce(in, in, own, sg.length, o.dtype, op, 1.0);
        flight.postSend(right, slotRegion, slot * slotBytes, sg.length * es, tagOf(s + 1), check, processed + 1);
      } else if (sg.length > 0) {
        red.reduce(dst + (sg.offset - block(c).offset) * es, in, own, sg.length, o.dtype, op, finalScale);
      }
      ++processed;
      topUpStep0();
      postReceives();
    }
    topUpStep0(true);  // a block with more segments than this rank receives
    flight.waitAllSends();
  });
}

}  // namespace ringfold
