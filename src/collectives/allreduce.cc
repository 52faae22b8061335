// allreduce: argument checks and the choice of algorithm (allreduce.h); the algorithms are in
// ring.cc and direct.cc.
#include "collectives/allreduce.h"

#include "collectives/allreduce_algorithms.h"
#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

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
    coll::Operands a;
    a.src = static_cast<const std::byte*>(o.sendbuf);
    a.dst = static_cast<std::byte*>(o.recvbuf);
    a.srcElems = a.dstElems = o.count;
    a.elemSize = dataTypeSize(o.dtype);
    a.dtype = o.dtype;
    a.op = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
    a.preScale = o.preScale;
    a.finalScale = sched::finalScale(o.op, o.postScale, comm.size());
    a.reducer = o.reducer != nullptr ? o.reducer : &comm.reducer();
    const bool ring = algo == AllreduceAlgorithm::kRing;
    a.call = coll::begin(comm, {.kind = ring ? coll::Kind::kAllreduceRing : coll::Kind::kAllreduceDirect,
                                .dtype = o.dtype, .op = o.op, .count = o.count});
    if (comm.size() == 1) {
      coll::reduceLocal(a);
    } else if (ring) {
      coll::ringAllreduce(comm, a);
    } else {
      coll::directAllreduce(comm, a);
    }
  });
}

}  // namespace ringfold
