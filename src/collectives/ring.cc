// Ring allreduce (allreduce.h): reduce-scatter then allgather, as sched::RingAllreduceSchedule
// run by the executor, in rounds of n chunks of at most RINGFOLD_RING_CHUNK_BYTES.
#include <algorithm>

#include "collectives/allreduce_algorithms.h"
#include "collectives/collective_schedules.h"

namespace ringfold::coll {

namespace {

void ringRound(Communicator& comm, const Operands& o) {
  const bool pre = o.preScale != 1.0;
  const sched::RingAllreduceSchedule schedule(comm.rank(), comm.size(), o.dstElems,
                                              sched::segmentElems(comm.segmentBytes(), o.elemSize), pre,
                                              o.src == o.dst);
  Operands round = o;
  round.stageInDst = true;  // preScaled own segments are sent from recvbuf, where they belong
  execute(comm, schedule, round);
}

}  // namespace

// Rounds: what a rank folds or receives in a round is forwarded while it is still in cache
// (over the whole buffer at once, a rank's chunk of a large buffer would drain the socket
// buffers and be folded from memory). Every round reuses the collective's tags: the transport
// pairs equal tags in order, and every rank runs the same rounds (a count, dtype or op
// mismatch is caught in the first, by its check).
void ringAllreduce(Communicator& comm, const Operands& o) {
  const size_t count = o.dstElems;
  const size_t roundElems = sched::ringRoundElems(count, comm.size(), comm.tuning().ringChunkBytes, o.elemSize);
  if (roundElems == count) return ringRound(comm, o);
  for (size_t off = 0; off < count; off += roundElems) {
    Operands part = o;
    part.src = o.src + off * o.elemSize;
    part.dst = o.dst + off * o.elemSize;
    part.srcElems = part.dstElems = std::min(roundElems, count - off);
    ringRound(comm, part);
  }
}

}  // namespace ringfold::coll
