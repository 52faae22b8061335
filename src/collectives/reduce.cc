// reduce: argument checks, then sched::ChainReduceSchedule run by the executor (reduce.h).
#include "collectives/reduce.h"

#include "collectives/collective_schedules.h"
#include "collectives/executor.h"
#include "collectives/pipeline.h"

namespace ringfold {

void reduce(Communicator& comm, const ReduceOptions& o) {
  coll::run(comm, "reduce", [&] {
    const char* name = "reduce";
    const int n = comm.size(), r = comm.rank();
    if (o.root < 0 || o.root >= n) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": root ", o.root, " is not a rank of this communicator (size ",
               n, ")");
    }
    const size_t bytes = coll::byteSize(name, r, o.count, o.dtype);  // first: names an unknown dtype
    coll::requireReducible(name, r, o.dtype);
    if (static_cast<int>(o.op) >= kNumReduceOps) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": unknown op ", static_cast<int>(o.op));
    }
    const bool isRoot = r == o.root;
    coll::requireBuffer(name, r, o.sendbuf, bytes, "sendbuf");
    if (isRoot) coll::requireBuffer(name, r, o.recvbuf, bytes, "recvbuf (at the root)");
    if (isRoot && o.sendbuf != o.recvbuf && coll::overlaps(o.sendbuf, bytes, o.recvbuf, bytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r,
               ": sendbuf and recvbuf overlap without being equal (in place needs sendbuf == recvbuf)");
    }
    coll::Operands a;
    a.src = static_cast<const std::byte*>(o.sendbuf);
    a.srcElems = o.count;
    // Only the root's recvbuf is written; elsewhere it is not even registered (it may be null).
    a.dst = isRoot ? static_cast<std::byte*>(o.recvbuf) : nullptr;
    a.dstElems = isRoot ? o.count : 0;
    coll::setReduction(a, comm, o);
    a.call = coll::begin(comm, {.kind = coll::Kind::kReduce,
                                .dtype = o.dtype,
                                .op = o.op,
                                .root = static_cast<uint32_t>(o.root),
                                .count = o.count});
    if (n == 1) return coll::reduceLocal(a);
    const sched::ChainReduceSchedule schedule(r, n, o.root, o.count, sched::segmentElems(comm.segmentBytes(), a.elemSize));
    // With a preScale the head's segments are scaled into scratch before they go out (its
    // recvbuf is not ours to write); the other ranks stage nothing (their only own send is the
    // empty hello) and scale their contribution at each fold.
    a.stageRange = sched::Range{0, schedule.position() == 0 ? o.count : 0};
    coll::execute(comm, schedule, a);
  });
}

}  // namespace ringfold
