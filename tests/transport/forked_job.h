// A job of four forked ranks started like a real one (Communicator::fromEnvironment with
// torchrun's variables, rank 0 hosting the TCP store), on two pretend hosts (RINGFOLD_TEST_HOST_ID
// A for ranks 0-1, B for 2-3), each child reporting one line through a pipe; and the scenario of
// a rank killed or frozen in the middle of allreduces. Shared by the per_peer and rdma process
// tests. Every wait is bounded.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include "collectives/collectives.h"
#include "per_peer_test_util.h"

namespace ringfold::test {

using namespace std::chrono_literals;
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
  // environment(rank), when given, runs after the defaults (hosts A = ranks 0-1, B = 2-3, Unix
  // sockets between same-host ranks, RINGFOLD_TIMEOUT) and may change any of them.
  Job(const Body& body, const std::string& timeout, const std::function<void(int)>& environment = {}) {
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
        if (environment) environment(r);
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

// The number after the last "rank " in `text` (-1 if none).
inline int lastRankNamed(const std::string& text) {
  int last = -1;
  for (size_t at = text.find("rank "); at != std::string::npos; at = text.find("rank ", at + 5)) {
    size_t i = at + 5;
    if (i < text.size() && text[i] == '(') ++i;
    if (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) last = std::atoi(text.c_str() + i);
  }
  return last;
}

// Every rank runs allreduces until one fails; rank `victim` says when it is running, then the
// parent kills or freezes it. Survivors report the error's text.
// `environment` as Job's. Survivors must also say whether the process exited or is stopped.
inline void victimScenario(int victim, bool freeze, AllreduceAlgorithm algo,
                           const std::function<void(int)>& environment = {}) {
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
      "3", environment);
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
    // ringfoldrun's summary blames the last rank an error names: that must be the victim.
    EXPECT_EQ(lastRankNamed(rep.line), victim) << "rank " << r << ": " << rep.line;
    if (freeze) {
      EXPECT_NE(rep.line.find("timed out"), std::string::npos) << "rank " << r << ": " << rep.line;
      // "the process of rank N", or "of job rank N" when found through another group's notice
      EXPECT_NE(rep.line.find(who + " (pid " + pid + ") is stopped"), std::string::npos)
          << "rank " << r << ": " << rep.line;
    } else {
      // "... (pid P) exited" when a closed connection showed it, "... has exited" after a timeout.
      const std::string process = who + " (pid " + pid + ")";
      EXPECT_NE(rep.line.find(process), std::string::npos) << "rank " << r << ": " << rep.line;
      EXPECT_NE(rep.line.find("exited", rep.line.find(process)), std::string::npos) << "rank " << r << ": " << rep.line;
    }
    const double after = std::chrono::duration<double>(rep.at - hit).count();
    EXPECT_LT(after, 3.0 + 3.0) << "rank " << r << " took " << after << " s (RINGFOLD_TIMEOUT=3)";
    std::cout << "rank " << r << " after " << (freeze ? "SIGSTOP" : "SIGKILL") << " of " << who << " (" << after
              << " s): " << rep.line << "\n";
  }
}

}  // namespace ringfold::test
