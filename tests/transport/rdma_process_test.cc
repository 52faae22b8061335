// The rdma transport with ranks as forked processes started like a real job
// (Communicator::fromEnvironment, RINGFOLD_TRANSPORT=rdma) over libfabric's tcp;ofi_rxm on
// 127.0.0.1: the real protocol, the real provider, real process boundaries.
//   * every rank on its own pretend host: every pair over rdma; collectives give correct results;
//   * two pretend hosts: unix_uring within a host, rdma between them, in one communicator;
//   * a rank that cannot run rdma (its fabric is unusable) is joined through tcp_uring by its
//     peers, which keep rdma among themselves, and the job still computes the right results;
//   * a killed or frozen rank is named in an error on every survivor within bounded time.
#include <gtest/gtest.h>

#include <string>

#include "forked_job.h"
#include "tcp_test_util.h"
#include "transport/rdma/fabric.h"

namespace ringfold::test {
namespace {

// Every rank on its own pretend host (so every pair is "remote") unless `hosts` says otherwise.
std::function<void(int)> rdmaEnvironment(const std::string& hosts = "ABCD") {
  return [hosts](int r) {
    setenv("RINGFOLD_TRANSPORT", "rdma", 1);
    setenv("RINGFOLD_RDMA_FABRIC", "ofi", 1);
    setenv("RINGFOLD_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("FI_TCP_IFACE", "lo", 1);  // libfabric's own choice here would be eth0
    setenv("RINGFOLD_TEST_HOST_ID", std::string(1, hosts[r]).c_str(), 1);
  };
}

class RdmaProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (uringUnavailable(why)) GTEST_SKIP() << "io_uring unavailable (the store's ranks use it too): " << why;
    EnvGuard env{{"RINGFOLD_OFI_PROVIDER", "tcp;ofi_rxm"}, {"FI_TCP_IFACE", "lo"}};
    if (!transport::rdma::fabricUsable("ofi", why)) GTEST_SKIP() << "libfabric tcp;ofi_rxm unusable: " << why;
  }
};

void expectEveryRank(Job& job, const std::vector<std::string>& want) {
  job.collect({0, 1, 2, 3}, 90s);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(job.reports[r].line, want[r]) << "rank " << r;
}

Job::Body collectivesBody() {
  return [](Communicator& comm, auto& say) {
    const std::string name = comm.device().name();
    const int wrong = checkCollectives(comm) + checkCollectives(comm, 3 << 20);
    say(wrong == 0 ? "ok " + name : "wrong " + std::to_string(wrong));
  };
}

TEST_F(RdmaProcesses, CollectivesOverRdma) {
  Job job(collectivesBody(), "20", rdmaEnvironment());
  expectEveryRank(job, {"ok rdma", "ok rdma", "ok rdma", "ok rdma"});
}

TEST_F(RdmaProcesses, CollectivesOverUnixAndRdma) {
  Job job(collectivesBody(), "20", rdmaEnvironment("AABB"));
  const std::string both = "ok per_peer(unix_uring+rdma)";
  expectEveryRank(job, {both, both, both, both});
}

// Rank 3's fabric is unusable (the verbs fabric finds no device here): ranks 0-2 keep rdma among
// themselves and join rank 3 through tcp_uring; rank 3 uses tcp_uring for everyone.
TEST_F(RdmaProcesses, RankWithoutAFabricIsJoinedOverTcp) {
  std::string why;
  if (transport::rdma::fabricUsable("verbs", why)) GTEST_SKIP() << "this machine has a verbs device";
  auto base = rdmaEnvironment();
  Job job(collectivesBody(), "20", [base](int r) {
    base(r);
    if (r == 3) setenv("RINGFOLD_RDMA_FABRIC", "verbs", 1);
  });
  const std::string mixed = "ok per_peer(tcp_uring+rdma)";
  expectEveryRank(job, {mixed, mixed, mixed, "ok tcp_uring"});
}

// A killed peer that nothing was being written to, and a frozen one, are found by the timeout
// and the WAITING notices (a frozen process's NIC would keep acknowledging); survivors name the
// rank and what /proc says of its process, as over TCP.
TEST_F(RdmaProcesses, KilledRankIsNamedRing) {
  victimScenario(1, false, AllreduceAlgorithm::kRing, rdmaEnvironment());
}
TEST_F(RdmaProcesses, KilledRankIsNamedDirect) {
  victimScenario(2, false, AllreduceAlgorithm::kDirect, rdmaEnvironment());
}
TEST_F(RdmaProcesses, FrozenRankIsNamedRing) {
  victimScenario(2, true, AllreduceAlgorithm::kRing, rdmaEnvironment());
}
TEST_F(RdmaProcesses, FrozenRankIsNamedDirect) {
  victimScenario(1, true, AllreduceAlgorithm::kDirect, rdmaEnvironment());
}

}  // namespace
}  // namespace ringfold::test
