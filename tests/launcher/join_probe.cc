// join_probe: a rank program for start-up measurements. Under ringfoldrun it joins the
// communicator (Communicator::fromEnvironment: store, then the full TCP mesh), passes one
// barrier, and rank 0 prints how long after the launch that was:
//
//   join_probe: 8 ranks joined the communicator 0.612 s after launch (rank 0 joined at 0.598 s)
//
// The launch time comes from RINGFOLD_PROBE_T0_NS (CLOCK_REALTIME nanoseconds, set by whoever
// starts ringfoldrun and passed to remote ranks with -x); every host of an emulated cluster
// shares this machine's clock. With --store-only it skips the mesh: it connects to the store,
// adds itself to a counter, and waits until all ranks have (a rendezvous of many processes
// without N^2 TCP connections). Exits 0 on success, 1 with the error otherwise.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "collectives/barrier.h"
#include "collectives/communicator.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/tcp_store.h"

namespace {

double secondsSinceLaunch() {
  const char* t0 = std::getenv("RINGFOLD_PROBE_T0_NS");
  if (t0 == nullptr) return -1;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  long long now = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  return static_cast<double>(now - std::atoll(t0)) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const bool storeOnly = argc > 1 && std::strcmp(argv[1], "--store-only") == 0;
  try {
    int rank = 0, size = 1;
    double joined = 0;
    if (storeOnly) {
      auto info = ringfold::rendezvous::bootstrapFromEnvironment();
      rank = info.rank;
      size = info.size;
      ringfold::rendezvous::TcpStore store(info.storeAddr, info.storePort, info.secret, 60s);
      if (store.add("probe/arrived", 1) == size) store.setString("probe/all", "1");
      joined = secondsSinceLaunch();
      store.getString("probe/all", 60s);
    } else {
      auto comm = ringfold::Communicator::fromEnvironment();
      rank = comm->rank();
      size = comm->size();
      joined = secondsSinceLaunch();
      ringfold::barrier(*comm);
    }
    if (rank == 0) {
      std::printf("join_probe: %d ranks joined the %s %.3f s after launch (rank 0 joined at %.3f s)\n",
                  size, storeOnly ? "store" : "communicator", secondsSinceLaunch(), joined);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "join_probe failed: %s\n", e.what());
    return 1;
  }
}
