// Every collective over tcp_uring on 127.0.0.1. Ranks as threads (each with its own tcp_uring
// Device, rendezvous through a HashStore) over a subset of the loopback matrix that still
// covers every dtype, op, rank count {1,2,3,5,8} and count; and one job of forked processes
// that starts like a real one (Communicator::fromEnvironment with torchrun's variables, rank 0
// hosting the TCP store), which also runs the checks of per_peer_test_util.h. The same forked
// job runs every dtype x op x count over the shm transport (ranks as processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "collectives/collectives.h"
#include "matrix.h"
#include "reduce/cpu_reducer.h"
#include "reference.h"
#include "transport/device.h"
#include "transport/per_peer_test_util.h"
#include "transport/tcp_test_util.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;
using namespace std::chrono_literals;

const std::vector<size_t> kCounts = {0, 1, 7, 4097, 40001};
const std::vector<size_t> kBlockCounts = {0, 1, 7, 1025, 5001};

// Odd rank counts run with 2 sockets per peer and a 16 KiB stripe threshold, so that striped
// messages pass through every collective; even ones with 1 socket (the loopback default).
test::EnvGuard socketsFor(int ranks) {
  if (ranks % 2 == 1) return test::EnvGuard{{"RINGFOLD_SOCKETS_PER_PEER", "2"}, {"RINGFOLD_STRIPE_MIN_BYTES", "16K"}};
  return test::EnvGuard{{"RINGFOLD_SOCKETS_PER_PEER", "1"}};
}

GroupOptions tcpGroup() {
  GroupOptions g;
  g.transport = "tcp_uring";
  return g;
}

class TcpThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string why;
    if (test::uringUnavailable(why)) GTEST_SKIP() << "tcp_uring unavailable: " << why;
  }
};

// dtype d uses op d%5 and counts d%5, (d+2)%5: over the 10 dtypes every op and every count
// appears (each twice or more) at every rank count.
TEST_P(TcpThreads, ReducingSubset) {
  const int n = GetParam();
  auto env = socketsFor(n);
  FailureLog log;
  auto types = reducibleTypes();
  for (size_t d = 0; d < types.size(); ++d) {
    const ReduceOp op = static_cast<ReduceOp>(d % kNumReduceOps);
    std::vector<ReduceCase> cases = {{op, kCounts[d % 5]}, {op, kCounts[(d + 2) % 5]}};
    if (d == 0) cases.push_back({ReduceOp::kAvg, 4097, 0.5, 3.0});
    checkAllreduce(n, types[d], cases, {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree},
                   tcpGroup(), log);
    std::vector<ReduceCase> rs = {{op, kBlockCounts[d % 5]}, {op, kBlockCounts[(d + 2) % 5]}};
    checkReduceScatter(n, types[d], rs, tcpGroup(), log);
  }
  log.report();
}

TEST_P(TcpThreads, CopyingSubset) {
  const int n = GetParam();
  auto env = socketsFor(n);
  FailureLog log;
  auto types = allTypes();
  for (size_t d = 0; d < types.size(); ++d) {
    const std::vector<size_t> counts = {kBlockCounts[d % 5], kBlockCounts[(d + 3) % 5]};
    checkAllgather(n, types[d], counts, tcpGroup(), log);
    checkBroadcast(n, types[d], {kCounts[d % 5]}, tcpGroup(), log);
    if (d % 2 == 0) checkAllgatherv(n, types[d], counts, tcpGroup(), log);
    if (d % 2 == 1) checkAlltoall(n, types[d], {counts[0]}, tcpGroup(), log);
  }
  log.report();
}

TEST_P(TcpThreads, MismatchFailsEveryRank) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  GroupOptions g = tcpGroup();
  g.timeout = 10s;
  const auto start = std::chrono::steady_clock::now();
  auto errors = runRanks(n, [&](Communicator& comm) {
    std::vector<float> buf(300, 1.0f);
    AllreduceOptions o;
    o.sendbuf = o.recvbuf = buf.data();
    o.count = comm.rank() == n - 1 ? 299 : 300;
    o.algorithm = AllreduceAlgorithm::kRing;
    allreduce(comm, o);
  }, g);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(holds<MismatchError>(errors[r])) << "rank " << r << ": " << describe(errors[r]);
    EXPECT_NE(describe(errors[r]).find("allreduce arguments differ between ranks"), std::string::npos)
        << describe(errors[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(TcpUring, TcpThreads, ::testing::ValuesIn(kRankCounts),
                         [](const ::testing::TestParamInfo<int>& i) { return "ranks" + std::to_string(i.param); });

// One rank of the forked job: returns the number of wrong results (exceptions propagate).
// `every`: every reducible dtype x op x count (the matrix's allreduce axes, with ranks as
// processes); else three dtypes, sum, one count.
int forkedRank(bool every) {
  auto comm = Communicator::fromEnvironment();
  comm->setSegmentBytes(4096);
  comm->setTimeout(20s);
  CollectiveTuning tuning = comm->tuning();
  tuning.ringChunkBytes = 8192;  // several ring rounds, each chunk two segments
  comm->setTuning(tuning);
  const int n = comm->size(), r = comm->rank();
  auto red = makeCpuReducer();
  int wrong = 0;
  const std::vector<DataType> types =
      every ? reducibleTypes() : std::vector<DataType>{DataType::kFloat32, DataType::kBfloat16, DataType::kInt64};
  const std::vector<ReduceOp> ops = every ? allOps() : std::vector<ReduceOp>{ReduceOp::kSum};
  const std::vector<size_t> counts = every ? kCounts : std::vector<size_t>{20011};
  for (auto t : types) {
    for (auto op : ops) {
      for (size_t count : counts) {
        for (auto algo : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree}) {
          std::vector<testref::Bytes> inputs;
          for (int i = 0; i < n; ++i) inputs.push_back(testref::makeInput(t, count, i, 77));
          const testref::RefAlgo ref = algo == AllreduceAlgorithm::kRing     ? testref::RefAlgo::kRing
                                       : algo == AllreduceAlgorithm::kDirect ? testref::RefAlgo::kDirect
                                                                             : testref::RefAlgo::kTree;
          // The ring's rounds as the model chose them from the measured constants.
          const size_t chunk = resolveAllreduce(*comm, algo, count * dataTypeSize(t)).ringChunkBytes;
          auto want = testref::referenceAllreduce(*red, inputs, count, t, op, 1.0, 1.0, ref, chunk);
          testref::Bytes got(want.size());
          AllreduceOptions o;
          o.sendbuf = inputs[r].data();
          o.recvbuf = got.data();
          o.count = count;
          o.dtype = t;
          o.op = op;
          o.algorithm = algo;
          allreduce(*comm, o);
          if (got != want) {
            std::fprintf(stderr, "rank %d: allreduce %s op %d count %zu wrong\n", r, dataTypeName(t),
                         static_cast<int>(op), count);
            ++wrong;
          }
        }
      }
    }
  }
  wrong += test::checkCollectives(*comm);  // allgather, broadcast from every root, alltoall
  return wrong;
}

// A rank of a job on pretend hosts of 2 ranks each (RINGFOLD_TEST_HOST_ID: shm inside a host,
// tcp_uring across): hierarchical allreduce with each algorithm among hosts, three dtypes, two
// ops, counts below and above a segment, against the restated reference.
int hierarchicalRank() {
  auto comm = Communicator::fromEnvironment();
  comm->setSegmentBytes(4096);
  comm->setTimeout(20s);
  CollectiveTuning tuning = comm->tuning();
  tuning.ringChunkBytes = 8192;
  const int n = comm->size(), r = comm->rank();
  auto red = makeCpuReducer();
  int wrong = 0;
  for (const char* among : {"hierarchical,ring", "hierarchical,direct", "hierarchical,tree"}) {
    tuning.allreduceAlgorithm = among;
    comm->setTuning(tuning);
    for (auto t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt64}) {
      for (auto op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (size_t count : {size_t{7}, size_t{20011}}) {
          const coll::AllreduceChoice c = resolveAllreduce(*comm, AllreduceAlgorithm::kHierarchical, count * dataTypeSize(t));
          if (c.algorithm != AllreduceAlgorithm::kHierarchical) {
            std::fprintf(stderr, "rank %d: hierarchical does not apply here\n", r);
            return 1;
          }
          std::vector<testref::Bytes> inputs;
          for (int i = 0; i < n; ++i) inputs.push_back(testref::makeInput(t, count, i, 78));
          const testref::RefAlgo cross = c.cross == AllreduceAlgorithm::kRing     ? testref::RefAlgo::kRing
                                         : c.cross == AllreduceAlgorithm::kDirect ? testref::RefAlgo::kDirect
                                                                                  : testref::RefAlgo::kTree;
          auto want = testref::referenceHierarchical(*red, inputs, count, t, op, 1.0, 1.0, 2, cross, c.ringChunkBytes);
          testref::Bytes got(want.size());
          AllreduceOptions o;
          o.sendbuf = inputs[r].data();
          o.recvbuf = got.data();
          o.count = count;
          o.dtype = t;
          o.op = op;
          o.algorithm = AllreduceAlgorithm::kHierarchical;
          allreduce(*comm, o);
          if (got != want) {
            std::fprintf(stderr, "rank %d: hierarchical (%s) %s count %zu wrong\n", r, among, dataTypeName(t), count);
            ++wrong;
          }
        }
      }
    }
  }
  return wrong;
}

// Forks `ranks` ranks started like a real job, with `env` set in each (and `perRank(r)`'s
// variables), running `body` (forkedRank(every) by default).
void runForkedJob(bool every, const std::vector<std::pair<const char*, const char*>>& env, int ranks = 3,
                  const std::function<int()>& body = {},
                  const std::function<std::vector<std::pair<std::string, std::string>>(int)>& perRank = {}) {
  std::string why;
  if (test::uringUnavailable(why)) GTEST_SKIP() << "tcp_uring unavailable: " << why;
  const int kRanks = ranks;
  const int port = test::freePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      test::setForkedRankEnvironment(r, kRanks, r, kRanks, port);
      for (auto& [k, v] : env) setenv(k, v, 1);
      if (perRank) {
        for (auto& [k, v] : perRank(r)) setenv(k.c_str(), v.c_str(), 1);
      }
      int code = 3;
      try {
        code = (body ? body() : forkedRank(every)) == 0 ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pids[r], &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    if (done == 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      FAIL() << "rank " << r << " did not finish within 60 s";
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
  }
}

TEST(TcpUringProcesses, JobStartedFromTheEnvironment) { runForkedJob(false, {}); }

// The shm transport between processes (RINGFOLD_TRANSPORT=shm): every dtype x op x count, over
// small rings (8 slots of 1 KiB: messages span slots, rings fill), then with cross-memory attach
// from 2 KiB.
TEST(ShmProcesses, EveryDtypeOpAndCountThroughTheRings) {
  runForkedJob(true, {{"RINGFOLD_TRANSPORT", "shm"}, {"RINGFOLD_SHM_SLOTS", "8"}, {"RINGFOLD_SHM_SLOT_BYTES", "1K"}});
}
// A mixed mesh: 2 pretend hosts of 2 ranks (shm inside, tcp_uring across), hierarchical
// allreduce with ring, direct and tree among the hosts.
TEST(MixedMeshProcesses, HierarchicalAllreduceOverShmAndTcp) {
  runForkedJob(false, {{"RINGFOLD_LOCAL_TRANSPORT", "shm"}}, 4, hierarchicalRank, [](int r) {
    return std::vector<std::pair<std::string, std::string>>{{"RINGFOLD_TEST_HOST_ID", "pretend-host-" + std::to_string(r / 2)}};
  });
}

TEST(ShmProcesses, EveryDtypeOpAndCountByCrossMemoryAttach) {
  runForkedJob(true, {{"RINGFOLD_TRANSPORT", "shm"}, {"RINGFOLD_SHM_CMA", "on"}, {"RINGFOLD_SHM_CMA_MIN_BYTES", "2K"}});
}

}  // namespace
