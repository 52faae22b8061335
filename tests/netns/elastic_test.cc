// Elastic ringfoldrun across hosts, on the emulated cluster (netns_cluster.h): the launcher in
// h1 with --host-discovery-script, fake workers (tests/launcher/elastic_worker.cc) on h1 and, over
// ssh, on h2 and h3. Killing every worker of one host blacklists that host; the survivors on
// the other hosts form the next incarnation, in their old rank order, and the job then ends
// with exit 0 and no process left in any namespace.
//
// Skips (exit 77, reason printed) when not root or without namespaces or sshd.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>

#include "launcher/elastic_events.h"
#include "launcher/subprocess.h"
#include "netns/netns_cluster.h"

namespace ringfold::launcher::testing {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ElasticMultiHost, KillingEveryWorkerOfOneHostBlacklistsIt) {
  TempDir dir;  // shared: every host sees this file system
  const std::string h1 = NetnsCluster::ip(1), h2 = NetnsCluster::ip(2), h3 = NetnsCluster::ip(3);
  std::ofstream(dir.path() + "/hosts") << h1 << "\n" << h2 << ":2\n" << h3 << "\n";
  const std::string script = dir.path() + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\ncat " << dir.path() << "/hosts\n";
  chmod(script.c_str(), 0755);
  Args argv = {RINGFOLDRUN_PATH};
  for (const auto& o : gCluster->sshOptions()) argv.push_back(o);
  Args rest = {"-np",
               "4",
               "--min-np",
               "2",
               "--start-timeout",
               "20",
               "--grace-period",
               "1",
               "-x",
               "RINGFOLD_TIMEOUT=2",
               "-x",
               "FAKE_PEER_TIMEOUT=5",
               "--host-discovery-script",
               script,
               ELASTIC_WORKER_PATH,
               dir.path()};
  argv.insert(argv.end(), rest.begin(), rest.end());
  Subprocess launcher(gCluster->inHost(1, argv));

  auto m1 = membersOf(dir.path(), 1, 4, 30s);
  ASSERT_EQ(m1.size(), 4u) << launcher.finish(1s).err;
  EXPECT_EQ(m1[0], h1 + ":0:0");
  EXPECT_EQ(m1[1], h2 + ":0:1");
  EXPECT_EQ(m1[2], h2 + ":1:2");
  EXPECT_EQ(m1[3], h3 + ":0:3");
  for (int r : {1, 2}) {
    const pid_t p = workerPid(dir.path(), m1[r]);
    ASSERT_GT(p, 0);
    kill(p, SIGKILL);
  }
  auto m2 = membersOf(dir.path(), 2, 2, 20s);
  ASSERT_EQ(m2.size(), 2u) << launcher.finish(1s).err;
  EXPECT_EQ(m2[0], m1[0]);
  EXPECT_EQ(m2[1], m1[3]);
  auto joins = waitForEvents(dir.path(), "join " + m1[3] + " inc=2", 1, 1s);
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_TRUE(contains(joins[0], "rank=1 size=2 local=0/1 cross=1/2 host=" + h3)) << joins[0];
  std::ofstream(dir.path() + "/finish") << "1";
  Finished f = launcher.finish(30s);
  EXPECT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "blacklisting host " + h2 + ": worker " + h2)) << f.err;
  EXPECT_TRUE(contains(f.err, "incarnation 2: 2 worker(s) on " + h1 + ":1," + h3 + ":1 (2 kept, 0 new)")) << f.err;
  auto left = gCluster->leftovers(6s);
  std::string all;
  for (const auto& l : left) all += "\n  " + l;
  EXPECT_TRUE(left.empty()) << "processes left behind:" << all;
}

}  // namespace
}  // namespace ringfold::launcher::testing

int main(int argc, char** argv) { return ringfold::launcher::testing::runSuiteOnCluster(argc, argv, "elastic"); }
