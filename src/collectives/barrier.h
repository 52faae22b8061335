// barrier: dissemination with empty messages: in round k rank r sends to r+2^k and waits for
// r-2^k, ceil(log2 n) rounds. No rank leaves before every rank has entered.
#pragma once

#include "collectives/communicator.h"

namespace ringfold {

void barrier(Communicator& comm);

}  // namespace ringfold
