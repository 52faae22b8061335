// broadcast: pipelined chain root -> root+1 -> ... -> root-1, after an empty hello from every
// rank to the next: a ChainBroadcastSchedule (collective_schedules.h) run by the executor.
#include "collectives/broadcast.h"

#include <cstring>

#include "collectives/collective_schedules.h"
#include "collectives/executor.h"
#include "collectives/pipeline.h"

namespace ringfold {

void broadcast(Communicator& comm, const BroadcastOptions& o) {
  coll::run(comm, "broadcast", [&] {
    const char* name = "broadcast";
    const int n = comm.size(), r = comm.rank();
    if (o.root < 0 || o.root >= n) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": root ", o.root, " is not a rank of this communicator (size ",
               n, ")");
    }
    const size_t bytes = coll::byteSize(name, r, o.count, o.dtype);
    const bool isRoot = r == o.root;
    if (isRoot) coll::requireBuffer(name, r, o.sendbuf, bytes, "sendbuf (at the root)");
    coll::requireBuffer(name, r, o.recvbuf, bytes, "recvbuf");
    if (isRoot && o.sendbuf != o.recvbuf && coll::overlaps(o.sendbuf, bytes, o.recvbuf, bytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r,
               ": sendbuf and recvbuf overlap without being equal (in place needs sendbuf == recvbuf)");
    }
    const coll::Call call = coll::begin(
        comm, {.kind = coll::Kind::kBroadcast, .dtype = o.dtype, .root = static_cast<uint32_t>(o.root), .count = o.count});
    auto* dst = static_cast<std::byte*>(o.recvbuf);
    const auto* src = static_cast<const std::byte*>(o.sendbuf);

    if (isRoot && src != dst && bytes > 0) std::memcpy(dst, src, bytes);
    if (n == 1) return;

    const size_t es = dataTypeSize(o.dtype);
    coll::Operands a;
    // The root sends from sendbuf; the other ranks send only the hello, from recvbuf.
    a.src = isRoot ? src : dst;
    a.srcElems = o.count;
    a.dst = dst;
    a.dstElems = o.count;
    a.elemSize = es;
    a.dtype = o.dtype;
    a.call = call;
    const sched::ChainBroadcastSchedule schedule(r, n, o.root, o.count, sched::segmentElems(comm.segmentBytes(), es));
    coll::execute(comm, schedule, a);
  });
}

}  // namespace ringfold
