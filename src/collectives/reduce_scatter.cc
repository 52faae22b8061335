// reduce-scatter: argument checks, then sched::RingReduceScatterSchedule run by the executor.
// Partial folds of other ranks' blocks are made in the receive slot itself and forwarded from
// there, so the only scratch is the slots.
#include "collectives/reduce_scatter.h"

#include <cstring>

#include "collectives/collective_schedules.h"
#include "collectives/executor.h"

namespace ringfold {

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
    const size_t rc = o.recvCount;
    coll::Operands a;
    a.src = src;
    a.srcElems = rc * n;
    a.dst = dst;
    a.dstShift = static_cast<size_t>(r) * rc;
    a.dstElems = rc;
    coll::setReduction(a, comm, o);
    a.call = coll::begin(comm, {.kind = coll::Kind::kReduceScatter, .dtype = o.dtype, .op = o.op, .count = rc});

    if (n == 1) return coll::reduceLocal(a);
    // Own sends (block r-1) are preScaled into scratch covering that block.
    a.stageRange = sched::Range{static_cast<size_t>(sched::ringReduceSendChunk(r, 0, n)) * rc, rc};
    std::vector<sched::Range> blocks(n);
    for (int c = 0; c < n; ++c) blocks[c] = sched::Range{static_cast<size_t>(c) * rc, rc};
    const sched::RingReduceScatterSchedule schedule(r, std::move(blocks), sched::segmentElems(comm.segmentBytes(), a.elemSize));
    coll::execute(comm, schedule, a);
  });
}

}  // namespace ringfold
