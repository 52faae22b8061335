// The rdma transport's verbs fabric in whole jobs: four forked ranks started like a real job
// (Communicator::fromEnvironment, RINGFOLD_TRANSPORT=rdma, RINGFOLD_RDMA_FABRIC=verbs), each on
// its own pretend host, moving every collective's data between processes through RC queue pairs
// of the libibverbs.so.1 test double (verbs_double/), which CTest puts first on LD_LIBRARY_PATH so
// that the fabric's unchanged dlopen("libibverbs.so.1") finds it. RoCE and InfiniBand link
// layers, two QPs per peer, and a killed rank named on every survivor.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "forked_job.h"
#include "tcp_test_util.h"
#include "verbs_double/hook.h"

namespace ringfold::test {
namespace {

bool doubleLoaded(std::string& where) {
  void* handle = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) {
    where = "(none)";
    return false;
  }
  Dl_info info{};
  void* sym = dlsym(handle, "ibv_open_device");
  where = sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "(unknown)";
  return where.rfind(VERBS_DOUBLE_DIR, 0) == 0;
}

std::function<void(int)> verbsEnvironment(const std::string& linkLayer, const std::string& qps) {
  return [linkLayer, qps](int r) {
    setenv("RINGFOLD_TRANSPORT", "rdma", 1);
    setenv("RINGFOLD_RDMA_FABRIC", "verbs", 1);
    setenv("VERBS_DOUBLE_LINK_LAYER", linkLayer.c_str(), 1);
    setenv("RINGFOLD_IB_QPS_PER_CONNECTION", qps.c_str(), 1);
    setenv("RINGFOLD_TEST_HOST_ID", std::string(1, static_cast<char>('A' + r)).c_str(), 1);
  };
}

class RdmaVerbsJob : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (uringUnavailable(why)) GTEST_SKIP() << "io_uring unavailable (the store uses it): " << why;
    std::string where;
    if (!doubleLoaded(where)) {
      FAIL() << "libibverbs.so.1 resolves to " << where << ", not the double: run through ctest, or with "
             << "LD_LIBRARY_PATH=" << VERBS_DOUBLE_DIR;
    }
  }
};

void collectivesOverVerbs(const std::string& linkLayer, const std::string& qps) {
  Job job(
      [](Communicator& comm, auto& say) {
        const int wrong = checkCollectives(comm) + checkCollectives(comm, 3 << 20);
        say(wrong == 0 ? std::string("ok ") + comm.device().name() : "wrong " + std::to_string(wrong));
      },
      "20", verbsEnvironment(linkLayer, qps));
  job.collect({0, 1, 2, 3}, 90s);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(job.reports[r].line, "ok rdma") << "rank " << r;
}

TEST_F(RdmaVerbsJob, CollectivesOverRoCE) { collectivesOverVerbs("eth", "1"); }
TEST_F(RdmaVerbsJob, CollectivesOverInfiniBandTwoQpsPerPeer) { collectivesOverVerbs("ib", "2"); }

TEST_F(RdmaVerbsJob, KilledRankIsNamed) {
  victimScenario(1, false, AllreduceAlgorithm::kRing, verbsEnvironment("eth", "1"));
}

// Rank 2's port goes down in the middle of allreduces (the double raises IBV_EVENT_PORT_ERR and
// stops its traffic): an error that names no write. Rank 2 fails naming its own device; its abort
// cannot leave through a dead port, so the others time out on it and name it. Rank 2 takes its
// port down itself after a few allreduces (the double's hook), so that the failure comes once
// the job is running however long a loaded machine takes to set it up.
TEST_F(RdmaVerbsJob, PortDownFailsEveryRank) {
  Job job(
      [](Communicator& comm, auto& say) {
        std::vector<float> buf(1 << 16, 1.0f);
        for (int iter = 0;; ++iter) {
          if (comm.rank() == 2 && iter == 5) {
            if (const int n = verbsDoublePortDown(); n != 1) return say("the double's hook took " + std::to_string(n) + " ports down");
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
      "4", verbsEnvironment("eth", "1"));
  job.collect({0, 1, 2, 3}, 30s);
  for (int r = 0; r < kRanks; ++r) {
    const Report& rep = job.reports[r];
    ASSERT_TRUE(rep.done) << "rank " << r;
    EXPECT_EQ(rep.line.rfind("error ", 0), 0u) << "rank " << r << ": " << rep.line;
    EXPECT_NE(rep.line.find(r == 2 ? "the RDMA device of rank 2 failed" : "rank 2 sent nothing"), std::string::npos)
        << "rank " << r << ": " << rep.line;
  }
}

}  // namespace
}  // namespace ringfold::test
