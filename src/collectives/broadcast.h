// broadcast: root's sendbuf is copied to every rank's recvbuf (sendbuf is ignored on other
// ranks). A pipelined chain root -> root+1 -> ... in segments of comm.segmentBytes(); each rank
// forwards a segment as soon as it has it. Every rank first sends an empty hello to the next
// rank, so every rank, the root included, compares its arguments with its neighbour's.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold {

struct BroadcastOptions {
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};
void broadcast(Communicator& comm, const BroadcastOptions& opts);

}  // namespace ringfold
