// The C ABI's store access (ringfold_store_*) and the two elastic-mode rules of init
// (RINGFOLD_INCARNATION names the store keys; RINGFOLD_ELASTIC refuses process sets).
//   CStore.*            one process: the in-memory store of a job of one, the store a rank 0 hosts
//                       without a launcher, bad arguments, and init's elastic rules
//   CStoreMultiprocess.* ranks as processes under the built ringfoldrun (c_store_worker.cc), each
//                       job under a hard deadline
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bindings/c/ringfold.h"
#include "launcher/subprocess.h"
#include "tests/bindings/worker_job.h"

namespace {

using namespace std::chrono_literals;
using ringfold::launcher::testing::TempDir;

std::string lastError() { return ringfold_last_error(); }
bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

const char* const kLayoutVars[] = {
    "RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL_RANK", "RINGFOLD_LOCAL_SIZE", "RINGFOLD_CROSS_RANK",
    "RINGFOLD_CROSS_SIZE", "RINGFOLD_STORE_ADDR", "RINGFOLD_STORE_PORT", "RINGFOLD_SECRET", "RINGFOLD_STORE_SERVER",
    "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
    "RINGFOLD_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", "RINGFOLD_ELASTIC", "HOROVOD_ELASTIC",
    "RINGFOLD_INCARNATION"};

class CStore : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kLayoutVars) unsetenv(v);
  }
  void TearDown() override {
    horovod_shutdown();
    for (const char* v : kLayoutVars) unsetenv(v);
  }
};

std::string get(const char* key, double timeout, int* rc) {
  std::vector<char> buf(16);
  size_t len = 0;
  *rc = ringfold_store_get(key, timeout, buf.data(), buf.size(), &len);
  if (*rc == RINGFOLD_INVALID_ARGUMENT && len > buf.size()) {
    buf.resize(len);
    *rc = ringfold_store_get(key, timeout, buf.data(), buf.size(), &len);
  }
  return *rc == RINGFOLD_OK ? std::string(buf.data(), len) : std::string();
}

int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST_F(CStore, OneRankWithoutAStoreUsesItsOwnMemoryBeforeDuringAndAfterInit) {
  const std::string value = "a value longer than sixteen bytes";
  ASSERT_EQ(ringfold_store_set("k", value.data(), value.size()), RINGFOLD_OK) << lastError();
  EXPECT_EQ(ringfold_store_check("k"), 1);
  EXPECT_EQ(ringfold_store_check("absent"), 0);
  int rc = 0;
  EXPECT_EQ(get("k", 1.0, &rc), value);
  EXPECT_EQ(rc, RINGFOLD_OK) << lastError();
  // A buffer too small: nothing copied, the length reported.
  char small[4] = {'x', 'x', 'x', 'x'};
  size_t len = 0;
  EXPECT_EQ(ringfold_store_get("k", 1.0, small, sizeof small, &len), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_EQ(len, value.size());
  EXPECT_TRUE(contains(lastError(), "more than the buffer's 4")) << lastError();
  EXPECT_EQ(small[0], 'x');
  // Absent: IN_PROGRESS after the timeout, naming the key.
  EXPECT_EQ(ringfold_store_get("absent", 0.1, small, sizeof small, &len), RINGFOLD_IN_PROGRESS);
  EXPECT_TRUE(contains(lastError(), "absent")) << lastError();
  // An empty value.
  ASSERT_EQ(ringfold_store_set("empty", nullptr, 0), RINGFOLD_OK) << lastError();
  EXPECT_EQ(ringfold_store_get("empty", 1.0, nullptr, 0, &len), RINGFOLD_OK) << lastError();
  EXPECT_EQ(len, 0u);
  // The same store while the engine runs and after it stopped.
  ASSERT_TRUE(horovod_init(nullptr, 0, nullptr, nullptr, 0)) << lastError();
  EXPECT_EQ(ringfold_store_check("k"), 1);
  horovod_shutdown();
  EXPECT_EQ(get("k", 1.0, &rc), value);
}

TEST_F(CStore, BadArgumentsAreNamed) {
  size_t len = 0;
  char buf[4];
  EXPECT_EQ(ringfold_store_set(nullptr, "v", 1), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "ringfold_store_set: key is NULL")) << lastError();
  EXPECT_EQ(ringfold_store_set("", "v", 1), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "key is empty")) << lastError();
  EXPECT_EQ(ringfold_store_set("k", nullptr, 3), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "value is NULL")) << lastError();
  EXPECT_EQ(ringfold_store_get("k", 1.0, buf, sizeof buf, nullptr), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "len is NULL")) << lastError();
  EXPECT_EQ(ringfold_store_get("k", 1.0, nullptr, 4, &len), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "buf is NULL")) << lastError();
  EXPECT_EQ(ringfold_store_check(nullptr), -RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "ringfold_store_check: key is NULL")) << lastError();
}

// Rank 0 of a job started without a launcher hosts the store: the first store call starts the
// server, which a client with the same variables (here: this process as rank 1) reaches.
TEST_F(CStore, RankZeroWithoutALauncherHostsTheStore) {
  const std::string port = std::to_string(freePort());
  setenv("RINGFOLD_RANK", "0", 1);
  setenv("RINGFOLD_SIZE", "2", 1);
  setenv("RINGFOLD_LOCAL_RANK", "0", 1);
  setenv("RINGFOLD_LOCAL_SIZE", "2", 1);
  setenv("RINGFOLD_STORE_ADDR", "127.0.0.1", 1);
  setenv("RINGFOLD_STORE_PORT", port.c_str(), 1);
  setenv("RINGFOLD_SECRET", "store-test-secret", 1);
  ASSERT_EQ(ringfold_store_set("hosted", "yes", 3), RINGFOLD_OK) << lastError();
  setenv("RINGFOLD_RANK", "1", 1);
  setenv("RINGFOLD_LOCAL_RANK", "1", 1);
  int rc = 0;
  EXPECT_EQ(get("hosted", 5.0, &rc), "yes") << lastError();
  // The wrong secret: refused, with the store's reason.
  setenv("RINGFOLD_SECRET", "another-secret", 1);
  setenv("RINGFOLD_START_TIMEOUT", "2", 1);
  EXPECT_LT(ringfold_store_check("hosted"), 0);
  EXPECT_TRUE(contains(lastError(), "wrong secret")) << lastError();
  unsetenv("RINGFOLD_START_TIMEOUT");
}

TEST_F(CStore, IncarnationMustBeAPositiveInteger) {
  for (const char* bad : {"0", "-2", "two"}) {
    setenv("RINGFOLD_INCARNATION", bad, 1);
    EXPECT_EQ(ringfold_init(nullptr, 0, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT) << bad;
    EXPECT_TRUE(contains(lastError(), "RINGFOLD_INCARNATION")) << lastError();
  }
  setenv("RINGFOLD_INCARNATION", "3", 1);
  EXPECT_EQ(ringfold_init(nullptr, 0, nullptr, nullptr, 0), RINGFOLD_OK) << lastError();
}

TEST_F(CStore, ElasticModeRefusesProcessSets) {
  setenv("RINGFOLD_ELASTIC", "1", 1);
  const int ranks[] = {0}, sizes[] = {1};
  EXPECT_EQ(ringfold_init(nullptr, 0, ranks, sizes, 1), RINGFOLD_INVALID_ARGUMENT);
  for (const char* part : {"not supported in elastic mode (RINGFOLD_ELASTIC=1)", "1 static process set", "#4021"}) {
    EXPECT_TRUE(contains(lastError(), part)) << lastError() << " lacks " << part;
  }
  setenv("HOROVOD_DYNAMIC_PROCESS_SETS", "1", 1);
  EXPECT_EQ(ringfold_init(nullptr, 0, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "dynamic process sets (HOROVOD_DYNAMIC_PROCESS_SETS=1)")) << lastError();
  unsetenv("HOROVOD_DYNAMIC_PROCESS_SETS");
  // Horovod's name for the switch works too; without sets, init succeeds.
  unsetenv("RINGFOLD_ELASTIC");
  setenv("HOROVOD_ELASTIC", "1", 1);
  EXPECT_EQ(ringfold_init(nullptr, 0, ranks, sizes, 1), RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "HOROVOD_ELASTIC=1")) << lastError();
  EXPECT_EQ(ringfold_init(nullptr, 0, nullptr, nullptr, 0), RINGFOLD_OK) << lastError();
  // Outside elastic mode the same set is fine.
  horovod_shutdown();
  unsetenv("HOROVOD_ELASTIC");
  EXPECT_EQ(ringfold_init(nullptr, 0, ranks, sizes, 1), RINGFOLD_OK) << lastError();
}

rftest::Job runStoreWorkers(const std::string& scenario, std::vector<std::string> launcherArgs = {}) {
  TempDir dir;
  return rftest::runWorkerJob(STORE_WORKER_PATH, scenario, std::move(launcherArgs), dir.path(), 90s);
}

TEST(CStoreMultiprocess, RanksShareTheLaunchersStoreBeforeInitAndBetweenInits) {
  rftest::expectClean(runStoreWorkers("store"));
}

TEST(CStoreMultiprocess, ARankLaidOutAsAJobOfOneStillReachesTheLaunchersStore) {
  rftest::expectClean(runStoreWorkers("single"));
}

// Rank 0 has made one more init than the others; RINGFOLD_INCARNATION makes them meet anyway.
TEST(CStoreMultiprocess, IncarnationNamesTheStoreKeysOfAnInit) {
  const rftest::Job job = runStoreWorkers("incarnation");
  rftest::expectClean(job);
  EXPECT_EQ(rftest::sameOnEveryRank(job, "init"), "ok");
}

// The control: without it, rank 0's second init and the others' first do not meet.
TEST(CStoreMultiprocess, WithoutIncarnationInitsOfDifferentCountsDoNotMeet) {
  const rftest::Job job = runStoreWorkers("no_incarnation", {"-x", "RINGFOLD_START_TIMEOUT=3"});
  EXPECT_FALSE(job.finished.timedOut) << job.transcript();
  EXPECT_EQ(rftest::sameOnEveryRank(job, "init"), "failed");
}

}  // namespace
