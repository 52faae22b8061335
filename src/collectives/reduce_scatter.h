// reduce-scatter: recvbuf gets block `rank` (recvCount elements) of the reduction of every
// rank's sendbuf, which holds size*recvCount elements. Ring (sched::RingReduceScatterSchedule
// run by the executor), pipelined like allreduce's first half: block c is folded in the order
// c+1, c+2, ..., c (schedules.h), and its owner applies postScale (and 1/size for kAvg) once.
// In place when recvbuf == sendbuf + rank*recvCount.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "reduce/reducer.h"

namespace ringfold {

struct ReduceScatterOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t recvCount = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;
  double postScale = 1.0;
  Reducer* reducer = nullptr;  // does every reduce and scale of this call; null: comm.reducer()
};
void reduceScatter(Communicator& comm, const ReduceScatterOptions& opts);

}  // namespace ringfold
