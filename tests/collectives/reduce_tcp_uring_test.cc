// reduce (to one root) over tcp_uring on 127.0.0.1, ranks as threads: a subset of the loopback
// matrix (reduce_test.cc) that still covers every reducible dtype, every op, segment-crossing
// counts and two roots per rank count; and a root mismatch failing every rank. Skips where
// io_uring is unavailable.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "reduce_check.h"
#include "transport/per_peer_test_util.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;
using namespace std::chrono_literals;

GroupOptions tcpGroup() {
  GroupOptions g;
  g.transport = "tcp_uring";
  return g;
}

class ReduceTcpThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string why;
    if (test::uringUnavailable(why)) GTEST_SKIP() << "tcp_uring unavailable: " << why;
  }
};

// dtype d uses op d%5 and two of reduceCounts(), shifted with d: every op and count appears.
TEST_P(ReduceTcpThreads, Subset) {
  const int n = GetParam();
  const GroupOptions group = tcpGroup();
  FailureLog log;
  const auto types = reducibleTypes();
  for (size_t d = 0; d < types.size(); ++d) {
    const ReduceOp op = static_cast<ReduceOp>(d % kNumReduceOps);
    const std::vector<size_t> counts = reduceCounts(types[d], group.segmentBytes);
    std::vector<ReduceCase> cases = {{op, counts[d % counts.size()]}, {op, counts[(d + 3) % counts.size()]}};
    if (d == 0) cases.push_back({ReduceOp::kAvg, counts.back(), 0.5, 3.0});
    std::vector<int> roots = {0};
    if (n > 1) roots.push_back(n - 1 - static_cast<int>(d) % (n - 1));
    checkReduce(n, types[d], cases, roots, group, log);
  }
  log.report();
}

TEST_P(ReduceTcpThreads, RootMismatchFailsEveryRank) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  GroupOptions g = tcpGroup();
  g.timeout = 20s;
  auto errors = runRanks(n, [&](Communicator& comm) {
    std::vector<float> send(3000, 1.0f), recv(3000);
    ReduceOptions o;
    o.sendbuf = send.data();
    o.recvbuf = recv.data();
    o.count = send.size();
    o.root = comm.rank() == n - 1 ? 1 : 0;
    reduce(comm, o);
    barrier(comm);  // a rank that needed nothing from the odd one fails here (collectives.h)
  }, g);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(holds<MismatchError>(errors[r])) << "rank " << r << ": " << describe(errors[r]);
    EXPECT_NE(describe(errors[r]).find("reduce arguments differ between ranks"), std::string::npos)
        << describe(errors[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(TcpUring, ReduceTcpThreads, ::testing::Values(1, 2, 3, 5),
                         [](const ::testing::TestParamInfo<int>& i) { return "ranks" + std::to_string(i.param); });

}  // namespace
