// reduce: the root's recvbuf gets the element-wise reduction of every rank's sendbuf (NCCL's
// ncclReduce). A pipelined chain root+1 -> root+2 -> ... -> root in segments of
// comm.segmentBytes() (sched::ChainReduceSchedule): the head sends its segments, every other
// rank folds acc = received op own and passes the fold on, the root folds into recvbuf with
// postScale (and 1/size for kAvg) applied once, in the last fold. Each link carries the buffer
// once: half an allreduce's traffic. Every rank first sends an empty hello to the next rank,
// so every rank compares its arguments (count, dtype, op, root) with its neighbour's.
//
// Contract
//   * Every element is folded in the order root+1, root+2, ..., root: the result is bitwise the
//     same from run to run (a ring reduce-scatter folds its blocks in that order too). It may
//     differ in the last bits from an allreduce of the same inputs, which folds in another order.
//   * preScale multiplies each rank's own contribution (rounded to dtype) before it is folded.
//   * recvbuf is written on the root only; other ranks ignore it (it may be null there, as in
//     NCCL) and fold in the communicator's scratch. sendbuf is never written (except as the
//     root's recvbuf in place).
//   * In place on the root when sendbuf == recvbuf; any other overlap of the root's buffers is
//     InvalidArgument. One rank: recvbuf = sendbuf scaled by preScale, then the final factor.
//   * kBool is InvalidArgument (not reducible); so are a root outside [0, size), an unknown op
//     or dtype, a null sendbuf (or root's recvbuf) with count > 0.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "reduce/reducer.h"

namespace ringfold {

struct ReduceOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;  // read and written on the root only
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  double preScale = 1.0;   // each rank's input is multiplied by this before reduction
  double postScale = 1.0;  // the result is multiplied by this (kAvg also divides by size)
  Reducer* reducer = nullptr;  // does every reduce and scale of this call; null: comm.reducer()
};
void reduce(Communicator& comm, const ReduceOptions& opts);

}  // namespace ringfold
