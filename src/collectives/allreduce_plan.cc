#include "collectives/allreduce_plan.h"

#include <algorithm>

#include "collectives/collective_schedules.h"
#include "common/error.h"

namespace ringfold {

const char* algorithmName(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kAuto: return "auto";
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kDirect: return "direct";
    case AllreduceAlgorithm::kTree: return "tree";
    case AllreduceAlgorithm::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

}  // namespace ringfold

namespace ringfold::coll {

namespace {

// The flat algorithms over `n` ranks, this one being `rank`, on elements [base, base + count).
void planFlat(AllreduceAlgorithm algorithm, Group group, int rank, int n, size_t base, size_t count,
              const PlanOptions& o, std::vector<Phase>& out) {
  const size_t es = o.elemSize;
  switch (algorithm) {
    case AllreduceAlgorithm::kRing: {
      // Rounds: what a rank folds or receives in a round is forwarded while it is still in cache.
      const size_t round = std::max<size_t>(1, sched::ringRoundElems(count, n, o.ringChunkBytes, es));
      size_t off = 0;
      do {
        const size_t part = std::min(round, count - off);
        out.push_back(Phase{group, base + off, part,
                            std::make_unique<sched::RingAllreduceSchedule>(rank, n, part, sched::segmentElems(o.segmentBytes, es),
                                                                           o.preScaled, o.inPlace)});
        off += part;
      } while (off < count);
      return;
    }
    case AllreduceAlgorithm::kDirect: {
      // Own contribution goes to scratch when it must be scaled, or when folding in rank order
      // would overwrite it in recvbuf before its turn (in place, rank >= 2).
      const bool staged = (o.inPlace && rank >= 2) || o.preScaled;
      const size_t seg = sched::segmentElems(sched::directSegmentBytes(o.segmentBytes, count * es), es);
      out.push_back(Phase{group, base, count,
                          std::make_unique<sched::DirectAllreduceSchedule>(rank, n, count, seg, staged, o.inPlace)});
      return;
    }
    case AllreduceAlgorithm::kTree:
      out.push_back(Phase{group, base, count,
                          std::make_unique<sched::TreeAllreduceSchedule>(rank, n, count, sched::segmentElems(o.treeSegmentBytes, es),
                                                                         o.inPlace || o.preScaled)});
      return;
    default:
      RF_THROW(InvalidArgument, "allreduce: ", algorithmName(algorithm), " is not a flat algorithm");
  }
}

}  // namespace

std::vector<sched::Range> hierarchicalBlocks(size_t count, int localSize) {
  std::vector<sched::Range> blocks(localSize);
  for (int c = 0; c < localSize; ++c) blocks[c] = sched::chunk(count, localSize, c);
  return blocks;
}

std::vector<Phase> planAllreduce(AllreduceAlgorithm algorithm, const PlanShape& s, const PlanOptions& o) {
  RF_ENFORCE(s.size >= 2, "an allreduce plan needs 2 ranks or more");
  std::vector<Phase> out;
  if (algorithm != AllreduceAlgorithm::kHierarchical) {
    planFlat(algorithm, Group::kAll, s.rank, s.size, 0, o.count, o, out);
    return out;
  }
  RF_ENFORCE(s.localSize * s.crossSize == s.size, "hierarchical allreduce needs as many ranks on every host");
  RF_ENFORCE(o.cross != AllreduceAlgorithm::kHierarchical && o.cross != AllreduceAlgorithm::kAuto,
             "hierarchical allreduce needs a flat algorithm among hosts");
  const std::vector<sched::Range> blocks = hierarchicalBlocks(o.count, s.localSize);
  const size_t seg = sched::segmentElems(o.segmentBytes, o.elemSize);
  if (s.localSize > 1) {
    out.push_back(Phase{Group::kLocal, 0, o.count, std::make_unique<sched::RingReduceScatterSchedule>(s.localRank, blocks, seg)});
  }
  if (s.crossSize > 1) {
    // The block was folded (and preScaled) on this host already, and lies in recvbuf: in place.
    PlanOptions cross = o;
    cross.preScaled = false;
    cross.inPlace = true;
    const sched::Range mine = blocks[s.localRank];
    planFlat(o.cross, Group::kCross, s.crossRank, s.crossSize, mine.offset, mine.length, cross, out);
  }
  if (s.localSize > 1) {
    out.push_back(Phase{Group::kLocal, 0, o.count, std::make_unique<sched::RingAllgatherSchedule>(s.localRank, blocks, seg)});
  }
  return out;
}

}  // namespace ringfold::coll
