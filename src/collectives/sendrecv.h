// Point to point. Messages from one rank to another are matched in order; count and dtype must
// agree (a mismatch fails both sides). Their tags are apart from the collectives' and they take
// no sequence number, so they may be interleaved with collectives freely. Both calls block
// until their message has left / arrived (at most the communicator's timeout). A failure
// (mismatch, timeout, bad argument) poisons the communicator like a failed collective.
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold {

void send(Communicator& comm, const void* buf, size_t count, DataType dtype, int peer);
void recv(Communicator& comm, void* buf, size_t count, DataType dtype, int peer);

}  // namespace ringfold
