// The executor: runs any schedule (schedule.h) over a collective's buffers, in the spirit of
// NCCL's primitives. It posts each lane's receives up to the lane's window ahead of the fold
// (into receive slots in the communicator's scratch, or straight into recvbuf), sends this
// rank's own contributions `lead` ahead of the folds (preScaled or copied into their staging
// place first when asked), folds each unit with the call's reducer as the schedule orders it,
// forwards the result, and waits on every request through coll::Flight. A schedule's units are
// folded in lane order; gates hold a receive back until the send that reads its memory is done.
//
// Contract
//   * Operands name the buffers in the schedule's element coordinates: src holds elements from
//     srcShift on, dst from dstShift on (a reduce-scatter's recvbuf is block `rank`).
//   * Own contributions: with preScale != 1 (or copyOwn) an own send first writes its range,
//     scaled (or copied), into its staging place: recvbuf at the same place (stageInDst) or
//     scratch covering stageRange; a unit with stageOwn scales its own range at the fold, into
//     the fold's target when that is recvbuf, else into scratch.
//   * Every reduce and scale goes through `reducer`, with the final scale on a unit's last fold
//     when the unit is `last`; the results are those of the folds in the schedule's order.
//   * Throws what Flight throws (transport errors, timeouts); the caller runs inside coll::run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/communicator.h"
#include "collectives/pipeline.h"
#include "collectives/schedule.h"

namespace ringfold::coll {

struct Operands {
  const std::byte* src = nullptr;
  size_t srcShift = 0;
  size_t srcElems = 0;
  std::byte* dst = nullptr;
  size_t dstShift = 0;
  size_t dstElems = 0;
  size_t elemSize = 1;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // kAvg folds as kSum
  double preScale = 1.0;
  double finalScale = 1.0;
  Reducer* reducer = nullptr;  // needed by schedules that fold or scale
  Call call;
  bool copyOwn = false;     // stage own sends even without preScale
  bool stageInDst = false;  // staging place of own sends: recvbuf (else scratch over stageRange)
  sched::Range stageRange;
};

// The reduction fields of `a` for a call with options `o` (allreduce's, reduce's, reduce-scatter's:
// dtype, op, preScale, postScale, reducer) over `comm`: avg folds as a sum and divides by the
// group's size at the last fold; the communicator's reducer unless the call names one.
template <class Options>
void setReduction(Operands& a, Communicator& comm, const Options& o) {
  a.elemSize = dataTypeSize(o.dtype);
  a.dtype = o.dtype;
  a.op = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
  a.preScale = o.preScale;
  a.finalScale = sched::finalScale(o.op, o.postScale, comm.size());
  a.reducer = o.reducer != nullptr ? o.reducer : &comm.reducer();
}

void execute(Communicator& comm, const sched::Schedule& schedule, const Operands& operands);

// The keys the executor names its sends by (Flight::retireSend): own send i, the forward of unit
// u of a lane, and that unit's second forward (Unit::forwardAlso). The simulator retires by them.
inline uint64_t ownKey(size_t i) { return (uint64_t{1} << 62) | (i + 1); }
inline uint64_t forwardKey(int lane, size_t u) { return (static_cast<uint64_t>(lane + 1) << 48) | (u + 1); }
inline uint64_t forwardAlsoKey(int lane, size_t u) { return forwardKey(lane, u) | (uint64_t{1} << 47); }

// A reduction over one rank: dst = src scaled by preScale, then by finalScale (dstElems).
void reduceLocal(const Operands& operands);

}  // namespace ringfold::coll
