// The C ABI with ranks as processes: the built ringfoldrun starts 3 bindings_c_worker processes
// on loopback, each calling only ringfold.h (scenarios in c_worker.cc). This test reads what the
// ranks print (FAIL / MSG / DONE lines, see c_worker.cc) and what the launcher reports. Every
// job has a hard deadline (Subprocess::finish kills it), so a hang fails instead of stalling.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "launcher/subprocess.h"
#include "tests/bindings/worker_job.h"

namespace {

using namespace std::chrono_literals;
using namespace rftest;
using ringfold::launcher::testing::TempDir;

Job runWorkers(const std::string& scenario, std::vector<std::string> launcherArgs, const std::string& dir,
               std::chrono::milliseconds deadline = 90s) {
  return runWorkerJob(WORKER_PATH, scenario, std::move(launcherArgs), dir, deadline);
}

TEST(CApiMultiprocess, CollectivesAcrossThreeRanks) {
  TempDir dir;
  const Job job = runWorkers("collectives", {}, dir.path());
  expectClean(job);
  // Disagreements: the same message on every rank, naming the tensor and the ranks.
  const std::string shape = sameOnEveryRank(job, "shape");
  for (const char* part : {"'mismatch.shape'", "rank 0: [2]", "rank 1: [3]", "rank 2: [4]"}) {
    EXPECT_TRUE(contains(shape, part)) << shape << " lacks " << part;
  }
  const std::string dtype = sameOnEveryRank(job, "dtype");
  for (const char* part : {"'mismatch.dtype'", "ranks 0, 1: float", "rank 2: int32"}) {
    EXPECT_TRUE(contains(dtype, part)) << dtype << " lacks " << part;
  }
  const std::string root = sameOnEveryRank(job, "root");
  EXPECT_TRUE(contains(root, "'bad.root'") && contains(root, "root rank 5")) << root;
  const std::string splits = sameOnEveryRank(job, "splits");
  EXPECT_TRUE(contains(splits, "'bad.splits'") && contains(splits, "rank 1")) << splits;
}

TEST(CApiMultiprocess, StaticProcessSetsFromInit) {
  TempDir dir;
  expectClean(runWorkers("static_sets", {}, dir.path()));
}

TEST(CApiMultiprocess, DynamicProcessSetsAddAndRemove) {
  TempDir dir;  // through Horovod's name for the switch
  expectClean(runWorkers("dynamic_sets", {"-x", "HOROVOD_DYNAMIC_PROCESS_SETS=1"}, dir.path()));
}

TEST(CApiMultiprocess, JoinWithUnevenWorkReportsTheLastRank) {
  TempDir dir;
  expectClean(runWorkers("join", {}, dir.path()));
}

// ringfold_cancel of an operation only one rank submitted completes it with ABORTED "cancelled".
TEST(CApiMultiprocess, CancelOfAnOperationOnlyThisRankSubmitted) {
  TempDir dir;
  expectClean(runWorkers("cancel", {}, dir.path()));
}

TEST(CApiMultiprocess, ShutdownOnOneRankStopsEveryRank) {
  TempDir dir;
  expectClean(runWorkers("shutdown_one", {}, dir.path()));
}

// Elastic Horovod re-initializes inside one job (shutdown(); init()): each incarnation meets
// under its own store keys, so the second init never dials the first one's dead endpoints.
// Alltoall splits wrong by the caller's own arguments (a split beyond the first dimension, a sum
// beyond it or beyond 64 bits) fail at once with INVALID_ARGUMENT on every rank, naming the
// argument, instead of an overflowed sum in a later error.
TEST(CApiMultiprocess, AlltoallSplitCountsAreCheckedAtOnce) {
  TempDir dir;
  const Job job = runWorkers("bad_counts", {}, dir.path());
  expectClean(job);
  EXPECT_FALSE(contains(job.finished.out, "-9223372036854775807")) << job.transcript();
}

TEST(CApiMultiprocess, ReinitInTheSameJob) {
  TempDir dir;
  expectClean(runWorkers("reinit", {"-x", "RINGFOLD_START_TIMEOUT=20"}, dir.path()));
}

// Re-init with a different rank layout: 3 ranks, then 2.
TEST(CApiMultiprocess, ReinitWithAnotherRankLayout) {
  TempDir dir;
  expectClean(runWorkers("relayout", {"-x", "RINGFOLD_START_TIMEOUT=20"}, dir.path()));
}

// A tensor rank 2 submits too late: a warning, then the same failure on every rank; rank 0's
// timeline (valid JSON) shows the negotiation with each rank's readiness.
TEST(CApiMultiprocess, StallWarningShutdownAndTimeline) {
  TempDir dir;
  const std::string timeline = dir.path() + "/timeline.json";
  const Job job = runWorkers("stall",
                             {"-x", "RINGFOLD_STALL_CHECK_TIME=0.3", "-x", "RINGFOLD_STALL_SHUTDOWN_TIME=1", "-x",
                              "RINGFOLD_TIMELINE=" + timeline},
                             dir.path());
  expectClean(job);
  const std::string why = sameOnEveryRank(job, "stall");
  EXPECT_TRUE(contains(why, "'lonely' stalled: rank 2 never submitted it")) << why;
  EXPECT_TRUE(contains(job.finished.err, "Missing ranks:")) << job.transcript();
  EXPECT_EQ(std::system(("python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + timeline).c_str()), 0);
  std::ifstream in(timeline);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "NEGOTIATE_ALLREDUCE")) << text.substr(0, 500);
  EXPECT_TRUE(contains(text, "\"name\":\"2\"")) << "no readiness tick for rank 2";
  EXPECT_TRUE(contains(text, "TCP_URING_ALLREDUCE"));
}

// Reads "<status> <seconds> <message>" that a surviving rank wrote.
struct Outcome {
  int status = -1;
  double seconds = -1;
  std::string message;
};
Outcome outcome(const std::string& dir, int rank) {
  std::ifstream in(dir + "/result." + std::to_string(rank));
  Outcome o;
  in >> o.status >> o.seconds;
  std::getline(in, o.message);
  return o;
}

// Rank 1 calls _exit(1) mid-run: the others' pending allreduce fails with ABORTED (3) within the
// bound, naming rank 1, instead of hanging; the launcher exits with rank 1's status.
TEST(CApiMultiprocess, KilledRankAbortsTheOthers) {
  TempDir dir;
  const Job job = runWorkers("killed", {"--grace-period", "60", "-x", "RINGFOLD_TIMEOUT=10"}, dir.path());
  EXPECT_FALSE(job.finished.timedOut) << job.transcript();
  EXPECT_EQ(job.finished.exitCode, 1) << job.transcript();
  EXPECT_TRUE(contains(job.finished.err, "rank 1")) << job.transcript();
  for (const auto& f : job.failures) ADD_FAILURE() << f;
  for (int r : {0, 2}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(job.done.count(r)) << job.transcript();
    const Outcome o = outcome(dir.path(), r);
    EXPECT_EQ(o.status, 3) << o.message;  // RINGFOLD_ABORTED
    EXPECT_GE(o.seconds, 0.0);
    EXPECT_LT(o.seconds, 25.0) << "failure detected only after " << o.seconds << " s";
    EXPECT_TRUE(contains(o.message, "rank 1")) << o.message;
  }
}

// Rank 1 stops (SIGSTOP) with its sockets open: only the timeout can tell. The others fail with
// ABORTED after about RINGFOLD_TIMEOUT, then rank 0 kills it.
TEST(CApiMultiprocess, SilentRankTimesOutWithAborted) {
  TempDir dir;
  const Job job = runWorkers("stopped", {"--grace-period", "60", "-x", "RINGFOLD_TIMEOUT=5"}, dir.path());
  EXPECT_FALSE(job.finished.timedOut) << job.transcript();
  EXPECT_NE(job.finished.exitCode, 0) << job.transcript();  // rank 1 was SIGKILLed
  for (const auto& f : job.failures) ADD_FAILURE() << f;
  for (int r : {0, 2}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(job.done.count(r)) << job.transcript();
    const Outcome o = outcome(dir.path(), r);
    EXPECT_EQ(o.status, 3) << o.message;  // RINGFOLD_ABORTED
    EXPECT_GE(o.seconds, 4.0) << o.message;
    EXPECT_LT(o.seconds, 30.0) << o.message;
    // Whichever survivor times out first, and on whichever rank, rank 1 is the one named: when
    // rank 0 times out on its ring predecessor rank 2, itself stuck behind rank 1, rank 2's
    // WAITING notice has told it so (transport/tcp_uring/frame.h).
    EXPECT_TRUE(contains(o.message, "rank 1 sent nothing")) << o.message;
    // Measured from the last bytes rank 1 sent (just before this allreduce began), by the rank
    // that waited on it: not from start-up on a rank that never hears from rank 1 directly.
    const auto at = o.message.find(" for ", o.message.find("rank 1 sent nothing"));
    ASSERT_NE(at, std::string::npos) << o.message;
    EXPECT_LT(std::atof(o.message.c_str() + at + 5), o.seconds + 1.0) << o.message;
    // Same host: the process is looked up.
    EXPECT_TRUE(contains(o.message, ") is stopped (SIGSTOP")) << o.message;
  }
}

}  // namespace
