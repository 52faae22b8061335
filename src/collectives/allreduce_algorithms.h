// The allreduce algorithms the dispatcher (allreduce.cc) chooses from, one file each: ring.cc,
// direct.cc. Each takes the call's operands (executor.h) with src, dst, count (srcElems ==
// dstElems), element type, op (kAvg as kSum), scales, reducer and call filled in, on a
// communicator of at least 2 ranks.
#pragma once

#include "collectives/executor.h"

namespace ringfold::coll {

void ringAllreduce(Communicator& comm, const Operands& call);
void directAllreduce(Communicator& comm, const Operands& call);

}  // namespace ringfold::coll
