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
  EXPECT_EQ(params::kTimeout.asInt(), 300);
  setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "30", 1);
  EXPECT_EQ(params::kTimeout.asInt(), 30);
  setenv("RINGFOLD_TIMEOUT", "7", 1);
  EXPECT_EQ(params::kTimeout.asInt(), 7);
  EXPECT_EQ(params::kTimeout.asSeconds().count(), 7000);
  unsetenv("RINGFOLD_TIMEOUT");
  unsetenv("HOROVOD_GLOO_TIMEOUT_SECONDS");
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

// The README's table is generated from params.def; this keeps the two in step.
TEST(Params, ReadmeTableMatchesDeclarations) {
  std::ifstream in(RINGFOLD_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(params::markdownTable()), std::string::npos)
      << "README.md's environment table is out of date; regenerate it with "
         "`build/ringfold_params --markdown` (see scripts/update_readme_params.sh).";
}
