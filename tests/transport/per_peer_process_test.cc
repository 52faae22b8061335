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
#include "per_peer_test_util.h"
#include "tcp_test_util.h"
#include "transport/per_peer/device.h"

namespace ringfold::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRanks = 4;

struct Report {
  std::string line;
  Clock::time_point at;
  bool done = false;
};

// Four forked ranks of one job; body(comm, say) runs in each.
class Job {
 public:
  using Body = std::function<void(Communicator&, const std::function<void(const std::string&)>&)>;
  Job(const Body& body, const std::string& timeout) {
    const int port = freePort();
    for (int r = 0; r < kRanks; ++r) {
      int fds[2];
      if (pipe(fds) != 0) std::abort();
      pid_t pid = fork();
      if (pid < 0) std::abort();
      if (pid == 0) {
        close(fds[0]);
        const int out = fds[1];
        auto say = [out](const std::string& line) {
          std::string l = line + "\n";
          (void)!write(out, l.data(), l.size());
        };
        setForkedRankEnvironment(r, kRanks, r % 2, 2, port);
        unsetenv("RINGFOLD_ALGO");
        setenv("RINGFOLD_LOCAL_TRANSPORT", "unix", 1);
        setenv("RINGFOLD_TEST_HOST_ID", r < 2 ? "A" : "B", 1);
        setenv("RINGFOLD_TIMEOUT", timeout.c_str(), 1);
        std::unique_ptr<Communicator> comm;  // lingers with its sockets open (see below)
        try {
          comm = Communicator::fromEnvironment();
          comm->setSegmentBytes(64 << 10);
          body(*comm, say);
        } catch (const std::exception& e) {
          say(std::string("error ") + e.what());
        }
        std::this_thread::sleep_for(std::chrono::seconds(30));  // the parent, not a closing socket, ends it
        _exit(0);
      }
      close(fds[1]);
      pids_[r] = pid;
      fds_[r] = fds[0];
    }
  }
  ~Job() {
    for (int r = 0; r < kRanks; ++r) {
      kill(pids_[r], SIGKILL);
      waitpid(pids_[r], nullptr, 0);
      close(fds_[r]);
    }
  }
  pid_t pid(int r) const { return pids_[r]; }

  // Reads one line from each rank in `ranks` until `timeout`.
  void collect(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r : ranks) {
        if (!reports[r].done) {
          fds.push_back({fds_[r], POLLIN, 0});
          who.push_back(r);
        }
      }
      if (fds.empty() || Clock::now() >= deadline) return;
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (poll(fds.data(), fds.size(), std::max(left, 1)) <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Report& rep = reports[who[i]];
        char buf[4096];
        const ssize_t n = read(fds_[who[i]], buf, sizeof(buf));
        if (n > 0) rep.line.append(buf, n);
        if (n <= 0 || rep.line.find('\n') != std::string::npos) {
          rep.done = true;
          rep.at = Clock::now();
          if (auto nl = rep.line.find('\n'); nl != std::string::npos) rep.line.resize(nl);
        }
      }
    }
  }

  Report reports[kRanks];

 private:
  pid_t pids_[kRanks] = {};
  int fds_[kRanks] = {};
};

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

// Every rank runs allreduces until one fails; rank `victim` says when it is running, then the
// parent kills or freezes it. Survivors report the error's text.
void victimScenario(int victim, bool freeze, AllreduceAlgorithm algo) {
  Job job(
      [victim, algo](Communicator& comm, auto& say) {
        std::vector<float> buf(1 << 20, 1.0f);
        for (int iter = 0;; ++iter) {
          AllreduceOptions o;
          o.sendbuf = o.recvbuf = buf.data();
          o.count = algo == AllreduceAlgorithm::kDirect ? 4096 : buf.size();
          o.algorithm = algo;
          try {
            allreduce(comm, o);
          } catch (const Error& e) {
            return say(std::string("error ") + e.what());
          }
          if (comm.rank() == victim && iter == 5) say("running");
        }
      },
      "3");
  job.collect({victim}, 30s);
  ASSERT_EQ(job.reports[victim].line, "running");
  std::this_thread::sleep_for(100ms);
  const auto hit = Clock::now();
  kill(job.pid(victim), freeze ? SIGSTOP : SIGKILL);
  std::vector<int> survivors;
  for (int r = 0; r < kRanks; ++r) {
    if (r != victim) survivors.push_back(r);
  }
  job.collect(survivors, 20s);
  const std::string pid = std::to_string(job.pid(victim));
  const std::string who = "rank " + std::to_string(victim);
  for (int r : survivors) {
    const Report& rep = job.reports[r];
    ASSERT_TRUE(rep.done) << "rank " << r << " did not notice within 20 s";
    EXPECT_EQ(rep.line.rfind("error ", 0), 0u) << "rank " << r << ": " << rep.line;
    EXPECT_NE(rep.line.find(who), std::string::npos) << "rank " << r << ": " << rep.line;
    if (freeze) {
      EXPECT_NE(rep.line.find("timed out"), std::string::npos) << "rank " << r << ": " << rep.line;
      EXPECT_NE(rep.line.find("the process of " + who + " (pid " + pid + ") is stopped"), std::string::npos)
          << "rank " << r << ": " << rep.line;
    } else {
      EXPECT_NE(rep.line.find("the process of " + who + " (pid " + pid + ") exited"), std::string::npos)
          << "rank " << r << ": " << rep.line;
    }
    const double after = std::chrono::duration<double>(rep.at - hit).count();
    EXPECT_LT(after, 3.0 + 3.0) << "rank " << r << " took " << after << " s (RINGFOLD_TIMEOUT=3)";
    std::cout << "rank " << r << " after " << (freeze ? "SIGSTOP" : "SIGKILL") << " of " << who << " (" << after
              << " s): " << rep.line << "\n";
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

// Rank 1 aborts its unix_uring device only (so only rank 0 hears it directly), then freezes.
// Ranks 2 and 3 share only tcp_uring with rank 1: they get its text because rank 0 spreads it
// to tcp_uring, and rank 3 (waiting on rank 2 over unix_uring) because its own device spreads
// it from tcp_uring to unix_uring; without that they would time out on the frozen rank 1.
TEST_F(PerPeerProcesses, AbortOnOneBackendReachesRanksOnlyOnTheOther) {
  Job job(
      [](Communicator& comm, auto& say) {
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

}  // namespace
}  // namespace ringfold::test
