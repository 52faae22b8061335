// Unit tests of the launcher's CPU binding: core discovery from a made-up sysfs tree, and the
// share of the cores each local rank gets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launcher/cpu_binding.h"
#include "launcher/subprocess.h"

namespace ringfold::launcher {
namespace {

using Cpus = std::vector<int>;

// Writes cpuN/topology/{physical_package_id,core_id} under `root` for each (cpu, package, core).
void writeTopology(const std::string& root, const std::vector<std::array<int, 3>>& cpus) {
  for (auto [cpu, package, core] : cpus) {
    const std::string dir = root + "/cpu" + std::to_string(cpu) + "/topology";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/physical_package_id") << package << "\n";
    std::ofstream(dir + "/core_id") << core << "\n";
  }
}

TEST(CpuBinding, HyperthreadsOfOneCoreStayTogetherInPackageOrder) {
  testing::TempDir dir;
  // 2 packages x 2 cores x 2 threads, numbered as Linux does: siblings are N and N+4.
  writeTopology(dir.path(), {{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}, {4, 0, 0}, {5, 0, 1}, {6, 1, 0}, {7, 1, 1}});
  auto cores = machineCores({0, 1, 2, 3, 4, 5, 6, 7}, dir.path());
  EXPECT_EQ(cores, (std::vector<Core>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Two ranks: one package each.
  EXPECT_EQ(cpusForRank(cores, 0, 2), (Cpus{0, 1, 4, 5}));
  EXPECT_EQ(cpusForRank(cores, 1, 2), (Cpus{2, 3, 6, 7}));
  // Only the CPUs the launcher may use count (taskset, cpusets).
  EXPECT_EQ(machineCores({1, 5, 6}, dir.path()), (std::vector<Core>{{1, 5}, {6}}));
}

TEST(CpuBinding, UnreadableTopologyMakesEachCpuACoreAfterTheKnownOnes) {
  testing::TempDir dir;
  writeTopology(dir.path(), {{2, 0, 0}});
  EXPECT_EQ(machineCores({0, 1, 2}, dir.path()), (std::vector<Core>{{2}, {0}, {1}}));
}

TEST(CpuBinding, RanksShareCoresEvenlyOrRoundRobin) {
  const std::vector<Core> four = {{0}, {1}, {2}, {3}};
  EXPECT_EQ(cpusForRank(four, 0, 1), (Cpus{0, 1, 2, 3}));  // one rank: every core
  EXPECT_EQ(cpusForRank(four, 0, 3), (Cpus{0}));           // blocks [i*4/3, (i+1)*4/3)
  EXPECT_EQ(cpusForRank(four, 1, 3), (Cpus{1}));
  EXPECT_EQ(cpusForRank(four, 2, 3), (Cpus{2, 3}));
  // More ranks than cores: neighbours i, i+1 on different cores.
  const std::vector<Core> two = {{0}, {1}};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(cpusForRank(two, r, 5), (Cpus{r % 2})) << r;
  EXPECT_TRUE(cpusForRank({}, 0, 2).empty());
  EXPECT_TRUE(cpusForRank(four, 4, 4).empty());
}

TEST(CpuBinding, AutoBindsWhenRanksOutnumberCoresOrFillThemOverShm) {
  const std::vector<Core> two = {{0}, {1}};
  EXPECT_TRUE(bindingFor(BindPolicy::kAuto, two, 1, 2).empty());
  EXPECT_EQ(bindingFor(BindPolicy::kAuto, two, 1, 2, true), (Cpus{1}));  // ranks fill the cores over shm
  EXPECT_TRUE(bindingFor(BindPolicy::kAuto, two, 0, 1, true).empty());
  EXPECT_TRUE(bindingFor(BindPolicy::kAuto, std::vector<Core>{{0}, {1}, {2}}, 0, 2, true).empty());
  EXPECT_EQ(bindingFor(BindPolicy::kAuto, two, 1, 3), (Cpus{1}));
  EXPECT_EQ(bindingFor(BindPolicy::kCore, two, 1, 2), (Cpus{1}));
  EXPECT_TRUE(bindingFor(BindPolicy::kNone, two, 1, 3).empty());
}

TEST(CpuBinding, ListText) {
  EXPECT_EQ(cpuListText({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpuListText({5}), "5");
  EXPECT_EQ(cpuListText({}), "");
  cpu_set_t set = cpuSetOf({1, 3});
  EXPECT_TRUE(CPU_ISSET(1, &set));
  EXPECT_TRUE(CPU_ISSET(3, &set));
  EXPECT_EQ(CPU_COUNT(&set), 2);
}

TEST(CpuBinding, ThisMachineHasAtLeastOneCore) {
  auto cpus = allowedCpus();
  ASSERT_FALSE(cpus.empty());
  size_t threads = 0;
  for (const auto& c : machineCores(cpus)) threads += c.size();
  EXPECT_EQ(threads, cpus.size());
}

TEST(CpuBinding, LocalTransportPollsUnlessSocketsOrLoopbackAreChosen) {
  EXPECT_TRUE(localTransportPolls({"PATH=/bin"}));
  EXPECT_TRUE(localTransportPolls({"RINGFOLD_LOCAL_TRANSPORT=shm"}));
  EXPECT_FALSE(localTransportPolls({"RINGFOLD_LOCAL_TRANSPORT=unix"}));
  EXPECT_FALSE(localTransportPolls({"RINGFOLD_LOCAL_TRANSPORT=tcp"}));
  EXPECT_FALSE(localTransportPolls({"RINGFOLD_TRANSPORT=loopback"}));
}

}  // namespace
}  // namespace ringfold::launcher
