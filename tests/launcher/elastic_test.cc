// Elastic ringfoldrun (--host-discovery-script, src/launcher/elastic_job.h):
//   * unit: discovery output parsing, the bounded script runner, the elastic flags;
//   * multiprocess: the built ringfoldrun with fake workers (elastic_worker.cc) that speak the
//     protocol through the store, on hosts 127.0.0.1-3 (distinct local host names, so one machine
//     stands in for several hosts and blacklisting one leaves the others). The discovery script
//     cats a file the test rewrites.
// Every launcher run has a hard deadline (Subprocess::finish kills it) and every wait for an
// event is bounded, so a regression fails instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <thread>

#include "launcher/elastic_events.h"
#include "launcher/host_discovery.h"
#include "launcher/launch_options.h"
#include "launcher/rank_layout.h"
#include "launcher/subprocess.h"

namespace ringfold::launcher::testing {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

// ---- unit: discovery ------------------------------------------------------------------

// The message of the E that `f` throws, or "" if it throws none.
template <class E, class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

std::string discoveryErrorOf(const std::string& text) {
  return errorOf<DiscoveryError>([&] { parseDiscoveryOutput(text, 1); });
}

TEST(HostDiscovery, ParsesHostsAndSlotsInOrder) {
  auto h = parseDiscoveryOutput("  node2:4 \n\nnode1\n10.0.0.7:0\nnode1\n", 2);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].host, "node2");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].host, "node1");
  EXPECT_EQ(h[1].slots, 2);  // --slots for a line without ":slots"; the repeated line counts once
  EXPECT_EQ(h[2].host, "10.0.0.7");
  EXPECT_EQ(h[2].slots, 0);
  EXPECT_TRUE(parseDiscoveryOutput("", 1).empty());  // no host available now: valid
  EXPECT_TRUE(parseDiscoveryOutput("\n \n", 1).empty());
  EXPECT_EQ(hostsText(parseDiscoveryOutput("a:2\nb", 1)), "a:2,b:1");
}

TEST(HostDiscovery, BadLinesAreNamed) {
  EXPECT_NE(discoveryErrorOf("a\nb:x\n").find("line 2 'b:x': slots must be a number 0 or more, got 'x'"),
            std::string::npos);
  EXPECT_NE(discoveryErrorOf("a:-1").find("got '-1'"), std::string::npos);
  EXPECT_NE(discoveryErrorOf("a:2\na:3").find("host 'a' is listed again with other slots"), std::string::npos);
  EXPECT_NE(discoveryErrorOf("a b").find("line 1 'a b': expected host or host:slots"), std::string::npos);
  EXPECT_NE(discoveryErrorOf("a,b").find("expected host or host:slots"), std::string::npos);
  EXPECT_NE(discoveryErrorOf("-oProxyCommand=x").find("may not start with '-'"), std::string::npos);
  EXPECT_NE(discoveryErrorOf(":2").find("line 1"), std::string::npos);
}

std::string runErrorOf(const std::string& script, std::chrono::milliseconds timeout) {
  return errorOf<DiscoveryError>([&] { runDiscoveryScript(script, timeout); });
}

TEST(HostDiscovery, ScriptRunIsBoundedAndFailuresAreNamed) {
  EXPECT_EQ(runDiscoveryScript("printf 'a:2\\nb\\n'", 5s), "a:2\nb\n");
  EXPECT_NE(runErrorOf("echo nope >&2; exit 3", 5s).find("exited with status 3: nope"), std::string::npos);
  EXPECT_NE(runErrorOf("kill -SEGV $$", 5s).find("was killed by signal SIGSEGV"), std::string::npos);
  auto t0 = Clock::now();
  EXPECT_NE(runErrorOf("sleep 30", 300ms).find("did not finish within 0.3 s"), std::string::npos);
  // A background child that keeps the pipes open does not hold the run once the script exited.
  EXPECT_EQ(runDiscoveryScript("sleep 30 & echo host1", 5s), "host1\n");
  EXPECT_LT(Clock::now() - t0, 10s);  // a bound, not a speed check: each run above is bounded
}

TEST(ElasticTopology, SurvivorsFirstKeepHorovodsLocalAndCrossRanks) {
  // Survivors on a and b first, then new workers on a and c: a's ranks are not contiguous.
  auto t = assignTopology({"a", "b", "a", "c"});
  ASSERT_EQ(t.size(), 4u);
  auto numbers = [](const RankSlot& s) {
    return std::vector<int>{s.rank, s.size, s.localRank, s.localSize, s.crossRank, s.crossSize};
  };
  EXPECT_EQ(numbers(t[0]), (std::vector<int>{0, 4, 0, 2, 0, 3}));
  EXPECT_EQ(numbers(t[1]), (std::vector<int>{1, 4, 0, 1, 1, 3}));
  EXPECT_EQ(numbers(t[2]), (std::vector<int>{2, 4, 1, 2, 0, 1}));
  EXPECT_EQ(numbers(t[3]), (std::vector<int>{3, 4, 0, 1, 2, 3}));
  EXPECT_EQ(t[2].host, "a");
  // Contiguous hosts: computeRankLayout's numbers (it is built on assignTopology).
  auto layout = computeRankLayout({{"x", 2}, {"y", 1}}, 3);
  auto same = assignTopology({"x", "x", "y"});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(numbers(layout[i]), numbers(same[i]));
}

// ---- unit: flags ----------------------------------------------------------------------

std::string usageErrorOf(const Args& args) {
  return errorOf<UsageError>([&] { parseLaunchOptions(args); });
}

TEST(ElasticFlags, DefaultsFollowHorovod) {
  auto o = parseLaunchOptions(Args{"--min-np", "2", "--host-discovery-script", "/bin/true", "cmd"});
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.numProc, 2);  // -np defaults to --min-np
  EXPECT_EQ(o.minNumProc, 2);
  EXPECT_FALSE(o.maxNumProc.has_value());
  EXPECT_EQ(o.slotsPerHost, 1);
  EXPECT_FALSE(o.elasticTimeoutSeconds.has_value());  // RINGFOLD_ELASTIC_TIMEOUT's, 600, at start
  EXPECT_FALSE(o.resetLimit.has_value());
  EXPECT_TRUE(o.hosts.empty());

  o = parseLaunchOptions(Args{"-np", "3", "--host-discovery-script=/bin/true", "--max-num-proc", "5",
                              "--slots-per-host", "4", "--elastic-timeout", "2.5", "--reset-limit", "0", "cmd"});
  EXPECT_EQ(o.numProc, 3);
  EXPECT_EQ(o.minNumProc, 3);  // --min-np defaults to -np
  EXPECT_EQ(o.maxNumProc, std::optional<int>(5));
  EXPECT_EQ(o.slotsPerHost, 4);
  EXPECT_EQ(o.elasticTimeoutSeconds, std::optional<double>(2.5));
  EXPECT_EQ(o.resetLimit, std::optional<int>(0));
  EXPECT_EQ(
      parseLaunchOptions(Args{"--min-num-proc=1", "--slots", "2", "--host-discovery-script", "discover.sh arg", "cmd"})
          .slotsPerHost,
      2);
  EXPECT_FALSE(parseLaunchOptions(Args{"-np", "1", "cmd"}).elastic());
}

TEST(ElasticFlags, BadFlagsAreNamed) {
  const std::string s = "--host-discovery-script=/bin/true";
  EXPECT_NE(usageErrorOf({"--min-np", "4", "--max-np", "2", s, "c"}).find("--min-np 4 is more than --max-np 2"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "--min-np", "2", s, "c"}).find("-np 1 is less than --min-np 2"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "3", "--max-np", "2", s, "c"}).find("-np 3 is more than --max-np 2"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--reset-limit", "-1", s, "c"}).find("--reset-limit must be 0 or more, got -1"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--reset-limit", "x", s, "c"}).find("--reset-limit"), std::string::npos);
  EXPECT_NE(usageErrorOf({s, "c"}).find("missing -np or --min-np"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--min-np", "1", "c"}).find("--min-np is for elastic jobs"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--reset-limit", "3", "c"}).find("--reset-limit is for elastic jobs"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-H", "a:2", s, "c"}).find("-H and --host-discovery-script both give the hosts"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--host-discovery-script", "/no/such/script", "c"})
                .find("--host-discovery-script: no such file '/no/such/script'"),
            std::string::npos);
  TempDir dir;
  const std::string plain = dir.path() + "/discover.sh";
  std::ofstream(plain) << "#!/bin/sh\necho a\n";
  chmod(plain.c_str(), 0644);
  EXPECT_NE(usageErrorOf({"-np", "2", "--host-discovery-script", plain, "c"})
                .find("'" + plain + "' is not an executable file"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--elastic-timeout", "-3", s, "c"}).find("--elastic-timeout expects"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--slots", "0", s, "c"}).find("--slots must be at least 1"), std::string::npos);
}

// ---- multiprocess: the built launcher with fake workers --------------------------------

class ElasticRun {
 public:
  // `hosts`: the discovery file's first contents. `flags`: ringfoldrun's options (before the
  // discovery script and the worker command).
  ElasticRun(const std::string& hosts, const Args& flags, const Args& extraEnv = {}) {
    setHosts(hosts);
    const std::string script = dir_.path() + "/discover.sh";
    std::ofstream(script) << "#!/bin/sh\n[ -e " << dir_.path() << "/discovery.hang ] && sleep 60\ncat " << dir_.path()
                          << "/hosts\n";
    chmod(script.c_str(), 0755);
    Args argv = {RINGFOLDRUN_PATH};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Args tail = {"--grace-period", "1", "--host-discovery-script", script, ELASTIC_WORKER_PATH, dir_.path()};
    argv.insert(argv.end(), tail.begin(), tail.end());
    launcher_ = std::make_unique<Subprocess>(argv, extraEnv);
  }
  void setHosts(const std::string& hosts) {
    // Written whole and renamed, so the script never reads half a file.
    std::ofstream(dir_.path() + "/hosts.new") << hosts;
    std::rename((dir_.path() + "/hosts.new").c_str(), (dir_.path() + "/hosts").c_str());
  }
  std::vector<std::string> events() const { return readEvents(dir_.path()); }
  std::vector<std::string> waitFor(const std::string& prefix, size_t n, std::chrono::milliseconds timeout) const {
    return waitForEvents(dir_.path(), prefix, n, timeout);
  }
  std::map<int, std::string> members(int inc, size_t size, std::chrono::milliseconds timeout = 15s) const {
    return membersOf(dir_.path(), inc, size, timeout);
  }
  void failWorker(const std::string& id, int code) { std::ofstream(dir_.path() + "/exit." + id) << code; }
  // The next discovery runs sleep 60 s before they answer.
  void hangDiscovery() { std::ofstream(dir_.path() + "/discovery.hang") << "1"; }
  // Left out of a table, the worker stays until signalled.
  void lingerWorker(const std::string& id) { std::ofstream(dir_.path() + "/linger." + id) << "1"; }
  // The worker stops stepping and never leaves (a hang that is no SIGSTOP).
  void hangWorker(const std::string& id) { std::ofstream(dir_.path() + "/hang." + id) << "1"; }
  pid_t pidOf(const std::string& id) const { return workerPid(dir_.path(), id); }
  // Tells every worker to exit 0 and waits for the launcher.
  Finished finishAll(std::chrono::milliseconds timeout = 30s) {
    std::ofstream(dir_.path() + "/finish") << "1";
    return finish(timeout);
  }
  Subprocess& launcher() { return *launcher_; }
  Finished finish(std::chrono::milliseconds timeout = 30s) { return launcher_->finish(timeout); }

 private:
  TempDir dir_;
  std::unique_ptr<Subprocess> launcher_;
};

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ElasticJob, AllWorkersExitZeroEndsTheJob) {
  TempDir logs;
  ElasticRun run("127.0.0.1\n127.0.0.2:2\n", {"-np", "2", "--max-np", "3", "--output-filename", logs.path()});
  auto m = run.members(1, 3);
  ASSERT_EQ(m.size(), 3u) << "all free slots up to --max-np join incarnation 1";
  EXPECT_EQ(m[0], "127.0.0.1:0:0");
  EXPECT_EQ(m[1], "127.0.0.2:0:1");
  EXPECT_EQ(m[2], "127.0.0.2:1:2");
  auto joins = run.waitFor("join 127.0.0.2:1:2", 1, 1s);
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_TRUE(contains(joins[0], "rank=2 size=3 local=1/2 cross=0/1 host=127.0.0.2")) << joins[0];
  Finished f = run.finishAll();
  EXPECT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "incarnation 1: 3 worker(s) on 127.0.0.1:1,127.0.0.2:2")) << f.err;
  EXPECT_TRUE(contains(f.out, "[127.0.0.2:1:2]<stdout>:worker 127.0.0.2:1:2 joined incarnation 1 as rank 2\n"))
      << f.out;
  std::ifstream log(logs.path() + "/worker.127.0.0.2:1:2/stdout");
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "worker 127.0.0.2:1:2 joined incarnation 1 as rank 2");
}

TEST(ElasticJob, FailedWorkerGivesTheNextTableWithSurvivorsFirst) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n", {"-np", "3", "--min-np", "2"});
  auto m1 = run.members(1, 3);
  ASSERT_EQ(m1.size(), 3u);
  run.failWorker(m1[1], 7);
  auto m2 = run.members(2, 2);
  ASSERT_EQ(m2.size(), 2u) << run.finish(1s).err;
  EXPECT_EQ(m2[0], m1[0]);  // old rank order: 0 then 2
  EXPECT_EQ(m2[1], m1[2]);
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "worker " + m1[1])) << f.err;
  EXPECT_TRUE(contains(f.err, "exited with status 7")) << f.err;
  EXPECT_TRUE(contains(f.err, "blacklisting host 127.0.0.2: worker " + m1[1])) << f.err;
  EXPECT_TRUE(contains(f.err, "incarnation 2: 2 worker(s) on 127.0.0.1:1,127.0.0.3:1 (2 kept, 0 new)")) << f.err;
}

// Incarnation N-2's keys are gone from the store once N is published: the worker that joins
// incarnation 3 finds no table of incarnation 1.
TEST(ElasticJob, AnIncarnationsKeysAreDeletedTwoIncarnationsLater) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n127.0.0.4\n", {"-np", "4", "--min-np", "2"});
  auto m1 = run.members(1, 4);
  ASSERT_EQ(m1.size(), 4u);
  run.failWorker(m1[3], 7);
  auto m2 = run.members(2, 3);
  ASSERT_EQ(m2.size(), 3u) << run.finish(1s).err;
  run.failWorker(m2[2], 7);
  auto m3 = run.members(3, 2);
  ASSERT_EQ(m3.size(), 2u) << run.finish(1s).err;
  auto old = run.waitFor("old-keys " + m3[0] + " inc=3", 1, 10s);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_TRUE(contains(old[0], "deleted")) << old[0];
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
}

TEST(ElasticJob, DiscoveredHostJoinsAtTheNextIncarnation) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"--min-np", "2"});
  auto m1 = run.members(1, 2);
  ASSERT_EQ(m1.size(), 2u);
  run.setHosts("127.0.0.1\n127.0.0.2\n127.0.0.3\n");
  auto ready = run.waitFor("ready", 2, 15s);
  ASSERT_EQ(ready.size(), 2u);
  for (const auto& r : ready) EXPECT_TRUE(contains(r, "inc=1 interrupted")) << r;  // the update key
  auto m2 = run.members(2, 3);
  ASSERT_EQ(m2.size(), 3u);
  EXPECT_EQ(m2[0], m1[0]);
  EXPECT_EQ(m2[1], m1[1]);
  EXPECT_EQ(m2[2], "127.0.0.3:0:2");
  // The new worker started straight into incarnation 2: its first join says so.
  auto first = run.waitFor("join 127.0.0.3:0:2", 1, 1s);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(contains(first[0], "inc=2 rank=2 size=3")) << first[0];
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "asking incarnation 1 to reset at its next commit")) << f.err;
}

TEST(ElasticJob, RemovedHostsWorkerIsLeftOutAndExits) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n", {"-np", "3", "--min-np", "2"});
  auto m1 = run.members(1, 3);
  ASSERT_EQ(m1.size(), 3u);
  run.setHosts("127.0.0.1\n127.0.0.3\n");
  auto m2 = run.members(2, 2);
  ASSERT_EQ(m2.size(), 2u);
  EXPECT_EQ(m2[0], m1[0]);
  EXPECT_EQ(m2[1], m1[2]);
  EXPECT_EQ(run.waitFor("left " + m1[1] + " inc=2", 1, 10s).size(), 1u);
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_FALSE(contains(f.err, "blacklisting")) << f.err;  // leaving is no failure
}

TEST(ElasticJob, LeftOutWorkerThatStaysIsStopped) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"-np", "2", "--min-np", "1"});
  auto m1 = run.members(1, 2);
  ASSERT_EQ(m1.size(), 2u);
  run.lingerWorker(m1[1]);
  run.setHosts("127.0.0.1\n");
  ASSERT_EQ(run.waitFor("left " + m1[1] + " inc=2", 1, 10s).size(), 1u);
  const pid_t lingering = run.pidOf(m1[1]);
  // --grace-period 1 + 5 s after the table left it out: SIGTERM.
  EXPECT_TRUE(waitUntilDead({lingering}, 15s).empty());
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "worker " + m1[1] + ", left out of incarnation 2, is still running; sending SIGTERM"))
      << f.err;
}

TEST(ElasticJob, StoppedWorkerIsKilledOnceItsPeersLeft) {
  // RINGFOLD_TIMEOUT=1: the launcher waits 1 + 5 s for the frozen worker's ready key.
  // --start-timeout 1: a worker that froze right after start is not waited for as one still
  // meeting its peers in init.
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n",
                 {"-np", "3", "--min-np", "2", "-x", "RINGFOLD_TIMEOUT=1", "--start-timeout", "1"});
  auto m1 = run.members(1, 3);
  ASSERT_EQ(m1.size(), 3u);
  const pid_t frozen = run.pidOf(m1[2]);
  ASSERT_GT(frozen, 0);
  ASSERT_EQ(kill(frozen, SIGSTOP), 0);
  auto m2 = run.members(2, 2, 20s);
  ASSERT_EQ(m2.size(), 2u) << run.finish(1s).err;
  EXPECT_EQ(m2[0], m1[0]);
  EXPECT_EQ(m2[1], m1[1]);
  EXPECT_TRUE(waitUntilDead({frozen}, 5s).empty());
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  // Its peers noticed it (FAKE_PEER_TIMEOUT) and left as failed; it is stopped: killed then,
  // without waiting for RINGFOLD_TIMEOUT + 5 s.
  EXPECT_TRUE(contains(f.err, "worker " + m1[2] + " (rank 2) is stopped (SIGSTOP?) while its peers left")) << f.err;
  EXPECT_TRUE(contains(f.err, "blacklisting host 127.0.0.3")) << f.err;
}

TEST(ElasticJob, SilentWorkerIsKilledAfterTimeoutPlusFiveSeconds) {
  // A worker that neither exits nor sets its ready key, without being stopped (a hang): the
  // launcher waits RINGFOLD_TIMEOUT (1) + 5 s after the transition began, then kills it.
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n",
                 {"-np", "3", "--min-np", "1", "-x", "RINGFOLD_TIMEOUT=1", "--start-timeout", "1"});
  auto m1 = run.members(1, 3);
  ASSERT_EQ(m1.size(), 3u);
  run.hangWorker(m1[1]);
  run.failWorker(m1[2], 9);
  auto m2 = run.members(2, 1, 20s);
  ASSERT_EQ(m2.size(), 1u) << run.finish(1s).err;
  EXPECT_EQ(m2[0], m1[0]);
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "worker " + m1[1] + " (rank 1) neither exited nor became ready within 6")) << f.err;
  EXPECT_TRUE(contains(f.err, "blacklisting host 127.0.0.2")) << f.err;
}

TEST(ElasticJob, BelowMinNpFailsClearlyAfterTheElasticTimeout) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"--min-np", "2", "--elastic-timeout", "1.5"});
  auto m1 = run.members(1, 2);
  ASSERT_EQ(m1.size(), 2u);
  run.failWorker(m1[0], 1);
  Finished f = run.finish();
  EXPECT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "only 1 workers left, fewer than --min-np 2, after waiting 1.5 s")) << f.err;
  // The survivor waiting for a table was told through elastic/failed.
  auto failed = run.waitFor("failed " + m1[1], 1, 1s);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(contains(failed[0], "fewer than --min-np 2")) << failed[0];
}

TEST(ElasticJob, ResetLimitExceededFailsClearly) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n127.0.0.3\n", {"-np", "3", "--min-np", "1", "--reset-limit", "1"});
  auto m1 = run.members(1, 3);
  ASSERT_EQ(m1.size(), 3u);
  run.failWorker(m1[2], 1);
  auto m2 = run.members(2, 2);
  ASSERT_EQ(m2.size(), 2u) << "one reset is allowed";
  run.failWorker(m2[1], 1);
  Finished f = run.finish();
  EXPECT_EQ(f.exitCode, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "the job reset 2 times, more than --reset-limit 1 allows")) << f.err;
  EXPECT_EQ(run.waitFor("failed " + m2[0], 1, 1s).size(), 1u);
}

TEST(ElasticJob, SignalToTheLauncherStopsEveryWorker) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"-np", "2"});
  auto m = run.members(1, 2);
  ASSERT_EQ(m.size(), 2u);
  std::vector<pid_t> pids = {run.pidOf(m[0]), run.pidOf(m[1])};
  run.launcher().signal(SIGTERM);
  Finished f = run.finish();
  EXPECT_EQ(f.exitCode, 128 + SIGTERM) << f.err;
  EXPECT_TRUE(contains(f.err, "received SIGTERM, stopping 2 remaining worker(s) with SIGTERM")) << f.err;
  EXPECT_TRUE(waitUntilDead(pids, 5s).empty());
}

TEST(ElasticJob, TooFewSlotsAtStartFailsAfterTheElasticTimeout) {
  // Horovod's variable stands for --elastic-timeout.
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"-np", "3"}, {"HOROVOD_ELASTIC_TIMEOUT=1"});
  Finished f = run.finish();
  EXPECT_EQ(f.exitCode, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "only 2 slot(s) found, fewer than -np 3, after waiting 1 s")) << f.err;
  EXPECT_TRUE(run.events().empty());
}

TEST(ElasticJob, StartWaitsForDiscoveryToGiveEnoughSlots) {
  ElasticRun run("127.0.0.1\n", {"-np", "2", "--max-np", "2", "--elastic-timeout", "30"});
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(run.events().empty());
  run.setHosts("127.0.0.1\n127.0.0.2\n127.0.0.3\n");
  auto m = run.members(1, 2);
  ASSERT_EQ(m.size(), 2u);
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
}

TEST(ElasticJob, LaterDiscoveryFailureKeepsThePreviousHosts) {
  ElasticRun run("127.0.0.1\n127.0.0.2\n", {"-np", "2"});
  auto m = run.members(1, 2);
  ASSERT_EQ(m.size(), 2u);
  run.setHosts("127.0.0.1\nbad host line\n");
  std::this_thread::sleep_for(1500ms);  // at least one discovery run sees it
  Finished f = run.finishAll();
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.err,
                       "host discovery failed, keeping the previous hosts: host discovery line 2 "
                       "'bad host line': expected host or host:slots"))
      << f.err;
  EXPECT_EQ(run.waitFor("ready", 1, 0ms).size(), 0u) << "nobody was interrupted";
}

TEST(ElasticJob, HangingDiscoveryDoesNotHoldTheJobsEnd) {
  // Discovery may run 60 s; the job still ends at once when its workers are done (the running
  // script is killed), well before the 20 s this test waits.
  ElasticRun run("127.0.0.1\n", {"-np", "1"}, {"RINGFOLD_ELASTIC_DISCOVERY_TIMEOUT=60"});
  ASSERT_EQ(run.members(1, 1).size(), 1u);
  run.hangDiscovery();
  std::this_thread::sleep_for(1500ms);  // a run is under way
  Finished f = run.finishAll(20s);
  EXPECT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 0) << f.err;
}

TEST(ElasticJob, FailingFirstDiscoveryFailsTheJob) {
  TempDir dir;
  const std::string script = dir.path() + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\necho 'no cluster here' >&2\nexit 4\n";
  chmod(script.c_str(), 0755);
  Finished f = run({RINGFOLDRUN_PATH, "-np", "1", "--host-discovery-script", script, "/bin/true"}, 20s);
  EXPECT_EQ(f.exitCode, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "exited with status 4: no cluster here")) << f.err;
  Finished bare =
      run({RINGFOLDRUN_PATH, "-np", "1", "--host-discovery-script", "no-such-discovery-script", "/bin/true"}, 20s);
  EXPECT_EQ(bare.exitCode, 2) << bare.err;
  EXPECT_TRUE(contains(bare.err, "'no-such-discovery-script' is not an executable found on PATH")) << bare.err;
}

}  // namespace
}  // namespace ringfold::launcher::testing
