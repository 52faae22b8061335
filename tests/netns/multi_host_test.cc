// ringfoldrun across hosts, on an emulated cluster (netns_cluster.h): 4 network namespaces
// with their own sshd, reached by address (no /etc/hosts, no DNS). The launcher runs inside
// h1, so h1's ranks are local (its address is one of "this machine's") and the others start
// over ssh with the test's own keys and known_hosts.
//
// Success: an 8-rank all_reduce_perf (#wrong 0), each rank's identity, environment and
// directory, per-rank log files, the secret on no command line, start-up time (printed, not
// asserted). Failures, each a clear error naming the host, within the start timeout, and no
// process left in any namespace: an unreachable host, a refused key, a host whose sshd hangs,
// a remote rank exiting non-zero, ranks killed on one host, one host's link taken down, the launcher SIGTERMed and SIGKILLed.
//
// Skips (exit 77, reason printed) when not root or without namespaces or sshd.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "launcher/rank_layout.h"
#include "launcher/subprocess.h"
#include "netns/netns_cluster.h"

namespace ringfold::launcher::testing {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;


bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string hostList(const std::vector<int>& slots) {
  std::string s;
  for (size_t h = 0; h < slots.size(); ++h) {
    s += (s.empty() ? "" : ",") + NetnsCluster::ip(static_cast<int>(h) + 1) + ":" + std::to_string(slots[h]);
  }
  return s;
}

// ringfoldrun inside h1 with the cluster's ssh settings, then `args`.
Args launcher(const Args& args, const std::string& identity = "id_user") {
  Args a = {RINGFOLDRUN_PATH};
  for (const auto& o : gCluster->sshOptions(identity)) a.push_back(o);
  a.insert(a.end(), args.begin(), args.end());
  return gCluster->inHost(1, a);
}

std::string nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::to_string(static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
}

void expectNoLeftovers(std::chrono::milliseconds within = 6s) {
  auto left = gCluster->leftovers(within);
  std::string all;
  for (const auto& l : left) all += "\n  " + l;
  EXPECT_TRUE(left.empty()) << "processes left behind:" << all;
}

// A rank script that records its pid in `dir` (shared: every host sees this file system).
std::string recordPid(const TempDir& dir) {
  return "echo $$ > " + dir.path() + "/tmp.$RINGFOLD_RANK && mv " + dir.path() + "/tmp.$RINGFOLD_RANK " +
         dir.path() + "/pid.$RINGFOLD_RANK; ";
}

TEST(MultiHost, AllReduceAcrossFourHosts) {
  Finished f = run(launcher({"-np", "8", "-H", hostList({2, 2, 2, 2}), "--start-timeout", "20",
                             "--verbose", "-x", "RINGFOLD_TIMEOUT=30", "-x", "RINGFOLD_LOG_LEVEL=debug",
                             ALL_REDUCE_PERF_PATH, "-b", "1M", "-e", "1M", "-c", "1"}),
                   90s);
  ASSERT_FALSE(f.timedOut) << f.out << f.err;
  EXPECT_EQ(f.exitCode, 0) << f.out << f.err;
  // Each rank's one same-host peer is joined through shared memory, the six on other hosts by TCP.
  const std::string all = f.out + f.err;
  size_t mixed = 0;
  for (size_t at = 0; (at = all.find("connected to 7 peers (1 on this host through shm)", at)) != std::string::npos; ++at) {
    ++mixed;
  }
  EXPECT_EQ(mixed, 8u) << all;
  // "[0]<stdout>:     1048576        262144     float     sum      -1  ...  0  ...  0"
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      f.out, m, std::regex(R"(\[0\]<stdout>: +1048576 +262144 +float +sum +-1 +\S+ +\S+ +\S+ +(\d+) +\S+ +\S+ +\S+ +(\d+)\n)")))
      << f.out;
  EXPECT_EQ(m[1], "0") << "#wrong out-of-place";
  EXPECT_EQ(m[2], "0") << "#wrong in-place";
  EXPECT_TRUE(contains(f.out, "Out of bounds values : 0 OK")) << f.out;
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(contains(f.out, "#  Rank  " + std::to_string(r) + " Group")) << f.out;
  std::smatch t;
  if (std::regex_search(f.err, t, std::regex(R"(all 8 ranks started ([0-9.]+) s after launch)"))) {
    std::printf("[ measure  ] all_reduce_perf: all 8 ranks on 4 hosts started %s s after launch\n",
                t[1].str().c_str());
  }
  EXPECT_TRUE(contains(f.err, "rendezvous store listening on 10.89.0.1:")) << f.err;
  expectNoLeftovers();
}

TEST(MultiHost, RanksGetTheirIdentityEnvironmentDirectoryAndLogFiles) {
  TempDir dir;
  // Uneven slots from a hostfile, so cross ranks differ from rank / local size.
  const std::string hostfile = dir.path() + "/hosts";
  std::ofstream(hostfile) << "# emulated cluster\n" << NetnsCluster::ip(1) << " slots=1\n"
                          << NetnsCluster::ip(2) << " slots=3\n\n" << NetnsCluster::ip(3)
                          << " slots=2  # two\n" << NetnsCluster::ip(4) << "\n";
  const std::string logs = dir.path() + "/logs";
  const std::string script =
      "echo \"id R=$RINGFOLD_RANK S=$RINGFOLD_SIZE LR=$RINGFOLD_LOCAL_RANK LS=$RINGFOLD_LOCAL_SIZE "
      "CR=$RINGFOLD_CROSS_RANK CS=$RINGFOLD_CROSS_SIZE HR=$HOROVOD_RANK HCR=$HOROVOD_CROSS_RANK "
      "HOST=$HOROVOD_HOSTNAME ADDR=$RINGFOLD_STORE_ADDR IF=$RINGFOLD_SOCKET_IFNAME FOO=$FOO "
      "LOG=$RINGFOLD_LOG_LEVEL UNBUF=$PYTHONUNBUFFERED SECRETLEN=${#RINGFOLD_SECRET} PWD=$(pwd) "
      "NET=$(ip -4 -o addr show eth0 | awk '{print $4}')\"; "
      "echo err-$RINGFOLD_RANK >&2; ps -eo args > " + dir.path() + "/ps.$RINGFOLD_RANK; "
      "echo $RINGFOLD_SECRET > " + dir.path() + "/secret.$RINGFOLD_RANK";
  Finished f = run(launcher({"-np", "7", "--hostfile", hostfile, "--network-interface", "eth0",
                             "--output-filename", logs, "-x", "FOO=bar", "-x", "PATH",
                             "--start-timeout", "20", "sh", "-c", script}),
                   60s, {"RINGFOLD_LOG_LEVEL=info"});
  ASSERT_FALSE(f.timedOut) << f.err;
  ASSERT_EQ(f.exitCode, 0) << f.out << f.err;

  auto layout = computeRankLayout({{"1", 1}, {"2", 3}, {"3", 2}, {"4", 1}}, 7);
  const std::string cwd = std::filesystem::current_path().string();
  const std::regex idLine(R"(\[(\d)\]<stdout>:(id .*))");
  std::map<int, std::string> ids;
  for (const auto& line : splitLines(f.out)) {
    std::smatch m;
    if (std::regex_match(line, m, idLine)) ids[std::stoi(m[1])] = m[2];
  }
  ASSERT_EQ(ids.size(), 7u) << f.out << f.err;
  for (const auto& s : layout) {
    const std::string ip = NetnsCluster::ip(std::stoi(s.host));
    const std::string want = "id R=" + std::to_string(s.rank) + " S=7 LR=" + std::to_string(s.localRank) +
                             " LS=" + std::to_string(s.localSize) + " CR=" + std::to_string(s.crossRank) +
                             " CS=" + std::to_string(s.crossSize) + " HR=" + std::to_string(s.rank) +
                             " HCR=" + std::to_string(s.crossRank) + " HOST=" + ip +
                             " ADDR=10.89.0.1 IF==eth0 FOO=bar LOG=info UNBUF=1 SECRETLEN=64 PWD=" + cwd +
                             " NET=" + ip + "/24";
    EXPECT_EQ(ids[s.rank], want) << "rank " << s.rank;
    // --output-filename: DIR/rank.N/{stdout,stderr}, without the prefix.
    std::ifstream out(logs + "/rank." + std::to_string(s.rank) + "/stdout");
    std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, ids[s.rank] + "\n");
    std::ifstream err(logs + "/rank." + std::to_string(s.rank) + "/stderr");
    std::string etext((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    EXPECT_EQ(etext, "err-" + std::to_string(s.rank) + "\n");
  }
  // The job secret was on no command line, on any host, while the ranks ran.
  std::string secret;
  std::ifstream(dir.path() + "/secret.0") >> secret;
  ASSERT_EQ(secret.size(), 64u);
  for (int r = 0; r < 7; ++r) {
    std::ifstream ps(dir.path() + "/ps." + std::to_string(r));
    std::string text((std::istreambuf_iterator<char>(ps)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "sshd")) << "ps saw the cluster's processes";
    EXPECT_FALSE(contains(text, secret)) << "the secret is on a command line:\n" << text;
  }
  expectNoLeftovers();
}

TEST(MultiHost, StartUpTimeToJoinTheCommunicator) {
  // Printed, not asserted: the machine is shared and noisy.
  for (int round = 0; round < 3; ++round) {
    Finished f = run(launcher({"-np", "8", "-H", hostList({2, 2, 2, 2}), "--start-timeout", "20",
                               "--verbose", "-x", "RINGFOLD_PROBE_T0_NS=" + nowNs(), JOIN_PROBE_PATH}),
                     60s);
    ASSERT_FALSE(f.timedOut) << f.err;
    ASSERT_EQ(f.exitCode, 0) << f.out << f.err;
    std::smatch m, s;
    ASSERT_TRUE(std::regex_search(f.out, m, std::regex(R"(8 ranks joined the communicator ([0-9.]+) s after launch)")))
        << f.out;
    std::regex_search(f.err, s, std::regex(R"(all 8 ranks started ([0-9.]+) s)"));
    std::printf("[ measure  ] 4 emulated hosts, 8 ranks: every rank started %s s, every rank joined the "
                "communicator %s s after launch\n", s.size() > 1 ? s[1].str().c_str() : "?", m[1].str().c_str());
  }
  expectNoLeftovers();
}

TEST(MultiHost, UnreachableHostIsNamedWithinTheStartTimeout) {
  // 10.89.0.99 is on the cluster's subnet, but nobody answers there.
  Finished f = run(launcher({"-np", "4", "-H", hostList({1, 1}) + ",10.89.0.99:2", "--start-timeout", "5",
                             "sh", "-c", "exec sleep 60"}),
                   30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_NE(f.exitCode, 0);
  EXPECT_LT(f.seconds, 5.0 + 4.0) << "start timeout + grace period + margin";
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(ringfoldrun: host 10\.89\.0\.99 did not start rank [23])"))) << f.err;
  expectNoLeftovers();
}

TEST(MultiHost, RefusedKeyIsNamed) {
  Finished f = run(launcher({"-np", "4", "-H", hostList({2, 2}), "--start-timeout", "10", "sh", "-c",
                             "exec sleep 60"},
                            "id_refused"),
                   30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 255) << f.err;
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(std::regex_search(
      f.err, std::regex(R"(ringfoldrun: host 10\.89\.0\.2 did not start rank [23] \(ssh failed: .*Permission denied \(publickey\))")))
      << f.err;
  expectNoLeftovers();
}

TEST(MultiHost, HostWhoseSshdHangsTimesOut) {
  const std::string pid = gCluster->sshdPid(3);
  ASSERT_FALSE(pid.empty());
  ASSERT_EQ(NetnsCluster::shell("kill -STOP " + pid), 0);
  Finished f = run(launcher({"-np", "6", "-H", hostList({2, 2, 2}), "--start-timeout", "3", "sh", "-c",
                             "exec sleep 60"}),
                   30s);
  NetnsCluster::shell("kill -CONT " + pid);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 1) << f.err;
  EXPECT_LT(f.seconds, 3.0 + 4.0);
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(host 10\.89\.0\.3 did not start rank [45] within 3 s)"))) << f.err;
  expectNoLeftovers();
}

// Starts 8 ranks of `sleep` across the 4 hosts and waits until all have recorded their pids.
struct SleepingJob {
  TempDir dir;
  std::unique_ptr<Subprocess> launcher;  // ringfoldrun (inside h1)
  explicit SleepingJob(const Args& extra = {}) {
    Args args = {"-np", "8", "-H", hostList({2, 2, 2, 2}), "--start-timeout", "6", "--grace-period", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"sh", "-c", recordPid(dir) + "exec sleep 60"});
    launcher = std::make_unique<Subprocess>(testing::launcher(args));
  }
};

TEST(MultiHost, RemoteRankFailingStopsTheJobWithItsStatus) {
  TempDir dir;
  Finished f = run(launcher({"-np", "8", "-H", hostList({2, 2, 2, 2}), "--start-timeout", "10",
                             "--grace-period", "1", "sh", "-c",
                             "if [ $RINGFOLD_RANK = 5 ]; then echo bad input >&2; exit 3; fi; exec sleep 60"}),
                   30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 3) << f.err;
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(contains(f.err, "[5]<stderr>:bad input")) << f.err;
  EXPECT_TRUE(contains(f.err, "ringfoldrun: rank 5 on host 10.89.0.3 exited with status 3")) << f.err;
  expectNoLeftovers();
}

TEST(MultiHost, RanksKilledOnOneHostStopTheJob) {
  SleepingJob job;
  ASSERT_EQ(waitForPidFiles(job.dir.path(), 8, 20s).size(), 8u);
  // Kill every process of the job on h3 (sshd's listener aside): the ranks, the remote shells.
  const std::string sshd = gCluster->sshdPid(3);
  NetnsCluster::shell("for p in $(ip netns pids " + gCluster->ns(3) + "); do [ $p = " + sshd +
                      " ] || kill -KILL $p; done");
  Finished f = job.launcher->finish(20s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_NE(f.exitCode, 0);
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(ringfoldrun: (rank [45] on host 10\.89\.0\.3|lost the connection to host 10\.89\.0\.3))")))
      << f.err;
  expectNoLeftovers();
}

TEST(MultiHost, HostWhoseLinkGoesDownStopsTheJob) {
  SleepingJob job;
  ASSERT_EQ(waitForPidFiles(job.dir.path(), 8, 20s).size(), 8u);
  const std::string link = "ip -n " + gCluster->ns(3) + " link set eth0 ";
  ASSERT_EQ(NetnsCluster::shell(link + "down"), 0);
  Finished f = job.launcher->finish(30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 255) << f.err;
  EXPECT_LT(f.seconds, 6.0 + 4.0 + 2.0) << "ssh's keepalives follow the start timeout";
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(ringfoldrun: lost the connection to host 10\.89\.0\.3 \(rank [45])")))
      << f.err;
  // The cut-off host's sshd gives up on the launcher (ClientAliveInterval), which closes the
  // remote shell's stdin, which stops the rank: nothing is left there either.
  expectNoLeftovers(10s);
  NetnsCluster::shell(link + "up");
}

TEST(MultiHost, SigtermToTheLauncherStopsEveryHost) {
  SleepingJob job;
  ASSERT_EQ(waitForPidFiles(job.dir.path(), 8, 20s).size(), 8u);
  job.launcher->signal(SIGTERM);
  Finished f = job.launcher->finish(20s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 143) << f.err;
  EXPECT_LT(f.seconds, 30.0);
  expectNoLeftovers();
}

TEST(MultiHost, SigkilledLauncherTakesEveryHostAlong) {
  SleepingJob job;
  ASSERT_EQ(waitForPidFiles(job.dir.path(), 8, 20s).size(), 8u);
  job.launcher->signal(SIGKILL);
  Finished f = job.launcher->finish(10s);
  EXPECT_EQ(f.exitCode, 128 + SIGKILL);
  expectNoLeftovers();
}

}  // namespace
}  // namespace ringfold::launcher::testing

int main(int argc, char** argv) {
  return ringfold::launcher::testing::runSuiteOnCluster(argc, argv, "launcher");
}
