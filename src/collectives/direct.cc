// Direct allreduce (allreduce.h): sched::DirectAllreduceSchedule run by the executor, in about
// four segments (sched::directSegmentBytes) so that folding overlaps the transfer.
#include "collectives/allreduce_algorithms.h"
#include "collectives/collective_schedules.h"

namespace ringfold::coll {

void directAllreduce(Communicator& comm, const Operands& o) {
  const int r = comm.rank();
  const size_t count = o.dstElems;
  const bool inPlace = o.src == o.dst;
  // Own contribution goes to scratch when it must be scaled, or when folding in rank order would
  // overwrite it in recvbuf before its turn (in place, rank >= 2).
  const bool ownCopy = inPlace && r >= 2;
  const bool staged = ownCopy || o.preScale != 1.0;
  const size_t segE = sched::segmentElems(sched::directSegmentBytes(comm.segmentBytes(), count * o.elemSize), o.elemSize);
  const sched::DirectAllreduceSchedule schedule(r, comm.size(), count, segE, staged, inPlace);
  Operands call = o;
  call.copyOwn = ownCopy;
  call.stageRange = sched::Range{0, count};
  execute(comm, schedule, call);
}

}  // namespace ringfold::coll
