// Ranks started by a cluster manager instead of ringfoldrun, on the emulated cluster
// (netns_cluster.h: 4 network namespaces h1..h4 at 10.89.0.1-4). The test plays the cluster
// manager: it starts every rank itself with `ip netns exec hN env -i VAR=... all_reduce_perf`,
// 2 ranks per host, with exactly the environment that manager gives its processes and nothing
// else (env -i: no RINGFOLD_* from ringfoldrun, no variable of the shell running ctest).
//
//   torchrun   `torchrun --nproc-per-node 2 --nnodes 4 --rdzv-id ID --master-addr 10.89.0.1
//              --master-port P`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//              GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_* (the names
//              torch's LocalElasticAgent sets). torchrun's own store holds MASTER_PORT on the
//              first host, so the test holds it too (a listener in h1) and ringfold's store
//              must come up on MASTER_PORT + 1.
//   Slurm      `srun -N 4 --ntasks-per-node 2`: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//              SLURM_NODEID, SLURM_TASKS_PER_NODE "2(x4)", SLURM_JOB_NODELIST (and the step's),
//              SLURM_JOB_ID, ... Node names "node[1-4]" resolve to the hosts through an
//              /etc/hosts bind-mounted in each rank's own mount namespace (ip netns exec makes
//              one; the machine's /etc/hosts is never touched); a second run names the nodes
//              by address ("10.89.0.[1-4]"), as a cluster without name service would.
//
// Each runs an 8-rank all_reduce_perf -b 1M -e 1M -c 1 (#wrong 0, every rank's local rank
// read from the manager's variables) once with a given RINGFOLD_SECRET and once with the secret
// derived from the job identity (every rank warns). A rank with a different secret makes the
// whole job fail within the start timeout, naming the refused connection.
//
// Under Slurm the store host comes from the node list, and the transport listens on the
// interface that reaches it (SlurmWithoutInterfaceHint); the other Slurm tests also pass
// RINGFOLD_SOCKET_IFNAME=eth0, which users may set to choose the interface.
//
// Skips (exit 77, reason printed) when not root or without namespaces or sshd.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>

#include "launcher/subprocess.h"
#include "netns/netns_cluster.h"

namespace ringfold::launcher::testing {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;
using Env = std::vector<std::string>;  // "NAME=value"

constexpr int kRanks = 8;
constexpr int kPerHost = 2;

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string randomHex(size_t bytes) {
  std::random_device rd;
  std::string s;
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

// What every rank gets besides the manager's variables: a PATH, bounded start-up and
// collective timeouts (a broken case fails in seconds), and info logs (rank 0 says where it
// hosts the store).
Env commonEnv(int startTimeout) {
  return {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RINGFOLD_START_TIMEOUT=" + std::to_string(startTimeout),
          "RINGFOLD_TIMEOUT=30", "RINGFOLD_LOG_LEVEL=info"};
}

// The environment torch's LocalElasticAgent gives worker `rank` of
// `torchrun --nproc-per-node 2 --nnodes 4 --rdzv-id runId --master-addr 10.89.0.1 --master-port port`.
Env torchrunEnv(int rank, const std::string& runId, int port) {
  const int node = rank / kPerHost;
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(kRanks),
          "LOCAL_RANK=" + std::to_string(rank % kPerHost),
          "LOCAL_WORLD_SIZE=" + std::to_string(kPerHost),
          "GROUP_RANK=" + std::to_string(node),
          "GROUP_WORLD_SIZE=" + std::to_string(kRanks / kPerHost),
          "ROLE_RANK=" + std::to_string(rank),
          "ROLE_NAME=default",
          "ROLE_WORLD_SIZE=" + std::to_string(kRanks),
          "MASTER_ADDR=" + NetnsCluster::ip(1),
          "MASTER_PORT=" + std::to_string(port),
          "TORCHELASTIC_RESTART_COUNT=0",
          "TORCHELASTIC_MAX_RESTARTS=0",
          "TORCHELASTIC_RUN_ID=" + runId,
          "TORCHELASTIC_USE_AGENT_STORE=True",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"};
}

// What an Azure ML PyTorch command job (distribution pytorch, 2 processes per instance) gives
// process `rank`: torchrun's names without LOCAL_WORLD_SIZE, plus NODE_RANK; no torchrun runs, so
// the store is on MASTER_PORT itself.
Env azureMlEnv(int rank, int port) {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(kRanks),
          "LOCAL_RANK=" + std::to_string(rank % kPerHost),
          "NODE_RANK=" + std::to_string(rank / kPerHost),
          "MASTER_ADDR=" + NetnsCluster::ip(1),
          "MASTER_PORT=" + std::to_string(port),
          "AZUREML_RUN_ID=rf-azure-" + std::to_string(getpid())};
}

// What srun gives task `rank` of `srun -N 4 --ntasks-per-node 2` in job `jobId` on `nodeList`.
Env slurmEnv(int rank, const std::string& jobId, const std::string& nodeList, const std::string& nodeName) {
  const int node = rank / kPerHost;
  std::string gtids;
  for (int r = node * kPerHost; r < (node + 1) * kPerHost; ++r) gtids += (gtids.empty() ? "" : ",") + std::to_string(r);
  return {"SLURM_PROCID=" + std::to_string(rank),
          "SLURM_NTASKS=" + std::to_string(kRanks),
          "SLURM_NPROCS=" + std::to_string(kRanks),
          "SLURM_LOCALID=" + std::to_string(rank % kPerHost),
          "SLURM_NODEID=" + std::to_string(node),
          "SLURM_NNODES=4",
          "SLURM_JOB_NUM_NODES=4",
          "SLURM_STEP_NUM_NODES=4",
          "SLURM_STEP_NUM_TASKS=" + std::to_string(kRanks),
          "SLURM_TASKS_PER_NODE=2(x4)",
          "SLURM_STEP_TASKS_PER_NODE=2(x4)",
          "SLURM_NTASKS_PER_NODE=2",
          "SLURM_JOB_NODELIST=" + nodeList,
          "SLURM_NODELIST=" + nodeList,
          "SLURM_STEP_NODELIST=" + nodeList,
          "SLURMD_NODENAME=" + nodeName,
          "SLURM_JOB_ID=" + jobId,
          "SLURM_JOBID=" + jobId,
          "SLURM_STEP_ID=0",
          "SLURM_GTIDS=" + gtids,
          "SLURM_CPUS_ON_NODE=2"};
}

struct JobRun {
  std::vector<Finished> ranks;
  std::string all;  // every rank's stdout and stderr, labelled, for failure messages
};

struct JobOptions {
  std::string hostsFile;  // bind-mounted over /etc/hosts in each rank's mount namespace first
  int startTimeout = 15;  // RINGFOLD_START_TIMEOUT, seconds
  std::chrono::milliseconds timeout = 60s;  // for the whole job
};

// Starts the 8 ranks (rank r on host r / 2 + 1), each with commonEnv() + envFor(rank) and
// nothing else, and waits for all of them.
JobRun runJob(const std::function<Env(int rank)>& envFor, const JobOptions& o = {}) {
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < kRanks; ++r) {
    Args argv;
    if (!o.hostsFile.empty()) {
      argv = {"/bin/sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\"", o.hostsFile};
    }
    argv.push_back("/usr/bin/env");
    argv.push_back("-i");
    for (const auto& e : commonEnv(o.startTimeout)) argv.push_back(e);
    for (const auto& e : envFor(r)) argv.push_back(e);
    for (const char* a : {ALL_REDUCE_PERF_PATH, "-b", "1M", "-e", "1M", "-c", "1"}) argv.push_back(a);
    procs.push_back(std::make_unique<Subprocess>(gCluster->inHost(r / kPerHost + 1, argv)));
  }
  JobRun job;
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (int r = 0; r < kRanks; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    job.ranks.push_back(procs[r]->finish(std::max(left, std::chrono::milliseconds(1))));
    const Finished& f = job.ranks.back();
    job.all += "--- rank " + std::to_string(r) + ": exit " + std::to_string(f.exitCode) +
               (f.timedOut ? " (timed out)" : "") + "\n" + f.out + f.err;
  }
  return job;
}

// Every rank exited 0; rank 0 printed the 1 MiB row with #wrong 0 twice and every rank's
// device line carries its local rank (read from the manager's variables).
void expectCorrectAllReduce(const JobRun& job) {
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(job.ranks[r].timedOut) << "rank " << r << "\n" << job.all;
    EXPECT_EQ(job.ranks[r].exitCode, 0) << "rank " << r << "\n" << job.all;
  }
  const std::string& out = job.ranks[0].out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"( +1048576 +262144 +float +sum +-1 +\S+ +\S+ +\S+ +(\d+) +\S+ +\S+ +\S+ +(\d+)\n)")))
      << job.all;
  EXPECT_EQ(m[1], "0") << "#wrong out-of-place";
  EXPECT_EQ(m[2], "0") << "#wrong in-place";
  EXPECT_TRUE(contains(out, "Out of bounds values : 0 OK")) << out;
  const std::regex device(R"(#  Rank +(\d+) Group +0 Pid +\d+ on +\S+ device +(\d+) )");
  std::map<int, int> local;
  for (std::sregex_iterator it(out.begin(), out.end(), device), end; it != end; ++it) {
    local[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  }
  ASSERT_EQ(local.size(), static_cast<size_t>(kRanks)) << out;
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(local[r], r % kPerHost) << "local rank of rank " << r;
}

// Holds TCP `port` on host 1 for the test's lifetime, as torchrun's own store does.
class PortHolder {
 public:
  explicit PortHolder(int port)
      : proc_(gCluster->inHost(1, {"/usr/bin/python3", "-c",
                                   "import socket, time\n"
                                   "s = socket.socket()\n"
                                   "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                                   "s.bind(('0.0.0.0', " + std::to_string(port) + "))\n"
                                   "s.listen()\n"
                                   "time.sleep(120)\n"})) {
    const std::string probe = "ip netns exec " + gCluster->ns(1) + " ss -ltnH 'sport = :" +
                              std::to_string(port) + "' | grep -q .";
    for (int i = 0; i < 200 && !listening_; ++i) {
      listening_ = NetnsCluster::shell(probe) == 0;
      if (!listening_) usleep(25000);
    }
  }
  bool listening() const { return listening_; }

 private:
  Subprocess proc_;  // SIGKILLed and reaped by its destructor
  bool listening_ = false;
};

// Every test ends with no process left in any host but its sshd (ranks, the port holder).
class ClusterManagers : public ::testing::Test {
 protected:
  void TearDown() override {
    torchrunStore_.reset();
    auto left = gCluster->leftovers(6s);
    std::string all;
    for (const auto& l : left) all += "\n  " + l;
    EXPECT_TRUE(left.empty()) << "processes left behind:" << all;
  }
  // Holds MASTER_PORT in h1 as torchrun's own store would; false if it could not.
  bool holdTorchrunStorePort(int port) {
    torchrunStore_ = std::make_unique<PortHolder>(port);
    return torchrunStore_->listening();
  }

 private:
  std::unique_ptr<PortHolder> torchrunStore_;
};

TEST_F(ClusterManagers, TorchrunEnvironmentWithGivenSecret) {
  const int port = 29610;
  ASSERT_TRUE(holdTorchrunStorePort(port)) << "could not hold MASTER_PORT " << port << " in h1";
  const std::string secret = randomHex(32);
  JobRun job = runJob([&](int r) {
    Env e = torchrunEnv(r, "rf-torchrun-" + std::to_string(getpid()), port);
    e.push_back("RINGFOLD_SECRET=" + secret);
    return e;
  });
  expectCorrectAllReduce(job);
  EXPECT_TRUE(contains(job.ranks[0].err, "hosting the rendezvous store on port " + std::to_string(port + 1) +
                                             " for 8 ranks (torchrun)"))
      << job.all;
  for (int r = 0; r < kRanks; ++r) EXPECT_FALSE(contains(job.ranks[r].err, "is derived from")) << job.all;
}

TEST_F(ClusterManagers, AzureMlEnvironment) {
  const int port = 29640;
  const std::string secret = randomHex(32);
  JobRun job = runJob([&](int r) {
    Env e = azureMlEnv(r, port);
    e.push_back("RINGFOLD_SECRET=" + secret);
    return e;
  });
  expectCorrectAllReduce(job);
}

TEST_F(ClusterManagers, TorchrunEnvironmentWithDerivedSecret) {
  const int port = 29620;
  ASSERT_TRUE(holdTorchrunStorePort(port)) << "could not hold MASTER_PORT " << port << " in h1";
  JobRun job = runJob([&](int r) { return torchrunEnv(r, "rf-torchrun-derived-" + std::to_string(getpid()), port); });
  expectCorrectAllReduce(job);
  EXPECT_TRUE(contains(job.ranks[0].err, "hosting the rendezvous store on port " + std::to_string(port + 1)))
      << job.all;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(contains(job.ranks[r].err, "secret is derived from TORCHELASTIC_RUN_ID")) << "rank " << r << "\n"
                                                                                          << job.all;
  }
}

TEST_F(ClusterManagers, SlurmEnvironmentByNodeNameWithGivenSecret) {
  TempDir dir;
  const std::string hosts = dir.path() + "/hosts";
  {
    std::ofstream h(hosts);
    h << "127.0.0.1 localhost\n";
    for (int i = 1; i <= NetnsCluster::kHosts; ++i) h << NetnsCluster::ip(i) << " node" << i << "\n";
  }
  const std::string secret = randomHex(32);
  const std::string jobId = "7" + std::to_string(getpid() % 100000);
  JobOptions o;
  o.hostsFile = hosts;
  JobRun job = runJob(
      [&](int r) {
        Env e = slurmEnv(r, jobId, "node[1-4]", "node" + std::to_string(r / kPerHost + 1));
        e.push_back("RINGFOLD_SECRET=" + secret);
        e.push_back("RINGFOLD_SOCKET_IFNAME=eth0");  // see the header: the node list alone is not enough
        return e;
      },
      o);
  expectCorrectAllReduce(job);
  const int port = 29500 + std::stoi(jobId) % 1000;
  EXPECT_TRUE(contains(job.ranks[0].err, "hosting the rendezvous store on port " + std::to_string(port) +
                                             " for 8 ranks (slurm)"))
      << job.all;
  for (int r = 0; r < kRanks; ++r) EXPECT_FALSE(contains(job.ranks[r].err, "is derived from")) << job.all;
}

TEST_F(ClusterManagers, SlurmEnvironmentByAddressWithDerivedSecret) {
  const std::string jobId = "8" + std::to_string(getpid() % 100000);
  JobRun job = runJob([&](int r) {
    Env e = slurmEnv(r, jobId, "10.89.0.[1-4]", NetnsCluster::ip(r / kPerHost + 1));
    e.push_back("RINGFOLD_SOCKET_IFNAME=eth0");
    return e;
  });
  expectCorrectAllReduce(job);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(contains(job.ranks[r].err, "secret is derived from SLURM_JOB_ID")) << "rank " << r << "\n" << job.all;
  }
}

TEST_F(ClusterManagers, RankWithAnotherSecretStopsTheJob) {
  const int port = 29630;
  ASSERT_TRUE(holdTorchrunStorePort(port));
  const std::string secret = randomHex(32), other = randomHex(32);
  JobOptions o;
  o.startTimeout = 4;
  o.timeout = 30s;
  const auto t0 = std::chrono::steady_clock::now();
  JobRun job = runJob(
      [&](int r) {
        Env e = torchrunEnv(r, "rf-torchrun-bad-" + std::to_string(getpid()), port);
        e.push_back("RINGFOLD_SECRET=" + (r == 5 ? other : secret));
        return e;
      },
      o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(job.ranks[r].timedOut) << job.all;
    EXPECT_NE(job.ranks[r].exitCode, 0) << "rank " << r << "\n" << job.all;
  }
  EXPECT_LT(seconds, 4.0 + 10.0) << "start timeout + margin";
  EXPECT_TRUE(contains(job.ranks[5].err, "wrong secret")) << job.all;
  EXPECT_TRUE(contains(job.ranks[0].err, "refused connection from " + NetnsCluster::ip(3))) << job.all;
}

// The plain Slurm environment, without RINGFOLD_SOCKET_IFNAME / RINGFOLD_STORE_ADDR /
// MASTER_ADDR: the transport listens on the interface that reaches the store host the
// bootstrap derived from SLURM_JOB_NODELIST, not on loopback.
TEST_F(ClusterManagers, SlurmWithoutInterfaceHint) {
  const std::string jobId = "9" + std::to_string(getpid() % 100000);
  JobOptions o;
  o.startTimeout = 6;
  JobRun job = runJob(
      [&](int r) { return slurmEnv(r, jobId, "10.89.0.[1-4]", NetnsCluster::ip(r / kPerHost + 1)); }, o);
  expectCorrectAllReduce(job);
}

}  // namespace
}  // namespace ringfold::launcher::testing

int main(int argc, char** argv) {
  return ringfold::launcher::testing::runSuiteOnCluster(argc, argv, "cluster-manager");
}
