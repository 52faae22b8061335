// store_client: a rank program for the launcher tests. Run under `ringfoldrun -np N`, it reads
// its identity with bootstrapFromEnvironment(), connects to the store the launcher hosts, and
// checks that the ranks see each other through it:
//   * every rank sets "rank/<r>" = "<r>:<pid>" and bumps the counter "arrived";
//   * every rank waits for all N "rank/*" keys and checks each value's rank part;
//   * the counter read after a second barrier ("done") must be exactly N.
// Prints "store_client rank R of N ok" and exits 0, or prints the failure and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "rendezvous/bootstrap.h"
#include "rendezvous/tcp_store.h"

int main() {
  using namespace ringfold::rendezvous;
  using namespace std::chrono_literals;
  try {
    BootstrapInfo info = bootstrapFromEnvironment();
    if (info.source != "ringfold") {
      std::fprintf(stderr, "expected the ringfold variables, bootstrap used '%s'\n", info.source.c_str());
      return 1;
    }
    if (info.storeAddr.empty() || info.storePort <= 0 || info.secret.empty()) {
      std::fprintf(stderr, "no store in the environment\n");
      return 1;
    }
    TcpStore store(info.storeAddr, info.storePort, info.secret, 10s);
    const std::string me = std::to_string(info.rank);
    store.setString("rank/" + me, me + ":" + std::to_string(getpid()));
    store.add("arrived", 1);
    for (int r = 0; r < info.size; ++r) {
      std::string v = store.getString("rank/" + std::to_string(r), 10s);
      if (v.substr(0, v.find(':')) != std::to_string(r)) {
        std::fprintf(stderr, "rank/%d holds '%s'\n", r, v.c_str());
        return 1;
      }
    }
    // Seeing every key does not mean every add("arrived") has landed (each rank adds after it
    // sets); the "done" barrier does: a rank joins it only after its own add.
    int64_t done = store.add("done", 1);
    if (done == info.size) store.setString("all-done", "1");
    store.getString("all-done", 10s);
    int64_t arrived = store.add("arrived", 0);
    if (arrived != info.size) {
      std::fprintf(stderr, "arrived counter is %lld, expected %d\n", static_cast<long long>(arrived),
                   info.size);
      return 1;
    }
    std::printf("store_client rank %d of %d ok\n", info.rank, info.size);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_client failed: %s\n", e.what());
    return 1;
  }
}
