// What allreduce.cc runs once it has chosen: the phases of a plan (allreduce_plan.h) through the
// executor. Operands come with src, dst, count (srcElems == dstElems), element type, op (kAvg as
// kSum), scales, reducer and call filled in, on a communicator of at least 2 ranks.
#pragma once

#include "collectives/allreduce_model.h"
#include "collectives/executor.h"

namespace ringfold::coll {

// The plan options of a call: its count, element size, scaling and place, the communicator's
// segment, and the choice's tree segment, ring chunk and algorithm among hosts.
PlanOptions planOptions(const Communicator& comm, const Operands& call, const AllreduceChoice& choice);

// The check-word kind of a flat algorithm's messages.
Kind allreduceKind(AllreduceAlgorithm algorithm);

// Runs the phases of a flat algorithm (ring, direct, tree) of `plan` in group `group` on comm,
// each over its window of the call's buffers, with the operand rules of its algorithm.
void runFlat(Communicator& comm, AllreduceAlgorithm algorithm, std::vector<Phase>::iterator first,
             std::vector<Phase>::iterator last, const Operands& call);

// hierarchical.cc: over comm.hostSplit() (built before the call, outside its guard).
void hierarchicalAllreduce(Communicator& comm, const AllreduceChoice& choice, const Operands& call);

}  // namespace ringfold::coll
