// barrier: dissemination, empty messages (barrier.h).
#include "collectives/barrier.h"

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

void barrier(Communicator& comm) {
  coll::run(comm, "barrier", [&] {
    const int n = comm.size(), r = comm.rank();
    const coll::Call call = coll::begin(comm, {.kind = coll::Kind::kBarrier});
    if (n == 1) return;
    const int rounds = sched::disseminationRounds(n);
    coll::Flight flight(comm, 1, rounds);
    auto& empty = flight.region(nullptr, 0);
    for (int k = 0, reach = 1; k < rounds; ++k, reach *= 2) {
      const uint64_t tag = call.tag(k);
      flight.postRecv(0, sched::mod(r - reach, n), empty, 0, 0, tag, call.check);
      flight.postSend(sched::mod(r + reach, n), empty, 0, 0, tag, call.check);
      flight.waitRecv(0);
    }
    flight.waitAllSends();
  });
}

}  // namespace ringfold
