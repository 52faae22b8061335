// Host topology: local and cross communicators split by host id.
#include <gtest/gtest.h>

#include <mutex>

#include "collectives/collectives.h"
#include "collectives/topology.h"
#include "support/rank_threads.h"

namespace ringfold {
namespace {

TEST(Topology, HomogeneousHostsSplitIntoLocalAndCross) {
  const std::vector<std::string> hostOf = {"b", "b", "a", "a", "c", "c"};  // placed unevenly by rank
  std::mutex mu;
  std::vector<HostLayout> layouts(6);
  std::vector<float> localSums(6), crossSums(6);
  auto errors = rftest::runRanks(6, [&](Communicator& comm) {
    HostSplit split = splitByHost(comm, hostOf[comm.rank()]);
    float v = static_cast<float>(comm.rank()), local = 0, cross = 0;
    allreduce(*split.local, {&v, &local, 1, DataType::kFloat32, ReduceOp::kSum});
    allreduce(*split.cross, {&v, &cross, 1, DataType::kFloat32, ReduceOp::kSum});
    std::lock_guard<std::mutex> lock(mu);
    layouts[comm.rank()] = split.layout;
    localSums[comm.rank()] = local;
    crossSums[comm.rank()] = cross;
  });
  for (auto& e : errors) ASSERT_EQ(rftest::describe(e), "ok");
  EXPECT_EQ(layouts[0].hosts, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_TRUE(layouts[0].homogeneous);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(layouts[r].localRank, r % 2);
    EXPECT_EQ(layouts[r].localSize, 2);
    EXPECT_EQ(layouts[r].crossRank, r / 2);
    EXPECT_EQ(layouts[r].crossSize, 3);
    EXPECT_EQ(localSums[r], static_cast<float>((r / 2) * 4 + 1));   // r and its host neighbour
    EXPECT_EQ(crossSums[r], static_cast<float>(r % 2 == 0 ? 6 : 9)); // 0+2+4 or 1+3+5
  }
}

TEST(Topology, UnevenHostsAreNotHomogeneous) {
  const std::vector<std::string> hostOf = {"x", "x", "x", "y"};
  std::vector<HostLayout> layouts(4);
  std::mutex mu;
  auto errors = rftest::runRanks(4, [&](Communicator& comm) {
    HostLayout l = describeHosts(comm, hostOf[comm.rank()]);
    std::lock_guard<std::mutex> lock(mu);
    layouts[comm.rank()] = l;
  });
  for (auto& e : errors) ASSERT_EQ(rftest::describe(e), "ok");
  EXPECT_FALSE(layouts[0].homogeneous);
  EXPECT_EQ(layouts[3].localSize, 1);
  EXPECT_EQ(layouts[3].crossRank, 1);
  EXPECT_EQ(layouts[3].crossSize, 2);   // local rank 0 exists on both hosts
  EXPECT_EQ(layouts[2].crossSize, 1);   // local rank 2 only on host x
}

// What ringfoldrun -np 3 -H a:1,b:2 tells its ranks (launcher/rank_layout.h): rank 0 alone on a,
// ranks 1 and 2 on b. hostIdFromLaunch() must name the hosts so that describeHosts() gives back
// the launcher's own local and cross values. (The cross rank is no host name here: ranks 0 and 2
// both have cross rank 0.)
TEST(Topology, HostIdsFromAnUnevenLaunchGiveTheLaunchersLayout) {
  const std::vector<Topology> launched = {
      {0, 3, 0, 1, 0, 2},  // a, local 0: cross rank 0 of the 2 hosts with a local rank 0
      {1, 3, 0, 2, 1, 2},  // b, local 0: cross rank 1 of 2
      {2, 3, 1, 2, 0, 1},  // b, local 1: the only host with a local rank 1
  };
  EXPECT_NE(hostIdFromLaunch(launched[0]), hostIdFromLaunch(launched[1]));
  EXPECT_EQ(hostIdFromLaunch(launched[1]), hostIdFromLaunch(launched[2]));
  std::vector<HostLayout> layouts(3);
  std::mutex mu;
  auto errors = rftest::runRanks(3, [&](Communicator& comm) {
    HostLayout l = describeHosts(comm, hostIdFromLaunch(launched[comm.rank()]));
    std::lock_guard<std::mutex> lock(mu);
    layouts[comm.rank()] = l;
  });
  for (auto& e : errors) ASSERT_EQ(rftest::describe(e), "ok");
  for (int r = 0; r < 3; ++r) {
    const Topology& want = launched[r];
    const HostLayout& got = layouts[r];
    EXPECT_EQ(std::vector<int>({got.rank, got.size, got.localRank, got.localSize, got.crossRank, got.crossSize}),
              std::vector<int>({want.rank, want.size, want.localRank, want.localSize, want.crossRank, want.crossSize}))
        << "rank " << r;
  }
  EXPECT_FALSE(layouts[0].homogeneous);
  // Without a launcher's layout: the machine's name.
  Topology unknown;
  unknown.crossRank = -1;
  EXPECT_EQ(hostIdFromLaunch(unknown), thisHostName());
}

}  // namespace
}  // namespace ringfold
