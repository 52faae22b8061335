// Faults that must end in a clear error on every rank, never in a hang: ranks as processes under
// the built ringfoldrun (3 ranks on loopback), each calling only the C ABI (c_fault_worker.cc).
// The driver reads what the ranks print (FAIL / MSG / TIME / DONE lines) and bounds every job
// with a hard deadline (Subprocess::finish kills it).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "launcher/subprocess.h"
#include "tests/bindings/worker_job.h"
#include "tests/support/sanitizers.h"

namespace {

using namespace std::chrono_literals;
using namespace rftest;
using ringfold::launcher::testing::TempDir;

// A rank that stays alive but stops submitting (rank 2 never calls 'step'): after
// RINGFOLD_STALL_SHUTDOWN_TIME every rank gets the error, the idle one too: it logs it while
// not calling ringfold at all, and its next 'step' fails at once with the same message. The
// engine then runs on. (Short settings here; the defaults are in params_test.)
TEST(Faults, RankThatStopsSubmittingFailsEveryRank) {
  TempDir dir;
  const Job job = runWorkerJob(FAULT_WORKER_PATH, "idle",
                               {"-x", "RINGFOLD_STALL_SHUTDOWN_TIME=2", "-x", "RINGFOLD_STALL_CHECK_TIME=1"},
                               dir.path(), 90s);
  expectClean(job);
  const std::string why = sameOnEveryRank(job, "stall");
  EXPECT_TRUE(contains(why, "'step' stalled: rank 2 never submitted it")) << why;
  // The warning before it says what will happen, and when.
  EXPECT_TRUE(contains(job.finished.err, "Missing ranks:\n[0]<stderr>:2: [step]")) << job.transcript();
  EXPECT_TRUE(contains(job.finished.err, "missing ranks after 2 s (RINGFOLD_STALL_SHUTDOWN_TIME) fails on every rank"))
      << job.transcript();
  for (int r : {0, 1}) {
    const double t = timeOf(job, "failed", r);
    EXPECT_GE(t, 1.5) << "rank " << r;
    EXPECT_LT(t, 15.0) << "rank " << r;
  }
  EXPECT_LT(timeOf(job, "logged", 2), 15.0);
  EXPECT_LT(timeOf(job, "call", 2), 1.0) << "the idle rank's call should fail at once";
}

// The out-of-memory cases limit a rank's address space (RLIMIT_AS): under AddressSanitizer its
// allocator and shadow memory fail that limit with an abort, not std::bad_alloc.
#if defined(RF_ASAN_BUILD)
#define SKIP_UNDER_ASAN() \
  GTEST_SKIP() << "AddressSanitizer build: an address-space limit (RLIMIT_AS) aborts it"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

// A rank that runs out of memory for one large operation (RLIMIT_AS on rank 1): that operation
// fails on every rank with a message naming the tensor, its size, "out of memory" and the rank,
// and the engine stays usable everywhere (the worker runs collectives between and after).
TEST(Faults, OutOfMemoryFailsTheOperationOnEveryRankAndTheEngineRunsOn) {
  SKIP_UNDER_ASAN();
  TempDir dir;
  const Job job = runWorkerJob(FAULT_WORKER_PATH, "oom", {"-x", "RINGFOLD_FUSION_TENSOR_MAX_BYTES=0"}, dir.path(), 120s);
  expectClean(job);
  struct Case {
    const char* key;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"reducescatter",
       {"reducescatter 'big.reducescatter' of 512.0 MiB", "out of memory", "rank 1 could not allocate 170.7 MiB"}},
      {"allgather", {"allgather 'big.allgather' of 120.0 MiB", "out of memory", "rank 1 could not allocate 120.0 MiB"}},
      {"uneven", {"reducescatter 'uneven.reducescatter' of 96.1 MiB", "rank 1 could not allocate 128.5 MiB"}},
      {"fused", {"allreduce 'fused.", "and 1 other tensor fused with it, 120.0 MiB", "rank 1 could not allocate 120.0 MiB"}},
  };
  for (const Case& c : cases) {
    const std::string why = sameOnEveryRank(job, c.key);
    for (const std::string& part : c.parts) EXPECT_TRUE(contains(why, part)) << c.key << ": " << why << " lacks " << part;
    EXPECT_FALSE(contains(why, "rank 0 could") || contains(why, "rank 2 could")) << why;
    EXPECT_FALSE(contains(why, "exited or crashed")) << why;
  }
  EXPECT_EQ(sameOnEveryRank(job, "fused.b"), sameOnEveryRank(job, "fused"));
}

// Below the size checked on every rank first, a failed allocation stops that rank's engine; it
// aborts its communicators, so every peer fails at once with its message (not after
// RINGFOLD_TIMEOUT, nor as "exited or crashed").
TEST(Faults, SmallAllocationFailureReachesEveryPeerAtOnce) {
  SKIP_UNDER_ASAN();
  TempDir dir;
  const Job job = runWorkerJob(FAULT_WORKER_PATH, "oom.small", {}, dir.path(), 60s);
  expectClean(job);
  for (int r : {0, 1, 2}) {
    SCOPED_TRACE(r);
    const auto it = job.messages.find("failure." + std::to_string(r));
    ASSERT_TRUE(it != job.messages.end() && it->second.count(r)) << job.transcript();
    const std::string& why = it->second.at(r);
    EXPECT_TRUE(contains(why, "allgather 'small.gather': out of memory: rank 1 could not allocate 3.0 MiB")) << why;
    if (r != 1) {
      EXPECT_TRUE(contains(why, "ringfold stopped on rank 1")) << why;
    }
    EXPECT_LT(timeOf(job, "failed", r), 5.0);
  }
}

// Integer scale factors end to end, as Horovod computes them (truncation toward zero).
TEST(Faults, IntegerScalingTruncatesAsHorovod) {
  TempDir dir;
  expectClean(runWorkerJob(FAULT_WORKER_PATH, "scaling", {}, dir.path(), 60s));
}

// A frozen rank (SIGSTOP, sockets open) with the default settings: the others fail with ABORTED
// after the default RINGFOLD_TIMEOUT (60 s), naming it, and the job ends. (The old default held
// the job for 300 s.) Slow by nature: about a minute.
TEST(Faults, FrozenRankFailsEveryRankWithTheDefaultTimeout) {
  for (const char* name : {"RINGFOLD_TIMEOUT", "HOROVOD_GLOO_TIMEOUT_SECONDS"}) unsetenv(name);
  TempDir dir;
  const Job job = runWorkerJob(FAULT_WORKER_PATH, "frozen", {"--grace-period", "30"}, dir.path(), 150s);
  EXPECT_FALSE(job.finished.timedOut) << job.transcript();
  EXPECT_NE(job.finished.exitCode, 0) << job.transcript();  // rank 1 was SIGKILLed
  for (const auto& f : job.failures) ADD_FAILURE() << f;
  for (int r : {0, 2}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(job.done.count(r)) << job.transcript();
    const double seconds = timeOf(job, "failed", r);
    EXPECT_GE(seconds, 55.0);
    EXPECT_LT(seconds, 100.0);
    const auto it = job.messages.find("failure." + std::to_string(r));
    EXPECT_TRUE(it != job.messages.end() && it->second.count(r) && contains(it->second.at(r), "rank 1"))
        << job.transcript();
  }
}

}  // namespace
