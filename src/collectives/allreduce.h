// allreduce: every rank's recvbuf gets the element-wise reduction of every rank's sendbuf.
//
// Algorithms
// Each algorithm is a schedule (collective_schedules.h) run by the executor (executor.h); this
// file's allreduce() checks the arguments and picks one (allreduce.cc).
//   ring   : reduce-scatter then allgather around the ring (ring.cc), pipelined in segments
//            of comm.segmentBytes(): receives are posted several segments ahead, each segment is
//            folded straight from the receive buffer into recvbuf (out of place, the first fold
//            reads sendbuf directly, so there is no separate copy pass), and it is sent on as
//            soon as it is folded. The owner of each chunk applies postScale (and 1/size for
//            kAvg) once, before the allgather, so every rank ends with the same bits. A buffer
//            of more than n x RINGFOLD_RING_CHUNK_BYTES goes in rounds of that size, each a
//            whole ring (sched::ringRoundElems), so its data is forwarded while still in cache.
//   direct : (direct.cc) one exchange: every rank sends its whole buffer to every other rank and folds
//            the n contributions in rank order 0..n-1. Pipelined: the buffers travel in about
//            four segments, and each segment is folded as soon as every peer's copy of it has
//            arrived. One round trip at 2 ranks; for small messages.
//   auto   : RINGFOLD_ALGO, else direct up to RINGFOLD_DIRECT_MAX_BYTES, else up to
//            sched::directMaxBytes (the cost model's crossover: ~195 KiB at 2 ranks), else ring.
// preScale multiplies each rank's own contribution (rounded to dtype) before it is folded.
// With one rank the result is sendbuf scaled by preScale, then by the final factor.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "reduce/reducer.h"

namespace ringfold {

enum class AllreduceAlgorithm { kAuto, kRing, kDirect };

struct AllreduceOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;   // each rank's input is multiplied by this before reduction
  double postScale = 1.0;  // the result is multiplied by this (kAvg also divides by size)
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // kAuto: RINGFOLD_ALGO, then model
  Reducer* reducer = nullptr;  // does every reduce and scale of this call; null: comm.reducer()
};
void allreduce(Communicator& comm, const AllreduceOptions& opts);

// The algorithm kAuto resolves to for `bytes` on this communicator.
AllreduceAlgorithm chooseAllreduceAlgorithm(const Communicator& comm, size_t bytes);

}  // namespace ringfold
