// alltoall with splits: pairwise exchange. Every receive is posted first, straight into its
// block of recvbuf; rank r then sends to r+1, r+2, ... so that in each round every rank sends
// to a different peer.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold {

// sendbuf holds one block per destination rank, sendCounts[r] elements for rank r, in rank
// order; recvbuf gets one block per source rank, recvCounts[r] elements from rank r. In place
// (sendbuf == recvbuf) requires sendCounts == recvCounts (and costs one copy into scratch).
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

}  // namespace ringfold
