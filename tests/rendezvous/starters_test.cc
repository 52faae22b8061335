// Ranks started by hand, without ringfoldrun, under the names each documented starter sets
// (docs/launching.md, "Running under cluster managers"; bootstrap.h): ringfoldrun's own RINGFOLD_* names,
// horovodrun's HOROVOD_*, torchrun's and Azure ML's RANK/WORLD_SIZE/MASTER_ADDR, Slurm's SLURM_*
// and Open MPI's OMPI_COMM_WORLD_*. Each case starts kRanks processes of starter_rank with
// `env -i` and only those variables (plus RINGFOLD_SECRET where docs/launching.md's example sets it),
// and checks that every rank's allreduce completed with the right sum, within a deadline.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "launcher/subprocess.h"

namespace ringfold::rendezvous::testing {
namespace {

using namespace std::chrono_literals;
using launcher::testing::Finished;
using launcher::testing::Subprocess;
using Env = std::map<std::string, std::string>;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 3;
// Far below the start timeout (60 s) that every rank waits when nobody hosts the store.
constexpr auto kDeadline = 40s;

bool portFree(int port) {
  for (uint32_t addr : {INADDR_ANY, INADDR_LOOPBACK}) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(addr);
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (!ok) return false;
  }
  return true;
}

// A free port p such that p - 1 is valid (for starters whose store takes their port + 1).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A job number n whose derived store port 29500 + n % 1000 is free (Slurm, Open MPI).
int freeJobNumber() {
  const int start = static_cast<int>(::getpid() % 1000);
  for (int i = 0; i < 1000; ++i) {
    int n = (start + i) % 1000;
    if (portFree(29500 + n)) return 7000 + n;  // 7000 + n: same port, a multi-digit job id
  }
  ADD_FAILURE() << "no free port in 29500-30499";
  return 0;
}

// Starts kRanks ranks with env(rank) as their whole environment and checks each one.
void runByHand(const std::string& source, const std::function<Env(int)>& env) {
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> argv = {"/usr/bin/env", "-i"};
    for (const auto& [k, v] : env(r)) argv.push_back(k + "=" + v);
    argv.push_back(STARTER_RANK_PATH);
    ranks.push_back(std::make_unique<Subprocess>(argv));
  }
  const auto deadline = Clock::now() + kDeadline;
  for (int r = 0; r < kRanks; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Finished f = ranks[r]->finish(std::max(left, std::chrono::milliseconds(100)));
    EXPECT_FALSE(f.timedOut) << source << " rank " << r << " did not finish within "
                             << kDeadline.count() << " s; stderr:\n" << f.err;
    EXPECT_EQ(f.exitCode, 0) << source << " rank " << r << " stderr:\n" << f.err;
    EXPECT_EQ(f.out, "starter_rank ok rank " + std::to_string(r) + " of " + std::to_string(kRanks) +
                         " via " + source + "\n")
        << f.err;
  }
}

std::string n(int v) { return std::to_string(v); }

TEST(Starters, RingfoldNamesByHand) {
  const int port = freePort();
  runByHand("ringfold", [&](int r) {
    return Env{{"RINGFOLD_RANK", n(r)}, {"RINGFOLD_SIZE", n(kRanks)}, {"RINGFOLD_LOCAL_RANK", n(r)},
               {"RINGFOLD_LOCAL_SIZE", n(kRanks)}, {"RINGFOLD_STORE_ADDR", "127.0.0.1"},
               {"RINGFOLD_STORE_PORT", n(port)}, {"RINGFOLD_SECRET", "by-hand-secret"}};
  });
}

TEST(Starters, HorovodNamesByHand) {
  const int port = freePort();  // ringfold's store: horovodrun's rendezvous port + 1
  runByHand("horovod", [&](int r) {
    return Env{{"HOROVOD_RANK", n(r)}, {"HOROVOD_SIZE", n(kRanks)}, {"HOROVOD_LOCAL_RANK", n(r)},
               {"HOROVOD_LOCAL_SIZE", n(kRanks)}, {"HOROVOD_CROSS_RANK", "0"},
               {"HOROVOD_CROSS_SIZE", "1"}, {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
               {"HOROVOD_GLOO_RENDEZVOUS_PORT", n(port - 1)}};
  });
}

TEST(Starters, TorchrunNamesByHand) {
  const int port = freePort();  // MASTER_PORT + 1 under torchrun
  runByHand("torchrun", [&](int r) {
    return Env{{"RANK", n(r)}, {"WORLD_SIZE", n(kRanks)}, {"LOCAL_RANK", n(r)},
               {"LOCAL_WORLD_SIZE", n(kRanks)}, {"GROUP_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", n(port - 1)}, {"TORCHELASTIC_RUN_ID", "starters-test"},
               {"RINGFOLD_SECRET", "torchrun-secret"}};
  });
}

TEST(Starters, AzureMlNamesByHand) {
  const int port = freePort();  // no torchrun: MASTER_PORT itself; no LOCAL_WORLD_SIZE
  runByHand("torchrun", [&](int r) {
    return Env{{"RANK", n(r)}, {"WORLD_SIZE", n(kRanks)}, {"LOCAL_RANK", n(r)}, {"NODE_RANK", "0"},
               {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", n(port)},
               {"RINGFOLD_SECRET", "azure-secret"}};
  });
}

TEST(Starters, SlurmNamesByHand) {
  const int job = freeJobNumber();
  runByHand("slurm", [&](int r) {
    return Env{{"SLURM_PROCID", n(r)}, {"SLURM_NTASKS", n(kRanks)}, {"SLURM_LOCALID", n(r)},
               {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", n(kRanks)},
               {"SLURM_STEP_NODELIST", "localhost"}, {"SLURM_JOB_NODELIST", "localhost"},
               {"SLURM_JOB_ID", n(job)}, {"SLURM_STEP_ID", "0"}, {"RINGFOLD_SECRET", "slurm-secret"}};
  });
}

TEST(Starters, OpenMpiNamesByHand) {
  const int job = freeJobNumber();
  runByHand("openmpi", [&](int r) {
    return Env{{"OMPI_COMM_WORLD_RANK", n(r)}, {"OMPI_COMM_WORLD_SIZE", n(kRanks)},
               {"OMPI_COMM_WORLD_LOCAL_RANK", n(r)}, {"OMPI_COMM_WORLD_LOCAL_SIZE", n(kRanks)},
               {"OMPI_MCA_ess_base_jobid", n(job)}, {"RINGFOLD_SECRET", "mpi-secret"}};
  });
}

}  // namespace
}  // namespace ringfold::rendezvous::testing
