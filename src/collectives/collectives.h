// The collectives, one Options struct and one free function each, over a Communicator.
//
// Common rules
//   * Counts are in elements of `dtype`. Count 0 is valid and moves nothing (but still checks
//     that every rank agrees).
//   * In place: allreduce/broadcast when sendbuf == recvbuf; reduce-scatter when
//     recvbuf == sendbuf + rank*recvCount; allgather when sendbuf == recvbuf + rank's offset.
//     These are NCCL's rules.
//   * Results are bitwise identical on every rank and from run to run for the same inputs,
//     rank count and algorithm.
//   * A rank whose count, dtype, op or root differs from the others makes every rank throw
//     MismatchError naming the collective and the differing values; a dead or silent peer makes
//     every rank throw IoError within the communicator's timeout. Neither hangs nor writes past
//     the caller's buffers.
//   * Reducing collectives accept every dtype but kBool; copying ones accept kBool too.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

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
};
void allreduce(Communicator& comm, const AllreduceOptions& opts);

// recvbuf gets block `rank` (recvCount elements) of the reduction of every rank's sendbuf,
// which holds size*recvCount elements.
struct ReduceScatterOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t recvCount = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;
  double postScale = 1.0;
};
void reduceScatter(Communicator& comm, const ReduceScatterOptions& opts);

// Every rank contributes sendCount elements; recvbuf gets size*sendCount, in rank order.
struct AllgatherOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t sendCount = 0;
  DataType dtype = DataType::kFloat32;
};
void allgather(Communicator& comm, const AllgatherOptions& opts);

// Per-rank sizes: rank r contributes recvCounts[r] elements, placed at the sum of the counts
// before it. Every rank passes the same recvCounts.
struct AllgathervOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  std::vector<size_t> recvCounts;
  DataType dtype = DataType::kFloat32;
};
void allgatherv(Communicator& comm, const AllgathervOptions& opts);

// root's sendbuf is copied to every rank's recvbuf (sendbuf is ignored on other ranks).
struct BroadcastOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};
void broadcast(Communicator& comm, const BroadcastOptions& opts);

// sendbuf holds one block per destination rank, sendCounts[r] elements for rank r, in rank
// order; recvbuf gets one block per source rank, recvCounts[r] elements from rank r. In place
// (sendbuf == recvbuf) requires sendCounts == recvCounts.
struct AlltoallOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  std::vector<size_t> sendCounts;
  std::vector<size_t> recvCounts;
  DataType dtype = DataType::kFloat32;
};
void alltoall(Communicator& comm, const AlltoallOptions& opts);
// Tells every rank how much it will receive: returns recvCounts, where recvCounts[r] is rank
// r's sendCounts[this rank].
std::vector<size_t> alltoallExchangeCounts(Communicator& comm, const std::vector<size_t>& sendCounts);

// Returns once every rank has entered the barrier.
void barrier(Communicator& comm);

// Point to point. Messages between a pair are matched in order; count and dtype must agree.
void send(Communicator& comm, const void* buf, size_t count, DataType dtype, int peer);
void recv(Communicator& comm, void* buf, size_t count, DataType dtype, int peer);

}  // namespace ringfold
