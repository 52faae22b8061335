// bootstrapFromEnvironment(): every launcher's names, precedence, derived values, and errors
// that name the variable at fault.
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <stdlib.h>

#include <map>
#include <optional>

#include "common/error.h"
#include "common/logging.h"
#include "rendezvous/bootstrap.h"

namespace ringfold::rendezvous {
namespace {

const char* kVars[] = {
    "RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL_RANK", "RINGFOLD_LOCAL_SIZE",
    "RINGFOLD_CROSS_RANK", "RINGFOLD_CROSS_SIZE", "RINGFOLD_STORE_ADDR", "RINGFOLD_STORE_PORT",
    "RINGFOLD_SECRET", "RINGFOLD_STORE_SERVER", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "RINGFOLD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "NODE_RANK", "TF_CONFIG",
};

class Bootstrap : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
    reloadLogLevel();
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
    reloadLogLevel();
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [k, v] : vars) ::setenv(k, v, 1);
  }
  // The message of the InvalidArgument that bootstrap throws ("" if it does not throw).
  static std::string errorOf() {
    try {
      bootstrapFromEnvironment();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  }
  std::map<std::string, std::string> saved_;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string sha256Hex(const std::string& s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  char out[2 * SHA256_DIGEST_LENGTH + 1];
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) std::snprintf(out + 2 * i, 3, "%02x", d[i]);
  return out;
}

TEST_F(Bootstrap, NothingSetIsOneProcess) {
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "none");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.localRank, 0);
  EXPECT_EQ(info.localSize, 1);
  EXPECT_EQ(info.crossRank, 0);
  EXPECT_EQ(info.crossSize, 1);
  EXPECT_TRUE(info.storeAddr.empty());
  EXPECT_FALSE(info.hostStore);
}

TEST_F(Bootstrap, RingfoldEveryName) {
  set({{"RINGFOLD_RANK", "5"}, {"RINGFOLD_SIZE", "8"}, {"RINGFOLD_LOCAL_RANK", "1"},
       {"RINGFOLD_LOCAL_SIZE", "2"}, {"RINGFOLD_CROSS_RANK", "2"}, {"RINGFOLD_CROSS_SIZE", "4"},
       {"RINGFOLD_STORE_ADDR", "host0"}, {"RINGFOLD_STORE_PORT", "4000"}, {"RINGFOLD_SECRET", "s3"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "ringfold");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 8);
  EXPECT_EQ(info.localRank, 1);
  EXPECT_EQ(info.localSize, 2);
  EXPECT_EQ(info.crossRank, 2);
  EXPECT_EQ(info.crossSize, 4);
  EXPECT_EQ(info.storeAddr, "host0");
  EXPECT_EQ(info.storePort, 4000);
  EXPECT_EQ(info.secret, "s3");
  EXPECT_FALSE(info.hostStore);  // not rank 0
  // Started by hand with the RINGFOLD_* names: rank 0 hosts the store, as under every other
  // starter (docs/launching.md, "Running under cluster managers").
  set({{"RINGFOLD_RANK", "0"}});
  EXPECT_TRUE(bootstrapFromEnvironment().hostStore);
  // Under ringfoldrun, which hosts the store itself and says so.
  set({{"RINGFOLD_STORE_SERVER", "external"}});
  EXPECT_FALSE(bootstrapFromEnvironment().hostStore);
  set({{"RINGFOLD_STORE_SERVER", "rank0"}});
  EXPECT_TRUE(bootstrapFromEnvironment().hostStore);
  set({{"RINGFOLD_STORE_SERVER", "launcher"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_STORE_SERVER='launcher'")) << errorOf();
}

TEST_F(Bootstrap, RingfoldRequiresTheSecret) {
  set({{"RINGFOLD_RANK", "0"}, {"RINGFOLD_SIZE", "2"}, {"RINGFOLD_LOCAL_RANK", "0"},
       {"RINGFOLD_LOCAL_SIZE", "2"}, {"RINGFOLD_STORE_ADDR", "h"}, {"RINGFOLD_STORE_PORT", "1"},
       {"MASTER_ADDR", "m"}, {"MASTER_PORT", "2"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_SECRET")) << errorOf();
}

TEST_F(Bootstrap, HorovodNamesAndRendezvousPortPlusOne) {
  set({{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "4"}, {"HOROVOD_LOCAL_RANK", "0"},
       {"HOROVOD_LOCAL_SIZE", "2"}, {"HOROVOD_CROSS_RANK", "0"}, {"HOROVOD_CROSS_SIZE", "2"},
       {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"}, {"HOROVOD_GLOO_RENDEZVOUS_PORT", "5000"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "horovod");
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.crossSize, 2);
  EXPECT_EQ(info.storeAddr, "10.0.0.1");
  EXPECT_EQ(info.storePort, 5001);
  EXPECT_TRUE(info.hostStore);
  EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:HOROVOD_GLOO_RENDEZVOUS_ADDR:"
                                   "HOROVOD_GLOO_RENDEZVOUS_PORT=10.0.0.1:5000"));
  set({{"RINGFOLD_STORE_PORT", "6000"}, {"RINGFOLD_SECRET", "mine"}});
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.storePort, 6000);
  EXPECT_EQ(info.secret, "mine");
}

TEST_F(Bootstrap, RingfoldAndHorovodMustAgree) {
  set({{"RINGFOLD_RANK", "1"}, {"HOROVOD_RANK", "2"}, {"RINGFOLD_SIZE", "4"}});
  std::string e = errorOf();
  EXPECT_TRUE(has(e, "RINGFOLD_RANK='1'") && has(e, "HOROVOD_RANK='2'")) << e;
  ::unsetenv("HOROVOD_RANK");
  set({{"HOROVOD_LOCAL_SIZE", "3"}, {"RINGFOLD_LOCAL_SIZE", "2"}});
  e = errorOf();
  EXPECT_TRUE(has(e, "RINGFOLD_LOCAL_SIZE='2'") && has(e, "HOROVOD_LOCAL_SIZE='3'")) << e;
}

TEST_F(Bootstrap, SizeWithoutRankIsAnError) {
  set({{"HOROVOD_SIZE", "2"}});
  EXPECT_TRUE(has(errorOf(), "HOROVOD_RANK")) << errorOf();
  // Other launchers' size alone (an salloc shell) is not a rank.
  ::unsetenv("HOROVOD_SIZE");
  set({{"SLURM_NTASKS", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "none");
}

TEST_F(Bootstrap, TorchrunNamesPortAndSecret) {
  set({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
       {"GROUP_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"},
       {"TORCHELASTIC_RUN_ID", "run-42"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.localRank, 1);
  EXPECT_EQ(info.crossRank, 1);
  EXPECT_EQ(info.crossSize, 2);
  EXPECT_EQ(info.storeAddr, "127.0.0.1");
  EXPECT_EQ(info.storePort, 29401);  // torchrun's own store holds MASTER_PORT
  EXPECT_FALSE(info.hostStore);
  EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:TORCHELASTIC_RUN_ID=run-42"));
  ::unsetenv("TORCHELASTIC_RUN_ID");
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.storePort, 29400);  // plain MASTER_ADDR/PORT (e.g. Azure ML, hand-set)
  EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:MASTER_ADDR:MASTER_PORT=127.0.0.1:29400"));
  set({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"RANK", "0"}, {"GROUP_WORLD_SIZE", "2"}});
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.storePort, 29401);
  EXPECT_TRUE(info.hostStore);
}

// torchrun's default --rdzv-id "none" is no job identity: two jobs on different master ports
// must not derive the same secret.
TEST_F(Bootstrap, TorchrunDefaultRunIdIsNotAnIdentity) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "none"}});
  const std::string first = bootstrapFromEnvironment().secret;
  set({{"MASTER_PORT", "29500"}});
  EXPECT_NE(bootstrapFromEnvironment().secret, first);
}

// Azure ML sets torchrun's names and NODE_RANK but not LOCAL_WORLD_SIZE: the local size is
// left unknown (the engine counts ranks per host by host name) unless RINGFOLD_LOCAL_SIZE says.
TEST_F(Bootstrap, AzureMlWithoutLocalWorldSize) {
  set({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"NODE_RANK", "1"},
       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}, {"RINGFOLD_SECRET", "s"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.localRank, 1);
  EXPECT_EQ(info.localSize, -1);
  EXPECT_EQ(info.crossRank, 1);
  set({{"RINGFOLD_LOCAL_SIZE", "2"}});
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.localSize, 2);
  EXPECT_EQ(info.crossSize, 2);
}

TEST_F(Bootstrap, Precedence) {
  set({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS_PER_NODE", "2"},
       {"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "slurm");
  set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "9"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "openmpi");
  EXPECT_EQ(bootstrapFromEnvironment().rank, 3);
  set({{"RANK", "2"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "torchrun");
  EXPECT_EQ(bootstrapFromEnvironment().rank, 2);
  set({{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "8"}, {"HOROVOD_LOCAL_RANK", "1"}, {"HOROVOD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "horovod");
  EXPECT_EQ(bootstrapFromEnvironment().rank, 1);
  set({{"RINGFOLD_RANK", "1"}, {"RINGFOLD_SIZE", "8"}, {"RINGFOLD_LOCAL_RANK", "1"},
       {"RINGFOLD_LOCAL_SIZE", "2"}, {"RINGFOLD_SECRET", "x"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "ringfold");
}

TEST_F(Bootstrap, ErrorsNameTheVariable) {
  set({{"RANK", "0"}});
  EXPECT_TRUE(has(errorOf(), "WORLD_SIZE")) << errorOf();
  set({{"WORLD_SIZE", "four"}});
  EXPECT_TRUE(has(errorOf(), "WORLD_SIZE='four'")) << errorOf();
  set({{"WORLD_SIZE", "4"}, {"RANK", "4"}});
  EXPECT_TRUE(has(errorOf(), "RANK='4'") && has(errorOf(), "WORLD_SIZE='4'")) << errorOf();
  set({{"RANK", "-1"}});
  EXPECT_TRUE(has(errorOf(), "RANK='-1'")) << errorOf();
  set({{"RANK", "1"}});
  EXPECT_TRUE(has(errorOf(), "LOCAL_RANK")) << errorOf();
  set({{"LOCAL_RANK", "0"}});  // no LOCAL_WORLD_SIZE is Azure ML's case: accepted, see below
  EXPECT_FALSE(has(errorOf(), "LOCAL_WORLD_SIZE")) << errorOf();
  set({{"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}});
  EXPECT_TRUE(has(errorOf(), "LOCAL_RANK='2'") && has(errorOf(), "LOCAL_WORLD_SIZE='2'")) << errorOf();
  set({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "8"}});
  EXPECT_TRUE(has(errorOf(), "LOCAL_WORLD_SIZE='8'")) << errorOf();
  set({{"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_STORE_ADDR")) << errorOf();  // no address at all
  set({{"MASTER_ADDR", "m"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_STORE_PORT")) << errorOf();
  set({{"MASTER_PORT", "70000"}});
  EXPECT_TRUE(has(errorOf(), "MASTER_PORT='70000'")) << errorOf();
  set({{"MASTER_PORT", "100"}, {"RINGFOLD_CROSS_RANK", "0"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_CROSS_SIZE")) << errorOf();
  set({{"HOROVOD_CROSS_SIZE", "1"}, {"HOROVOD_CROSS_RANK", "0"}, {"RINGFOLD_CROSS_RANK", "1"}});
  EXPECT_TRUE(has(errorOf(), "HOROVOD_CROSS_RANK='0'")) << errorOf();  // disagreement
  ::unsetenv("HOROVOD_CROSS_RANK");
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_CROSS_RANK='1'") && has(errorOf(), "HOROVOD_CROSS_SIZE='1'"))
      << errorOf();
  ::unsetenv("RINGFOLD_CROSS_RANK");
  ::unsetenv("HOROVOD_CROSS_SIZE");
  EXPECT_EQ(errorOf(), "");
}

TEST_F(Bootstrap, NoSecretAndNoJobIdentity) {
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"RINGFOLD_STORE_PORT", "1234"}});
  std::string e = errorOf();
  EXPECT_TRUE(has(e, "RINGFOLD_SECRET")) << e;
}

TEST_F(Bootstrap, OneProcessNeedsNoLocalNamesOrStore) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.localSize, 1);
  EXPECT_TRUE(info.storeAddr.empty());
  EXPECT_TRUE(info.secret.empty());
  EXPECT_FALSE(info.hostStore);
}

TEST_F(Bootstrap, OpenMpiOneHostAndJobIdPort) {
  set({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "3538485249"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.storeAddr, "127.0.0.1");
  EXPECT_EQ(info.storePort, 29500 + 249);
  EXPECT_EQ(info.crossRank, 0);
  EXPECT_EQ(info.crossSize, 1);
  EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:OMPI_MCA_ess_base_jobid=3538485249"));
  // Uneven placement without a node index: cross rank/size are unknown.
  set({{"OMPI_COMM_WORLD_SIZE", "3"}, {"RINGFOLD_STORE_ADDR", "h"}});
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.crossRank, -1);
  EXPECT_EQ(info.crossSize, -1);
  ::unsetenv("RINGFOLD_STORE_ADDR");
  // Several hosts: the address must be given.
  set({{"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_TRUE(has(errorOf(), "RINGFOLD_STORE_ADDR")) << errorOf();
}

TEST_F(Bootstrap, SlurmDerivesLocalSizeHostAndPort) {
  set({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"},
       {"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "3"}, {"SLURM_JOB_ID", "123456"},
       {"SLURM_JOB_NODELIST", "node[03-05,7]"}});
  auto info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.localSize, 1);  // node 3 runs one task
  EXPECT_EQ(info.crossRank, 3);   // from SLURM_NODEID, exact even for uneven placement
  EXPECT_EQ(info.crossSize, 4);
  EXPECT_EQ(info.storeAddr, "node03");
  EXPECT_EQ(info.storePort, 29500 + 456);
  EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:SLURM_JOB_ID=123456"));
  set({{"SLURM_NTASKS", "8"}, {"SLURM_TASKS_PER_NODE", "2(x4)"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
       {"SLURM_STEP_NODELIST", "gpu-a[10-11]x,cpu1"}, {"MASTER_PORT", "1000"}});
  info = bootstrapFromEnvironment();
  EXPECT_EQ(info.localSize, 2);
  EXPECT_EQ(info.crossRank, 2);
  EXPECT_EQ(info.crossSize, 4);
  EXPECT_EQ(info.storeAddr, "gpu-a10x");  // the step's list wins over the job's
  EXPECT_EQ(info.storePort, 1000);
  set({{"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_NTASKS", "16"}});
  EXPECT_EQ(bootstrapFromEnvironment().localSize, 4);
  ::unsetenv("SLURM_LOCALID");
  EXPECT_TRUE(has(errorOf(), "SLURM_LOCALID")) << errorOf();
  set({{"SLURM_LOCALID", "0"}});
  ::unsetenv("SLURM_NTASKS_PER_NODE");
  set({{"SLURM_TASKS_PER_NODE", "2(y4)"}});
  EXPECT_TRUE(has(errorOf(), "SLURM_TASKS_PER_NODE='2(y4)'")) << errorOf();
  ::unsetenv("SLURM_TASKS_PER_NODE");
  EXPECT_TRUE(has(errorOf(), "SLURM_TASKS_PER_NODE")) << errorOf();
}

// Two srun steps of one job running at once (e.g. `srun ... &` twice in a batch script) share
// SLURM_JOB_ID and, often, their first node: each step gets its own store port and secret.
TEST_F(Bootstrap, ConcurrentSlurmStepsGetTheirOwnPortAndSecret) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS_PER_NODE", "2"},
       {"SLURM_JOB_ID", "123456"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_STEP_ID", "0"}});
  auto step0 = bootstrapFromEnvironment();
  EXPECT_EQ(step0.storePort, 29500 + 456);
  EXPECT_EQ(step0.secret, sha256Hex("ringfold-job-secret-v1:SLURM_JOB_ID.SLURM_STEP_ID=123456.0"));
  set({{"SLURM_STEP_ID", "1"}});
  auto step1 = bootstrapFromEnvironment();
  EXPECT_EQ(step1.storePort, 29500 + (456 + 97) % 1000);
  EXPECT_EQ(step1.secret, sha256Hex("ringfold-job-secret-v1:SLURM_JOB_ID.SLURM_STEP_ID=123456.1"));
  set({{"SLURM_STEP_ID", "12"}});
  EXPECT_EQ(bootstrapFromEnvironment().storePort, 29500 + (456 + 97 * 12) % 1000);
  // Slurm's pseudo steps (here the batch step, 0xFFFFFFFE) and junk count as no step.
  for (const char* pseudo : {"4294967294", "batch", ""}) {
    set({{"SLURM_STEP_ID", pseudo}});
    auto info = bootstrapFromEnvironment();
    EXPECT_EQ(info.storePort, 29500 + 456) << pseudo;
    EXPECT_EQ(info.secret, sha256Hex("ringfold-job-secret-v1:SLURM_JOB_ID=123456")) << pseudo;
  }
  // mpirun inside an allocation: its ranks on different nodes see different steps (mpirun's
  // own and the one its daemons were started in), so only the job id counts.
  ::unsetenv("SLURM_PROCID");
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "5"}, {"SLURM_STEP_ID", "3"}});
  EXPECT_EQ(bootstrapFromEnvironment().secret, sha256Hex("ringfold-job-secret-v1:SLURM_JOB_ID=123456"));
}

TEST_F(Bootstrap, DerivedSecretWarnsOnceAndAnExplicitSecretNever) {
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "r"}});
  detail::resetDerivedSecretWarning();
  ::testing::internal::CaptureStderr();
  bootstrapFromEnvironment();
  bootstrapFromEnvironment();
  std::string log = ::testing::internal::GetCapturedStderr();
  size_t first = log.find("RINGFOLD_SECRET is not set");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("RINGFOLD_SECRET is not set", first + 1), std::string::npos) << log;
  EXPECT_TRUE(has(log, "TORCHELASTIC_RUN_ID")) << log;
  detail::resetDerivedSecretWarning();
  set({{"RINGFOLD_SECRET", "given"}});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(bootstrapFromEnvironment().secret, "given");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(SlurmLists, FirstHostAndTasksPerNode) {
  EXPECT_EQ(detail::firstSlurmHost("node[03-05,7]"), "node03");
  EXPECT_EQ(detail::firstSlurmHost("node7,node8"), "node7");
  EXPECT_EQ(detail::firstSlurmHost("rack[2-3]-n[010,12]"), "rack2-n010");
  EXPECT_EQ(detail::firstSlurmHost("single"), "single");
  EXPECT_THROW(detail::firstSlurmHost("bad[1-2"), Error);
  EXPECT_EQ(detail::slurmTasksOnNode("2(x4)", -1, "V"), 2);
  EXPECT_EQ(detail::slurmTasksOnNode("3,2(x2),1", 0, "V"), 3);
  EXPECT_EQ(detail::slurmTasksOnNode("3,2(x2),1", 2, "V"), 2);
  EXPECT_EQ(detail::slurmTasksOnNode("3,2(x2),1", 3, "V"), 1);
  EXPECT_THROW(detail::slurmTasksOnNode("3,2(x2),1", 4, "V"), InvalidArgument);
  EXPECT_THROW(detail::slurmTasksOnNode("", 0, "V"), InvalidArgument);
}

// TF_CONFIG (TensorFlow's cluster JSON, Azure ML's TensorFlow jobs): read only when no other
// launcher's names are set.
TEST_F(Bootstrap, TfConfigChiefAndWorkersAreTheRanks) {
  const char* cluster =
      R"({"cluster": {"chief": ["hostA:2222"], "worker": ["hostA:2223", "hostB:2222", "hostB:2223"],
                      "ps": ["hostC:2222"]},
          "task": {"type": "worker", "index": 1}, "environment": "cloud"})";
  set({{"TF_CONFIG", cluster}});
  BootstrapInfo info = bootstrapFromEnvironment();
  EXPECT_EQ(info.source, "tf_config");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.localRank, 0);
  EXPECT_EQ(info.localSize, 2);
  EXPECT_EQ(info.crossRank, 1);
  EXPECT_EQ(info.crossSize, 2);
  EXPECT_EQ(info.storeAddr, "hostA");
  EXPECT_EQ(info.storePort, 2223);  // the first task's port + 1
  EXPECT_FALSE(info.hostStore);
  EXPECT_FALSE(info.secret.empty());  // derived from the cluster, the same on every task

  set({{"TF_CONFIG", R"({"cluster": {"chief": ["hostA:2222"], "worker": ["hostA:2223", "hostB:2222",
                         "hostB:2223"], "ps": ["hostC:2222"]}, "task": {"type": "chief", "index": 0}})"}});
  BootstrapInfo chief = bootstrapFromEnvironment();
  EXPECT_EQ(chief.rank, 0);
  EXPECT_EQ(chief.localRank, 0);
  EXPECT_TRUE(chief.hostStore);
  EXPECT_EQ(chief.secret, info.secret);
}

TEST_F(Bootstrap, TfConfigWorkersOnlyAndOverrides) {
  set({{"TF_CONFIG", R"({"cluster":{"worker":["10.0.0.1:12345","10.0.0.2:12345"]},"task":{"type":"worker","index":1}})"},
       {"RINGFOLD_STORE_PORT", "4000"}, {"RINGFOLD_SECRET", "s3cret"}});
  BootstrapInfo info = bootstrapFromEnvironment();
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 2);
  EXPECT_EQ(info.localSize, 1);
  EXPECT_EQ(info.crossRank, 1);
  EXPECT_EQ(info.storeAddr, "10.0.0.1");
  EXPECT_EQ(info.storePort, 4000);
  EXPECT_EQ(info.secret, "s3cret");
}

TEST_F(Bootstrap, TfConfigYieldsToOtherLaunchers) {
  set({{"TF_CONFIG", R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":1}})"},
       {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(bootstrapFromEnvironment().source, "torchrun");
}

TEST_F(Bootstrap, TfConfigSingleTask) {
  set({{"TF_CONFIG", R"({"cluster":{"worker":["localhost:5000"]},"task":{"type":"worker","index":0}})"}});
  BootstrapInfo info = bootstrapFromEnvironment();
  EXPECT_EQ(info.size, 1);
  EXPECT_TRUE(info.storeAddr.empty());
}

TEST_F(Bootstrap, TfConfigErrorsNameTheCause) {
  set({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0)"}});
  std::string e = errorOf();
  EXPECT_TRUE(has(e, "TF_CONFIG is not valid JSON")) << e;
  EXPECT_TRUE(has(e, "offset")) << e;
  set({{"TF_CONFIG", "not json"}});
  EXPECT_TRUE(has(errorOf(), "TF_CONFIG is not valid JSON"));
  set({{"TF_CONFIG", R"({"cluster":{"worker":["a:1"],"ps":["p:1"]},"task":{"type":"ps","index":0}})"}});
  e = errorOf();
  EXPECT_TRUE(has(e, "\"ps\" task")) << e;
  set({{"TF_CONFIG", R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":2}})"}});
  e = errorOf();
  EXPECT_TRUE(has(e, "worker 2")) << e;
  set({{"TF_CONFIG", R"({"task":{"type":"worker","index":0}})"}});
  EXPECT_TRUE(has(errorOf(), "no \"cluster\""));
  set({{"TF_CONFIG", R"({"cluster":{"worker":["a-no-port"]},"task":{"type":"worker","index":0}})"}});
  EXPECT_TRUE(has(errorOf(), "host:port"));
  // Found by tests/fuzz/tf_config_fuzz: an empty host or port was taken for an address.
  for (const char* entry : {":2222", "host:", ":"}) {
    const std::string json = std::string(R"({"cluster":{"worker":[")") + entry + R"("]},"task":{"type":"worker"}})";
    set({{"TF_CONFIG", json.c_str()}});
    e = errorOf();
    EXPECT_TRUE(has(e, "host:port") && has(e, entry)) << e;
  }
}

TEST(TfConfigJson, EscapesAndNesting) {
  auto tf = detail::parseTfConfig(
      "{\"cluster\":{\"worker\":[\"h\\u0041:1\",\"b:2\"],\"x\":[1,-2.5e3,true,false,null,{}]},"
      "\"task\":{\"type\":\"worker\",\"index\":1}}");
  ASSERT_EQ(tf.tasks.size(), 2u);
  EXPECT_EQ(tf.tasks[0], "hA:1");
  EXPECT_EQ(tf.rank, 1);
  EXPECT_THROW(detail::parseTfConfig("{\"cluster\":{}} trailing"), InvalidArgument);
  EXPECT_THROW(detail::parseTfConfig(std::string(100, '[')), InvalidArgument);
}

}  // namespace
}  // namespace ringfold::rendezvous
