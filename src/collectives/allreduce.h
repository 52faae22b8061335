// allreduce: every rank's recvbuf gets the element-wise reduction of every rank's sendbuf.
//
// Algorithms
// Each algorithm is a list of schedules (allreduce_plan.h) run by the executor (executor.h);
// this file's allreduce() checks the arguments and picks one (allreduce.cc).
//   ring   : reduce-scatter then allgather around the ring, pipelined in segments of
//            comm.segmentBytes(): receives are posted several segments ahead, each segment is
//            folded straight from the receive buffer into recvbuf (out of place, the first fold
//            reads sendbuf directly, so there is no separate copy pass), and it is sent on as
//            soon as it is folded. The owner of each chunk applies postScale (and 1/size for
//            kAvg) once, before the allgather, so every rank ends with the same bits. A buffer
//            of more than n x RINGFOLD_RING_CHUNK_BYTES goes in rounds of that size, each a
//            whole ring (sched::ringRoundElems), so its data is forwarded while still in cache.
//   direct : one exchange: every rank sends its whole buffer to every other rank and folds
//            the n contributions in rank order 0..n-1. Pipelined: the buffers travel in about
//            four segments, and each segment is folded as soon as every peer's copy of it has
//            arrived. One round trip at 2 ranks; for small messages.
//   tree   : the double binary tree (sched::TreeAllreduceSchedule): each half of the buffer is
//            reduced up one of two trees and broadcast back down, in segments; latency grows
//            with log2(n) instead of n. The root of each tree applies the final scale.
//   hierarchical : (hierarchical.cc) reduce-scatter inside each host, allreduce of each
//            rank's block among the ranks of its local rank on every host, allgather inside
//            each host; over comm.hostSplit(). Every host must run as many ranks.
//   auto   : the communicator's chooser (allreduce_model.h): RINGFOLD_ALGO's allowed set,
//            RINGFOLD_DIRECT_MAX_BYTES, RINGFOLD_HIERARCHICAL_ALLREDUCE, then the model.
// Results are bitwise identical on every rank and from run to run for every algorithm: each
// element is folded in a fixed order and the folded value is what every rank receives.
// preScale multiplies each rank's own contribution (rounded to dtype) before it is folded.
// With one rank the result is sendbuf scaled by preScale, then by the final factor.
#pragma once

#include <cstddef>

#include "collectives/allreduce_model.h"
#include "collectives/allreduce_plan.h"
#include "collectives/communicator.h"
#include "common/dtype.h"
#include "reduce/reducer.h"

namespace ringfold {

struct AllreduceOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;   // each rank's input is multiplied by this before reduction
  double postScale = 1.0;  // the result is multiplied by this (kAvg also divides by size)
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // kAuto: the communicator's chooser;
                                                             // kHierarchical on a job it does not fit: ring
  Reducer* reducer = nullptr;  // does every reduce and scale of this call; null: comm.reducer()
};
void allreduce(Communicator& comm, const AllreduceOptions& opts);

// The algorithm kAuto resolves to for `bytes` on this communicator.
AllreduceAlgorithm chooseAllreduceAlgorithm(Communicator& comm, size_t bytes);

// What allreduce() runs when asked for `requested` on `bytes`: the chooser's pick for kAuto;
// kHierarchical with its best algorithm among hosts (the ring when the job does not fit it);
// a flat algorithm as asked, with the model's tree segment.
coll::AllreduceChoice resolveAllreduce(Communicator& comm, AllreduceAlgorithm requested, size_t bytes);

}  // namespace ringfold
