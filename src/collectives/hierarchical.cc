// Hierarchical allreduce (allreduce.h): the phases of planAllreduce(kHierarchical), each on the
// communicator of its group (comm.hostSplit(): this host's ranks, or the ranks of this local
// rank on every host), with the operands of its phase:
//   local reduce-scatter : sendbuf (preScaled as it is sent or folded) -> this rank's block of
//                          recvbuf, no final scale;
//   cross allreduce      : in place on that block, with the call's final scale;
//   local allgather      : in place over recvbuf, every rank's block to every rank.
// A failure in one phase aborts the other group and the job's communicator with the same
// words, so that ranks waiting anywhere fail at once with one reason instead of at their
// timeout; an abort of the job's communicator reaches the groups through followAborts().
#include <exception>

#include "collectives/allreduce_algorithms.h"
#include "collectives/pipeline.h"
#include "collectives/topology.h"
#include "common/error.h"

namespace ringfold::coll {

void hierarchicalAllreduce(Communicator& comm, const AllreduceChoice& choice, const Operands& call) {
  HostSplit& split = comm.hostSplit();
  Communicator& local = *split.local;
  Communicator& cross = *split.cross;
  const size_t count = call.dstElems;
  const PlanOptions options = planOptions(comm, call, choice);
  const PlanShape shape{comm.rank(), comm.size(), local.rank(), local.size(), cross.rank(), cross.size()};
  std::vector<Phase> phases = planAllreduce(AllreduceAlgorithm::kHierarchical, shape, options);
  const std::vector<sched::Range> blocks = hierarchicalBlocks(count, local.size());
  const sched::Range mine = blocks[local.rank()];
  const CheckFields fields{.kind = Kind::kAllreduceHierarchical, .dtype = call.dtype, .op = call.op, .count = count};
  try {
    auto at = phases.begin();
    // Local reduce-scatter into this rank's block of recvbuf.
    run(local, "allreduce", [&] {
      Operands a = call;
      a.dst = call.dst + mine.offset * call.elemSize;
      a.dstShift = mine.offset;
      a.dstElems = mine.length;
      a.finalScale = 1.0;
      a.stageRange = blocks[sched::ringReduceSendChunk(local.rank(), 0, local.size())];
      a.call = begin(local, fields);
      execute(local, *at->schedule, a);
    });
    ++at;
    // Among hosts, in place on the block.
    auto crossEnd = at;
    while (crossEnd != phases.end() && crossEnd->group == Group::kCross) ++crossEnd;
    run(cross, "allreduce", [&] {
      Operands a = call;
      a.src = call.dst;
      a.preScale = 1.0;
      a.call = begin(cross, {.kind = allreduceKind(choice.cross), .dtype = call.dtype, .op = call.op, .count = mine.length});
      runFlat(cross, choice.cross, at, crossEnd, a);
    });
    // Local allgather of the blocks, in place.
    run(local, "allreduce", [&] {
      Operands a = call;
      a.src = call.dst;
      a.preScale = a.finalScale = 1.0;  // the blocks are final
      a.call = begin(local, fields);
      execute(local, *crossEnd->schedule, a);
    });
  } catch (...) {
    // The failed group is aborted already, by its guard. Abort this rank's other group and the
    // job's communicator with the same words, so that every rank reports one reason: ranks in
    // the other group fail at once, and the job's abort reaches everyone else through the
    // groups' followAborts() (this rank's own job-level guard then reports that reason).
    std::string why;
    int culprit = -1;
    const transport::ErrorKind kind = transport::describeError(std::current_exception(), why, culprit);
    for (Communicator* group : {&local, &cross, &comm}) group->abort(kind, why);
    throw;
  }
}

}  // namespace ringfold::coll
