// The driver side of the multi-process C ABI tests (c_multiprocess_test.cc, c_fault_test.cc):
// runs `ringfoldrun -np 3 [launcher args] <worker> <scenario> <dir>` under a hard deadline
// (Subprocess::finish kills the job, so a hang fails instead of stalling) and parses the lines
// the ranks print (worker.h: FAIL / MSG / TIME / DONE).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "launcher/subprocess.h"

namespace rftest {

constexpr int kRanks = 3;

struct Job {
  ringfold::launcher::testing::Finished finished;
  std::map<int, std::string> done;                             // rank -> DONE line
  std::vector<std::string> failures;                           // FAIL lines
  std::map<std::string, std::map<int, std::string>> messages;  // key -> rank -> text
  std::map<std::string, std::map<int, double>> times;          // key -> rank -> seconds

  std::string transcript() const { return "stdout:\n" + finished.out + "\nstderr:\n" + finished.err; }
};

inline bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

inline Job runWorkerJob(const std::string& worker, const std::string& scenario, std::vector<std::string> launcherArgs,
                        const std::string& dir, std::chrono::milliseconds deadline) {
  std::vector<std::string> argv = {RINGFOLDRUN_PATH, "-np", std::to_string(kRanks)};
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  argv.insert(argv.end(), {worker, scenario, dir});
  Job job;
  job.finished = ringfold::launcher::testing::run(argv, deadline);
  const std::regex line(R"(\[(\d+)\]<stdout>:(.*))");
  const std::regex keyed(R"((MSG|TIME) (\d+) ([\w.]+): (.*))");
  for (const std::string& l : ringfold::launcher::testing::splitLines(job.finished.out)) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    const int rank = std::stoi(m[1]);
    const std::string body = m[2];
    std::smatch k;
    if (body.rfind("FAIL", 0) == 0) {
      job.failures.push_back(l);
    } else if (body.rfind("DONE", 0) == 0) {
      job.done[rank] = body;
    } else if (std::regex_match(body, k, keyed)) {
      if (k[1] == "MSG") {
        job.messages[k[3]][std::stoi(k[2])] = k[4];
      } else {
        job.times[k[3]][std::stoi(k[2])] = std::stod(k[4]);
      }
    }
  }
  return job;
}

// Every rank finished its scenario with no failed check, and the job exited 0.
inline void expectClean(const Job& job) {
  EXPECT_FALSE(job.finished.timedOut) << job.transcript();
  EXPECT_EQ(job.finished.exitCode, 0) << job.transcript();
  for (const auto& f : job.failures) ADD_FAILURE() << f;
  EXPECT_EQ(job.done.size(), static_cast<size_t>(kRanks)) << job.transcript();
}

// The message `key` was reported by every rank in `ranks`, identically; returns it.
inline std::string sameOnEveryRank(const Job& job, const std::string& key, std::vector<int> ranks = {0, 1, 2}) {
  auto it = job.messages.find(key);
  if (it == job.messages.end()) {
    ADD_FAILURE() << "no rank reported '" << key << "'\n" << job.transcript();
    return "";
  }
  const std::string first = it->second.count(ranks[0]) ? it->second.at(ranks[0]) : "";
  for (int r : ranks) {
    EXPECT_TRUE(it->second.count(r)) << "rank " << r << " did not report '" << key << "'";
    if (it->second.count(r)) {
      EXPECT_EQ(it->second.at(r), first) << key << ": rank " << r << " differs";
    }
  }
  return first;
}

// The duration `key` that `rank` reported (-1, and a failure, when it reported none).
inline double timeOf(const Job& job, const std::string& key, int rank) {
  auto it = job.times.find(key);
  if (it == job.times.end() || !it->second.count(rank)) {
    ADD_FAILURE() << "rank " << rank << " reported no time '" << key << "'\n" << job.transcript();
    return -1;
  }
  return it->second.at(rank);
}

}  // namespace rftest
