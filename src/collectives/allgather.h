// allgather / allgatherv: ring, pipelined in segments; each block is received straight into
// its place in recvbuf and forwarded from there. In place when sendbuf points at this rank's
// block inside recvbuf.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold {

// Every rank contributes sendCount elements; recvbuf gets size*sendCount, in rank order.
struct AllgatherOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t sendCount = 0;
  DataType dtype = DataType::kFloat32;
};
void allgather(Communicator& comm, const AllgatherOptions& opts);

// Per-rank sizes: rank r contributes recvCounts[r] elements, placed at the sum of the counts
// before it. Every rank passes the same recvCounts (zero counts allowed).
struct AllgathervOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  std::vector<size_t> recvCounts;
  DataType dtype = DataType::kFloat32;
};
void allgatherv(Communicator& comm, const AllgathervOptions& opts);

}  // namespace ringfold
