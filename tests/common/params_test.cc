#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/params.h"

using namespace ringfold;

TEST(Params, DefaultThenNameThenAlias) {
  unsetenv("RINGFOLD_TIMEOUT");
  unsetenv("HOROVOD_GLOO_TIMEOUT_SECONDS");
  EXPECT_EQ(params::kTimeout.asInt(), 60);
  setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "30", 1);
  EXPECT_EQ(params::kTimeout.asInt(), 30);
  setenv("RINGFOLD_TIMEOUT", "7", 1);
  EXPECT_EQ(params::kTimeout.asInt(), 7);
  EXPECT_EQ(params::kTimeout.asSeconds().count(), 7000);
  unsetenv("RINGFOLD_TIMEOUT");
  unsetenv("HOROVOD_GLOO_TIMEOUT_SECONDS");
}

// No job waits forever with the defaults (docs/reliability.md): a silent peer (frozen, cut off)
// fails every rank after RINGFOLD_TIMEOUT, 60 s; a tensor some ranks never submit fails on every
// rank after RINGFOLD_STALL_SHUTDOWN_TIME, 10 minutes (PyTorch's NCCL watchdog), which also
// stays well above the stall warning (60 s) so one rank may evaluate or checkpoint alone.
TEST(Params, DefaultsEndEveryHangInBoundedTime) {
  for (const char* name : {"RINGFOLD_TIMEOUT", "HOROVOD_GLOO_TIMEOUT_SECONDS", "RINGFOLD_STALL_SHUTDOWN_TIME",
                           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "RINGFOLD_STALL_CHECK_TIME",
                           "HOROVOD_STALL_CHECK_TIME_SECONDS"}) {
    unsetenv(name);
  }
  EXPECT_EQ(params::kTimeout.asSeconds().count(), 60 * 1000);
  EXPECT_EQ(params::kStallShutdownTime.asSeconds().count(), 600 * 1000);
  EXPECT_EQ(params::kStallCheckTime.asSeconds().count(), 60 * 1000);
  // Still configurable, under both names; 0 turns the stall shutdown off (Horovod's default).
  setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0", 1);
  EXPECT_EQ(params::kStallShutdownTime.asSeconds().count(), 0);
  setenv("RINGFOLD_STALL_SHUTDOWN_TIME", "30", 1);
  EXPECT_EQ(params::kStallShutdownTime.asSeconds().count(), 30 * 1000);
  unsetenv("RINGFOLD_STALL_SHUTDOWN_TIME");
  unsetenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS");
}

TEST(Params, BadValueNamesTheVariable) {
  setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "soon", 1);
  try {
    params::kTimeout.asInt();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_GLOO_TIMEOUT_SECONDS='soon'"), std::string::npos) << e.what();
  }
  unsetenv("HOROVOD_GLOO_TIMEOUT_SECONDS");
}

TEST(Params, Bytes) {
  EXPECT_EQ(params::parseBytes("4096", "X"), 4096u);
  EXPECT_EQ(params::parseBytes("64K", "X"), 65536u);
  EXPECT_EQ(params::parseBytes("1M", "X"), 1048576u);
  EXPECT_EQ(params::parseBytes("2G", "X"), 2147483648u);
  EXPECT_THROW(params::parseBytes("12Q", "X"), InvalidArgument);
  EXPECT_THROW(params::parseBytes("", "X"), InvalidArgument);
}

TEST(Params, EveryNameIsUniqueAndDocumented) {
  std::set<std::string> names;
  for (const auto* p : params::all()) {
    EXPECT_TRUE(names.insert(p->name).second) << p->name;
    EXPECT_EQ(std::string(p->name).rfind("RINGFOLD_", 0), 0u) << p->name;
    EXPECT_GT(std::string(p->doc).size(), 10u) << p->name;
  }
}

// docs/environment.md's table is generated from params.def; this keeps the two in step.
TEST(Params, EnvironmentTableMatchesDeclarations) {
  std::ifstream in(RINGFOLD_SOURCE_DIR "/docs/environment.md");
  ASSERT_TRUE(in) << "docs/environment.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(params::markdownTable()), std::string::npos)
      << "docs/environment.md's table is out of date; regenerate it with "
         "scripts/update_params_table.sh (build/ringfold_params --markdown).";
}
