// allreduce: argument checks and the choice of algorithm (allreduce.h); the schedules come from
// allreduce_plan.h and run through the executor; hierarchical's phases are in hierarchical.cc.
#include "collectives/allreduce.h"

#include "collectives/allreduce_algorithms.h"
#include "collectives/pipeline.h"
#include "collectives/schedules.h"
#include "collectives/topology.h"

namespace ringfold {

namespace coll {

PlanOptions planOptions(const Communicator& comm, const Operands& call, const AllreduceChoice& choice) {
  PlanOptions plan;
  plan.count = call.dstElems;
  plan.elemSize = call.elemSize;
  plan.preScaled = call.preScale != 1.0;
  plan.inPlace = call.src == call.dst;
  plan.segmentBytes = comm.segmentBytes();
  plan.treeSegmentBytes = choice.treeSegmentBytes;
  plan.ringChunkBytes = choice.ringChunkBytes;
  plan.cross = choice.cross;
  return plan;
}

Kind allreduceKind(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kDirect: return Kind::kAllreduceDirect;
    case AllreduceAlgorithm::kTree: return Kind::kAllreduceTree;
    case AllreduceAlgorithm::kHierarchical: return Kind::kAllreduceHierarchical;
    default: return Kind::kAllreduceRing;
  }
}

void runFlat(Communicator& comm, AllreduceAlgorithm algorithm, std::vector<Phase>::iterator first,
             std::vector<Phase>::iterator last, const Operands& call) {
  for (auto p = first; p != last; ++p) {
    Operands part = call;
    part.src = call.src + (p->base - call.srcShift) * call.elemSize;
    part.dst = call.dst + (p->base - call.dstShift) * call.elemSize;
    part.srcShift = part.dstShift = 0;
    part.srcElems = part.dstElems = p->count;
    if (algorithm == AllreduceAlgorithm::kDirect) {
      // Own contribution in scratch when folding in rank order would overwrite it in recvbuf
      // before its turn (in place, rank >= 2), or when it is preScaled.
      part.copyOwn = part.src == part.dst && comm.rank() >= 2;
      part.stageRange = sched::Range{0, p->count};
    } else {
      part.stageInDst = true;  // preScaled own segments are sent from recvbuf, where they belong
    }
    execute(comm, *p->schedule, part);
  }
}

}  // namespace coll

AllreduceAlgorithm chooseAllreduceAlgorithm(Communicator& comm, size_t bytes) {
  return comm.allreduceChooser().choose(bytes).algorithm;
}

coll::AllreduceChoice resolveAllreduce(Communicator& comm, AllreduceAlgorithm requested, size_t bytes) {
  if (requested == AllreduceAlgorithm::kAuto) return comm.allreduceChooser().choose(bytes);
  const coll::JobShape shape = coll::jobShape(comm.size(), comm.hostOf());
  const coll::Knobs knobs{comm.segmentBytes(), comm.tuning().ringChunkBytes};
  coll::AllreduceChoice c = coll::predictAllreduce(comm.model(), shape, bytes, requested, knobs,
                                                   coll::AlgorithmSet::parse(comm.tuning().allreduceAlgorithm));
  if (c.seconds < 0) c = coll::predictAllreduce(comm.model(), shape, bytes, AllreduceAlgorithm::kRing, knobs);
  return c;
}

void allreduce(Communicator& comm, const AllreduceOptions& o) {
  const bool known = static_cast<unsigned>(o.dtype) < static_cast<unsigned>(kNumDataTypes);
  const bool sane = static_cast<unsigned>(o.algorithm) <= static_cast<unsigned>(AllreduceAlgorithm::kHierarchical);
  const coll::AllreduceChoice choice =
      sane ? resolveAllreduce(comm, o.algorithm, o.count * (known ? dataTypeSize(o.dtype) : 0)) : coll::AllreduceChoice{};
  // The host split is collective over the whole group: built before the call's guard (every
  // rank makes the same choice, from the same constants).
  if (choice.algorithm == AllreduceAlgorithm::kHierarchical && comm.size() > 1 && !comm.failed()) comm.hostSplit();
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
    if (!sane) RF_THROW(InvalidArgument, name, " on rank ", r, ": unknown algorithm ", static_cast<int>(o.algorithm));
    const AllreduceAlgorithm algo = choice.algorithm;
    coll::Operands a;
    a.src = static_cast<const std::byte*>(o.sendbuf);
    a.dst = static_cast<std::byte*>(o.recvbuf);
    a.srcElems = a.dstElems = o.count;
    coll::setReduction(a, comm, o);
    if (algo == AllreduceAlgorithm::kHierarchical && comm.size() > 1) return coll::hierarchicalAllreduce(comm, choice, a);
    a.call = coll::begin(comm, {.kind = coll::allreduceKind(algo), .dtype = o.dtype, .op = o.op, .count = o.count});
    if (comm.size() == 1) return coll::reduceLocal(a);
    std::vector<coll::Phase> phases =
        coll::planAllreduce(algo, {.rank = r, .size = comm.size()}, coll::planOptions(comm, a, choice));
    coll::runFlat(comm, algo, phases.begin(), phases.end(), a);
  });
}

}  // namespace ringfold
