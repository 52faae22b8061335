// The shm backend with many ranks on one host (ctest ShmManyPeers.*, label load).
//
// Every pair of same-host ranks gets two rings (one per direction), 1 MiB each by default, and
// they used to be populated at mapping: a full mesh of n ranks took n(n-1) MiB at start-up
// (64 ranks: 4 GiB; 256 ranks: 64 GiB, more than the machine), although a collective touches
// few of them. Here 40 ranks (threads of this process, default ring sizes) join by shm and pass
// a message around the ring: the rings this process maps must stay far below what populating
// them would take, and the messages must arrive intact.
//
// A rank with more than 16 peers sleeps on its doorbell alone (a ppoll over every peer's socket
// on each sleep took a third of the CPU at 256 ranks); a peer that leaves must still fail what
// waits on it, through progress()'s periodic look at the sockets, not at the timeout.
#include <chrono>
#include <thread>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/memory_region.h"
#include "transport/shm/device.h"
#include "transport/tcp_test_util.h"

namespace ringfold::test {
namespace {

using namespace std::chrono_literals;

// This process's resident shared memory (VmRSS's RssShmem), in KiB.
long rssShmemKib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "RssShmem:") {
      in >> value;
      return value;
    }
    std::getline(in, key);
  }
  return -1;
}

TEST(ShmManyPeers, RingsOfALargeMeshAreNotAllTakenAtStart) {
  EnvGuard env{{"RINGFOLD_SHM_CMA", "off"}};
  constexpr int kRanks = 40;
  constexpr size_t kBytes = 100000;
  std::vector<long> afterConnect(kRanks, 0);
  const long before = rssShmemKib();
  ASSERT_GE(before, 0) << "no RssShmem in /proc/self/status";
  RankThreads how;
  how.device = [](int) { return transport::shm::createDevice(); };
  auto errors = runRanks(
      kRanks,
      [&](Rank& me) {
        afterConnect[me.rank] = rssShmemKib();
        const int next = (me.rank + 1) % me.size, prev = (me.rank + me.size - 1) % me.size;
        std::vector<uint8_t> out = patterned(me.rank, kBytes), in(kBytes);
        transport::PlainMemoryRegion o(out.data(), kBytes), i(in.data(), kBytes);
        auto s = me.to(next).isend(o, 0, kBytes, 7);
        auto r = me.to(prev).irecv(i, 0, kBytes, 7);
        s->wait(20s);
        r->wait(20s);
        if (firstWrong(in, prev, kBytes) != -1) RF_THROW(Error, "rank ", me.rank, ": wrong data from rank ", prev);
      },
      how);
  expectAllOk(errors);
  // Populated, the 40 x 39 rings (each mapped by both of its ranks, here in one process) would be
  // about 3 GiB; lazily, a few pages each.
  long most = 0;
  for (long k : afterConnect) most = std::max(most, k);
  EXPECT_LT(most - before, 256L << 10) << "RssShmem grew by " << (most - before) << " KiB while " << kRanks
                                        << " ranks joined by shm";
}

TEST(ShmManyPeers, APeerThatLeavesIsSeenWithoutWatchingSocketsAsleep) {
  EnvGuard env{{"RINGFOLD_SHM_CMA", "off"}};
  constexpr int kRanks = 20;  // 19 peers: more than a sleeping rank watches
  std::string error;
  bool peerNamed = false;
  RankThreads how;
  how.device = [](int) { return transport::shm::createDevice(); };
  auto errors = runRanks(
      kRanks,
      [&](Rank& me) {
        if (me.rank == kRanks - 1) return;  // leaves at once: its device and sockets close
        if (me.rank != 0) {
          std::this_thread::sleep_for(2s);
          return;
        }
        std::vector<uint8_t> in(64);
        transport::PlainMemoryRegion r(in.data(), in.size());
        try {
          me.to(kRanks - 1).irecv(r, 0, in.size(), 3)->wait(30s);
          error = "the receive from a peer that left completed";
        } catch (const IoError& e) {
          error = e.what();
          peerNamed = e.peerRank() == kRanks - 1;
        } catch (const std::exception& e) {
          error = e.what();
        }
      },
      how);
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(errors[r], nullptr) << describe(errors[r]);
  EXPECT_TRUE(peerNamed) << error;
  EXPECT_EQ(error.find("timed out"), std::string::npos) << error;
}

}  // namespace
}  // namespace ringfold::test
