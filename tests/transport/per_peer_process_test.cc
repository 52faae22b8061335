// per_peer with ranks as forked processes started like a real job (Communicator::fromEnvironment
// with torchrun's variables, rank 0 hosting the TCP store). RINGFOLD_TEST_HOST_ID makes ranks
// {0,1} and {2,3} look like two hosts, so one communicator joins same-"host" pairs through
// unix_uring and the others through tcp_uring: collectives give correct results; a killed or
// frozen rank, whichever backend links it to each survivor, gives every survivor an error
// naming it (the single-backend tests' texts) within bounded time; and an abort sent on one
// backend reaches the ranks that share only the other backend with the aborting rank.
// Each child reports one line through a pipe; every wait is bounded.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "collectives/collectives.h"
#include "forked_job.h"
#include "per_peer_test_util.h"
#include "tcp_test_util.h"
#include "transport/per_peer/device.h"

namespace ringfold::test {
namespace {

class PerPeerProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (uringUnavailable(why)) GTEST_SKIP() << "io_uring unavailable: " << why;
  }
};

TEST_F(PerPeerProcesses, CollectivesOverUnixAndTcp) {
  Job job(
      [](Communicator& comm, auto& say) {
        const std::string name = comm.device().name();
        const int wrong = checkCollectives(comm) + checkCollectives(comm, 3 << 20);
        say(wrong == 0 ? "ok " + name : "wrong " + std::to_string(wrong));
      },
      "20");
  job.collect({0, 1, 2, 3}, 60s);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(job.reports[r].line, "ok per_peer(unix_uring+tcp_uring)") << "rank " << r;
  }
}

// Rank 1 shares unix_uring with rank 0 and tcp_uring with ranks 2 and 3; rank 2 unix_uring with
// rank 3 and tcp_uring with ranks 0 and 1. In the ring (0 -> 1 -> 2 -> 3 -> 0) some survivors
// wait on another survivor, across backends, when the victim stops: they must follow that one's
// WAITING notice (one liveness monitor for every backend) to the frozen rank. In the direct
// allreduce every survivor waits on the victim itself.
TEST_F(PerPeerProcesses, KilledRankIsNamedRing) { victimScenario(1, false, AllreduceAlgorithm::kRing); }
TEST_F(PerPeerProcesses, KilledRankIsNamedDirect) { victimScenario(2, false, AllreduceAlgorithm::kDirect); }
TEST_F(PerPeerProcesses, FrozenRankIsNamedRing) { victimScenario(2, true, AllreduceAlgorithm::kRing); }
TEST_F(PerPeerProcesses, FrozenRankIsNamedDirect) { victimScenario(1, true, AllreduceAlgorithm::kDirect); }
// Hierarchical: rank 2 freezes; rank 0 waits on it among the hosts while rank 1 waits on rank 0 in
// their host's group. Rank 0's WAITING notice reaches rank 1 through the job's communicator (the
// groups relay their notices to the one they run inside), so rank 1 names rank 2, not rank 0
// (the fault matrix's cell 117).
TEST_F(PerPeerProcesses, FrozenRankIsNamedHierarchical) { victimScenario(2, true, AllreduceAlgorithm::kHierarchical); }
TEST_F(PerPeerProcesses, FrozenRankIsNamedHierarchicalRankZero) {
  victimScenario(0, true, AllreduceAlgorithm::kHierarchical);
}

// Rank 1 aborts its unix_uring device only (so only rank 0 hears it directly), then freezes.
// Ranks 2 and 3 share only tcp_uring with rank 1: they get its text because rank 0 spreads it
// to tcp_uring, and rank 3 (waiting on rank 2 over unix_uring) because its own device spreads
// it from tcp_uring to unix_uring; without that they would time out on the frozen rank 1.
void abortScenario(AllreduceAlgorithm algorithm) {
  Job job(
      [algorithm](Communicator& comm, auto& say) {
        std::vector<float> buf(1 << 18, 1.0f);
        for (int iter = 0;; ++iter) {
          if (comm.rank() == 1 && iter == 5) {
            auto& device = dynamic_cast<transport::per_peer::Device&>(comm.device());
            for (size_t i = 0; i < device.childCount(); ++i) {
              if (device.label(i) == "unix_uring") {
                device.child(i).abort(transport::ErrorKind::kIo, "rank 1 gave up on purpose");
              }
            }
            say("aborted");
            raise(SIGSTOP);
          }
          AllreduceOptions o;
          o.sendbuf = o.recvbuf = buf.data();
          o.count = buf.size();
          o.algorithm = algorithm;
          try {
            allreduce(comm, o);
          } catch (const Error& e) {
            return say(std::string("error ") + e.what());
          }
        }
      },
      "10");
  job.collect({1}, 30s);
  ASSERT_EQ(job.reports[1].line, "aborted");
  const auto hit = job.reports[1].at;
  job.collect({0, 2, 3}, 20s);
  for (int r : {0, 2, 3}) {
    const Report& rep = job.reports[r];
    ASSERT_TRUE(rep.done) << "rank " << r;
    EXPECT_EQ(rep.line, "error rank 1 gave up on purpose") << "rank " << r;
    EXPECT_LT(std::chrono::duration<double>(rep.at - hit).count(), 5.0) << "rank " << r << " (RINGFOLD_TIMEOUT=10)";
  }
}

TEST_F(PerPeerProcesses, AbortOnOneBackendReachesRanksOnlyOnTheOther) { abortScenario(AllreduceAlgorithm::kAuto); }

// requestAbort() from another thread (ncclCommAbort) while this rank waits inside a phase of a
// hierarchical allreduce, on its host's group: the group's waits see the job communicator's
// request, and every rank that waits fails with its words, not at its timeout. Rank 1 takes
// part in the first allreduce (which builds the groups), then freezes.
TEST_F(PerPeerProcesses, AbortRequestReachesAWaitInsideAHierarchicalPhase) {
  Job job(
      [](Communicator& comm, auto& say) {
        comm.watchAbortRequests();
        std::vector<float> buf(1 << 16, 1.0f);
        AllreduceOptions o;
        o.sendbuf = o.recvbuf = buf.data();
        o.count = buf.size();
        o.algorithm = AllreduceAlgorithm::kHierarchical;
        allreduce(comm, o);
        if (comm.rank() == 1) {
          say("ready");
          raise(SIGSTOP);
        }
        std::thread stopper;
        if (comm.rank() == 0) {
          stopper = std::thread([&comm] {
            std::this_thread::sleep_for(500ms);
            comm.requestAbort("rank 0 was told to stop");
          });
        }
        try {
          allreduce(comm, o);
          say("no error");
        } catch (const Error& e) {
          say(std::string("error ") + e.what());
        }
        if (stopper.joinable()) stopper.join();
      },
      "10");
  job.collect({1}, 30s);
  ASSERT_EQ(job.reports[1].line, "ready");
  const auto start = Clock::now();
  job.collect({0, 2, 3}, 20s);
  for (int r : {0, 2, 3}) {
    const Report& rep = job.reports[r];
    ASSERT_TRUE(rep.done) << "rank " << r;
    EXPECT_NE(rep.line.find("rank 0 was told to stop"), std::string::npos) << "rank " << r << ": " << rep.line;
    EXPECT_LT(std::chrono::duration<double>(rep.at - start).count(), 5.0) << "rank " << r << " (RINGFOLD_TIMEOUT=10)";
  }
}

// The same abort while the survivors wait inside the phases of a hierarchical allreduce, on the
// groups of their host and of their local rank: the job's abort reaches them through those
// groups' followAborts(), with the aborting rank's words.
TEST_F(PerPeerProcesses, AbortReachesRanksInsideHierarchicalPhases) { abortScenario(AllreduceAlgorithm::kHierarchical); }

}  // namespace
}  // namespace ringfold::test
