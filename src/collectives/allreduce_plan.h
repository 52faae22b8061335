// AllreducePlan: the schedules one rank runs for an allreduce, in order, built from the
// algorithm, where the rank sits (PlanShape) and the call (PlanOptions). The collectives run
// exactly these (allreduce.cc, hierarchical.cc), and the simulator (bench/sim) runs the same
// objects against modelled links, so a prediction is a prediction of the code that runs.
//
// Phases
//   ring         : one phase per round (sched::ringRoundElems), each a RingAllreduceSchedule
//                  over its part of the buffer.
//   direct       : one DirectAllreduceSchedule.
//   tree         : one TreeAllreduceSchedule (the double binary tree).
//   hierarchical : (local) a ring reduce-scatter of the buffer in localSize blocks (block i:
//                  sched::chunk(count, localSize, i)); (cross) the `cross` algorithm's phases
//                  over this rank's block, among the ranks with this local rank on every host;
//                  (local) a ring allgather of the blocks. Needs every host to run localSize
//                  ranks.
// Contract: pure (no communicator, no buffers); every rank of a job that calls it with its own
// shape and the same options gets schedules that pair up (tests/collectives/schedules_test.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "collectives/schedule.h"

namespace ringfold {

enum class AllreduceAlgorithm { kAuto, kRing, kDirect, kTree, kHierarchical };
// "auto", "ring", "direct", "tree", "hierarchical".
const char* algorithmName(AllreduceAlgorithm algorithm);

}  // namespace ringfold

namespace ringfold::coll {

// Where a rank sits: in the job, on its host (local), and among the ranks of its local rank on
// every host (cross).
struct PlanShape {
  int rank = 0, size = 1;
  int localRank = 0, localSize = 1;
  int crossRank = 0, crossSize = 1;
};

struct PlanOptions {
  size_t count = 0;
  size_t elemSize = 4;
  bool preScaled = false;  // preScale != 1: own contributions are staged, scaled
  bool inPlace = false;    // sendbuf == recvbuf
  size_t segmentBytes = 512 << 10;      // ring, reduce-scatter and allgather segments
  size_t treeSegmentBytes = 512 << 10;  // tree segments
  size_t ringChunkBytes = 256 << 10;    // ring rounds (0: one round)
  AllreduceAlgorithm cross = AllreduceAlgorithm::kRing;  // hierarchical: among hosts
};

enum class Group : uint8_t { kAll, kLocal, kCross };  // the communicator that runs a phase

struct Phase {
  Group group = Group::kAll;
  size_t base = 0;   // the call's element that is the schedule's element 0
  size_t count = 0;  // elements the schedule covers
  std::unique_ptr<sched::Schedule> schedule;
};

// The phases of `algorithm` (not kAuto) for a job of shape.size ranks (>= 2).
std::vector<Phase> planAllreduce(AllreduceAlgorithm algorithm, const PlanShape& shape, const PlanOptions& options);

// The blocks of hierarchical's local reduce-scatter and allgather.
std::vector<sched::Range> hierarchicalBlocks(size_t count, int localSize);

}  // namespace ringfold::coll
