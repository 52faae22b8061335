// End-to-end tests of the built ringfoldrun binary: real processes, real signals.
// Every launcher run has a hard deadline (Subprocess::finish kills it), so a hang fails the test
// instead of stalling the suite.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "launcher/subprocess.h"

namespace ringfold::launcher::testing {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

const std::string kRun = RINGFOLDRUN_PATH;

Args launcher(Args args) {
  args.insert(args.begin(), kRun);
  return args;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// A rank script that records its pid (atomically: write, then rename) in `dir`.
std::string recordPid(const TempDir& dir) {
  return "echo $$ > " + dir.path() + "/tmp.$RINGFOLD_RANK && mv " + dir.path() +
         "/tmp.$RINGFOLD_RANK " + dir.path() + "/pid.$RINGFOLD_RANK; ";
}
// Waits, bounded, until `n` ranks recorded their pids.
std::string waitForPids(const TempDir& dir, int n) {
  return "i=0; while [ $(ls " + dir.path() + " | grep -c '^pid') -lt " + std::to_string(n) +
         " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
}

TEST(Ringfoldrun, UsageErrorsExitTwoNamingTheArgument) {
  struct Case { Args args; const char* message; };
  const Case cases[] = {
      {{"sh", "-c", "true"}, "missing -np"},
      {{"-np", "0", "true"}, "-np must be at least 1, got 0"},
      {{"-np", "-2", "true"}, "-np must be at least 1, got -2"},
      {{"-np", "3", "-H", "localhost:2", "true"}, "-np 3 is more than the 2 slot(s) given by -H"},
      {{"-np", "2", "--bogus", "true"}, "unknown option '--bogus'"},
      {{"-np", "2"}, "no command given"},
      {{"-np", "2", "-H", "localhost:1,127.0.0.1:1", "true"}, "list this machine more than once"},
      {{"-np", "2", "--hostfile", "/nonexistent/hosts", "true"}, "cannot read hostfile"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    Finished f = run(launcher(c.args), 10s);
    EXPECT_EQ(f.exitCode, 2);
    EXPECT_TRUE(contains(f.err, c.message)) << f.err;
    EXPECT_TRUE(contains(f.err, "--help")) << f.err;
    EXPECT_EQ(f.out, "");
  }
  Finished help = run(launcher({"--help"}), 10s);
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_TRUE(contains(help.out, "usage: ringfoldrun -np N")) << help.out;
  Finished version = run(launcher({"--version"}), 10s);
  EXPECT_EQ(version.exitCode, 0);
  EXPECT_TRUE(contains(version.out, "ringfoldrun")) << version.out;
}

// --check-build names the rdma fabric this host would use, or why there is none (this machine has
// no RDMA hardware: the report must say so, and name libfabric's software path when it is built).
TEST(Ringfoldrun, CheckBuildSaysWhichRdmaFabricThisHostWouldUse) {
  Finished f = run(launcher({"--check-build"}), 30s);
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "] rdma ")) << f.out;
  EXPECT_TRUE(contains(f.out, "RDMA hardware")) << f.out;
  EXPECT_TRUE(contains(f.out, "  ibverbs")) << f.out;
  EXPECT_TRUE(contains(f.out, "  libfabric")) << f.out;
  // The NCCL drop-ins: built in this tree when nccl.h and io_uring were found, found beside
  // libringfold (the build tree keeps libnccl.so.2 in nccl/).
  EXPECT_TRUE(contains(f.out, "Available NCCL drop-ins:")) << f.out;
#if RF_TEST_NCCL_API
  EXPECT_TRUE(contains(f.out, "[X] libnccl.so.2")) << f.out;
#endif
#if RF_TEST_NCCL_NET
  EXPECT_TRUE(contains(f.out, "[X] NCCL net plugin")) << f.out;
#endif
}

TEST(Ringfoldrun, CommandThatCannotRunExits127) {
  Finished f = run(launcher({"-np", "2", "/nonexistent/ringfold-no-such-program"}), 10s);
  EXPECT_EQ(f.exitCode, 127);
  EXPECT_TRUE(contains(f.err, "cannot execute '/nonexistent/ringfold-no-such-program'")) << f.err;
  f = run(launcher({"-np", "2", "ringfold-no-such-program-on-path"}), 10s);
  EXPECT_EQ(f.exitCode, 127);
  EXPECT_TRUE(contains(f.err, "command not found")) << f.err;
}

TEST(Ringfoldrun, PrefixesOutputAndGivesEachRankItsIdentity) {
  const std::string script =
      "echo \"id R=$RINGFOLD_RANK S=$RINGFOLD_SIZE LR=$RINGFOLD_LOCAL_RANK LS=$RINGFOLD_LOCAL_SIZE "
      "CR=$RINGFOLD_CROSS_RANK CS=$RINGFOLD_CROSS_SIZE HR=$HOROVOD_RANK HS=$HOROVOD_SIZE "
      "HLR=$HOROVOD_LOCAL_RANK HLS=$HOROVOD_LOCAL_SIZE HCR=$HOROVOD_CROSS_RANK "
      "HCS=$HOROVOD_CROSS_SIZE HOST=$HOROVOD_HOSTNAME ADDR=$RINGFOLD_STORE_ADDR "
      "PORT=$RINGFOLD_STORE_PORT SECRETLEN=${#RINGFOLD_SECRET} UNBUF=$PYTHONUNBUFFERED "
      "FOO=$FOO BAR=$BAR TO=$RINGFOLD_START_TIMEOUT\"; "
      "echo \"to stderr $RINGFOLD_RANK\" >&2; printf 'unterminated'";
  Finished f = run(launcher({"-np", "3", "-x", "FOO=from-x", "-x", "BAR", "--start-timeout", "9",
                             "sh", "-c", script}),
                   20s, {"BAR=from-launcher-env"});
  ASSERT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 0) << f.err;

  const std::regex idLine(
      R"(\[(\d+)\]<stdout>:id R=(\d+) S=3 LR=(\d+) LS=3 CR=0 CS=1 HR=(\d+) HS=3 HLR=(\d+) HLS=3 )"
      R"(HCR=0 HCS=1 HOST=localhost ADDR=127\.0\.0\.1 PORT=(\d+) SECRETLEN=(\d+) UNBUF=1 )"
      R"(FOO=from-x BAR=from-launcher-env TO=9)");
  std::map<int, int> idLines, tails;
  std::string port;
  for (const auto& line : splitLines(f.out)) {
    std::smatch m;
    if (std::regex_match(line, m, idLine)) {
      int r = std::stoi(m[1]);
      EXPECT_EQ(m[2], m[1]) << line;  // the prefix names the rank that wrote the line
      EXPECT_EQ(m[3], m[1]) << line;
      EXPECT_EQ(m[4], m[1]) << line;
      EXPECT_EQ(m[5], m[1]) << line;
      EXPECT_GT(std::stoi(m[6]), 0) << line;
      EXPECT_GT(std::stoi(m[7]), 0) << line;  // non-empty secret
      if (port.empty()) port = m[6];
      EXPECT_EQ(m[6], port) << "every rank dials the same store";
      ++idLines[r];
    } else if (std::regex_match(line, m, std::regex(R"(\[(\d+)\]<stdout>:unterminated)"))) {
      ++tails[std::stoi(m[1])];
    } else {
      ADD_FAILURE() << "unexpected stdout line: '" << line << "'";
    }
  }
  std::map<int, int> errLines;
  for (const auto& line : splitLines(f.err)) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(\[(\d+)\]<stderr>:to stderr (\d+))"))) {
      EXPECT_EQ(m[1], m[2]);
      ++errLines[std::stoi(m[1])];
    } else {
      ADD_FAILURE() << "unexpected stderr line: '" << line << "'";
    }
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(idLines[r], 1) << "rank " << r << "\n" << f.out;
    EXPECT_EQ(tails[r], 1) << "rank " << r << "\n" << f.out;
    EXPECT_EQ(errLines[r], 1) << "rank " << r << "\n" << f.err;
  }
  EXPECT_EQ(f.out.back(), '\n');  // the unterminated last lines were flushed with a newline
}

TEST(Ringfoldrun, LinesOfConcurrentRanksNeverInterleave) {
  // Each rank writes 3000 lines of ~200 bytes as fast as it can, in pieces (printf of two parts).
  const std::string script =
      "i=0; pad=$(printf '%0190d' 0); while [ $i -lt 3000 ]; do printf 'r%s l%s ' $RINGFOLD_RANK $i; "
      "printf '%s\\n' $pad; i=$((i+1)); done";
  Finished f = run(launcher({"-np", "4", "sh", "-c", script}), 60s);
  ASSERT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 0) << f.err;
  const std::regex line(R"(\[(\d)\]<stdout>:r(\d) l(\d+) 0{190})");
  std::map<int, int> next;
  int bad = 0;
  for (const auto& l : splitLines(f.out)) {
    std::smatch m;
    if (!std::regex_match(l, m, line) || m[1] != m[2] || std::stoi(m[3]) != next[std::stoi(m[1])]) {
      if (++bad < 5) ADD_FAILURE() << "torn or out-of-order line: '" << l.substr(0, 80) << "'";
      continue;
    }
    ++next[std::stoi(m[1])];
  }
  EXPECT_EQ(bad, 0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(next[r], 3000) << "rank " << r;
}

// One rank fails (`failure`), the others sleep (optionally ignoring SIGTERM); the launcher must
// name the rank, stop the others within seconds, and exit with the rank's status.
void expectFailFast(const std::string& failure, const std::string& others, int wantExit,
                    const std::string& wantMessage, Args extra = {}) {
  TempDir dir;
  const std::string script = recordPid(dir) + "if [ \"$RINGFOLD_RANK\" = 1 ]; then " +
                             waitForPids(dir, 3) + failure + "; fi; " + others;
  Args args = {"-np", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"sh", "-c", script});
  Finished f = run(launcher(args), 30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, wantExit) << f.err;
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(std::regex_search(f.err, std::regex("ringfoldrun: rank 1 \\(pid \\d+\\) " + wantMessage)))
      << f.err;
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 3, 1s);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

TEST(Ringfoldrun, RankExitingNonZeroStopsTheOthers) {
  expectFailFast("exit 3", "exec sleep 60", 3, "exited with status 3");
}

TEST(Ringfoldrun, RankKilledBySignalStopsTheOthers) {
  expectFailFast("kill -KILL $$", "exec sleep 60", 137, "was killed by signal SIGKILL");
}

TEST(Ringfoldrun, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  expectFailFast("exit 5", "trap '' TERM; while true; do sleep 0.1; done", 5,
                 "exited with status 5", {"--grace-period", "0.5"});
}

// A rank stopped with SIGSTOP keeps a caught SIGTERM pending until it is continued: the
// launcher must send SIGCONT with SIGTERM, so that the job ends long before the grace period
// (40 s here) and the stopped rank's own handler runs.
TEST(Ringfoldrun, StoppedRankActsOnSigtermWithoutWaitingForTheGracePeriod) {
  TempDir dir;
  const std::string d = dir.path();
  const std::string stopped =
      "trap 'echo handled > " + d + "/term.2; exit 7' TERM; " + recordPid(dir) + "kill -STOP $$; "
      "while true; do sleep 0.1; done";
  const std::string failing =
      recordPid(dir) + waitForPids(dir, 3) +
      "i=0; while ! grep -q '^State:[[:space:]]*T' /proc/$(cat " + d + "/pid.2)/status && [ $i -lt 200 ]; "
      "do sleep 0.05; i=$((i+1)); done; "
      "grep -q '^State:[[:space:]]*T' /proc/$(cat " + d + "/pid.2)/status && echo stopped > " + d +
      "/was_stopped; exit 3";
  const std::string script = "case $RINGFOLD_RANK in 1) " + failing + ";; 2) " + stopped +
                             ";; *) " + recordPid(dir) + "exec sleep 60;; esac";
  Finished f = run(launcher({"-np", "3", "--grace-period", "40", "sh", "-c", script}), 30s);
  ASSERT_FALSE(f.timedOut) << "a stopped rank held the launcher for its grace period\n" << f.err;
  EXPECT_EQ(f.exitCode, 3) << f.err;
  EXPECT_LT(f.seconds, 20.0) << f.err;  // a hang guard far below the 40 s grace period
  EXPECT_TRUE(std::filesystem::exists(d + "/was_stopped")) << "rank 2 was not stopped in time";
  EXPECT_TRUE(std::filesystem::exists(d + "/term.2")) << "the stopped rank never ran its SIGTERM handler";
  EXPECT_FALSE(contains(f.err, "grace period, sending SIGKILL")) << f.err;
  std::vector<pid_t> pids = waitForPidFiles(d, 3, 1s);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

// Rank 1 raises (a Python traceback) and is still in its exit handlers when ranks 0 and 2, which
// failed because of it, exit first: the summary must name rank 1, not the first rank to exit.
TEST(Ringfoldrun, SummaryNamesTheRankWhereTheFailureStartedNotTheFirstToExit) {
  TempDir dir;
  const std::string d = dir.path();
  const std::string cause =
      waitForPids(dir, 3) +
      "printf 'Traceback (most recent call last):\\n  File \"train.py\", line 9, in <module>\\n"
      "ValueError: boom on rank 1\\n' >&2; touch " + d + "/raised; eval \"$1\"";
  const std::string victim =
      waitForPids(dir, 3) + "i=0; while [ ! -e " + d + "/raised ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
      "echo 'ringfold.exceptions.HorovodInternalError: ringfold was shut down (shutdown() was called on "
      "at least one rank) before this operation ran' >&2; exit 1";
  for (const char* exitHandlers : {"exec sleep 30", "trap '' TERM; sleep 1; exit 3"}) {
    SCOPED_TRACE(exitHandlers);
    for (const char* f : {"raised", "pid.0", "pid.1", "pid.2"}) std::filesystem::remove(d + "/" + f);
    const std::string script = recordPid(dir) + "if [ $RINGFOLD_RANK = 1 ]; then " + cause + "; else " +
                               victim + "; fi";
    Finished f = run(launcher({"-np", "3", "sh", "-c", script, "rank", exitHandlers}), 30s);
    ASSERT_FALSE(f.timedOut) << f.err;
    EXPECT_TRUE(std::regex_search(f.err, std::regex("ringfoldrun: rank [02] \\(pid \\d+\\) exited with status 1")))
        << f.err;
    // Ranks 0 and 2 report a failed peer (one of them may be stopped before it says so).
    EXPECT_TRUE(std::regex_search(f.err, std::regex("\nringfoldrun: the failure started at rank 1: ValueError: "
                                                    "boom on rank 1 \\((ranks 0, 2 report|rank [02] reports) "
                                                    "a failed peer\\)\n")))
        << f.err;
    // The job's exit code is the cause's own status when it exited by itself, else the first.
    EXPECT_EQ(f.exitCode, std::string(exitHandlers).find("exit 3") != std::string::npos ? 3 : 1) << f.err;
  }
}

// The failure grace (--failure-grace, RINGFOLD_FAILURE_GRACE; job.h). In these jobs rank 1 fails
// and ranks 0 and 2 trap SIGTERM (leaving term.N behind, then exiting 9), so a signal from the
// launcher shows.
std::string trapTerm(const TempDir& dir) {
  return "trap 'touch " + dir.path() + "/term.$RINGFOLD_RANK; exit 9' TERM; ";
}
// Rank 1's script: once every rank is up, it fails on its own.
std::string failingRank(const TempDir& dir) {
  return recordPid(dir) + waitForPids(dir, 3) + "echo 'ValueError: boom on rank 1' >&2; exit 3";
}
std::string failureGraceJob(const TempDir& dir, const std::string& survivor) {
  return "if [ $RINGFOLD_RANK = 1 ]; then " + failingRank(dir) + "; else " + trapTerm(dir) + recordPid(dir) +
         survivor + "; fi";
}
bool exists(const TempDir& dir, const std::string& name) { return std::filesystem::exists(dir.path() + "/" + name); }

// Survivors that see the failed rank gone (as ringfold's ranks see a dead peer, within
// milliseconds of its death, often after the launcher saw it) and fail on their own within the
// grace are not signalled: each one's own error, naming rank 1, reaches the output (before the
// grace, the launcher's SIGTERM could beat them, and one failing on that would name the wrong
// peer). The grace ends when the last rank has exited, not when it runs out (30 s).
TEST(Ringfoldrun, SurvivorsFailingOnTheirOwnWithinTheFailureGraceAreNotSignalled) {
  TempDir dir;
  const std::string d = dir.path();
  const std::string survivor =
      waitForPids(dir, 3) + "p=$(cat " + d + "/pid.1); i=0; "
      "while kill -0 $p 2>/dev/null && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; "
      "echo \"rank $RINGFOLD_RANK: the process of rank 1 (pid $p) exited\" >&2; exit 1";
  Finished f = run(launcher({"-np", "3", "--failure-grace", "30", "sh", "-c", failureGraceJob(dir, survivor)}), 60s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 3) << f.err;
  EXPECT_LT(f.seconds, 25.0) << "the failure grace did not end when every rank had exited\n" << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex("ringfoldrun: rank 1 \\(pid \\d+\\) exited with status 3"))) << f.err;
  for (const char* r : {"0", "2"}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(std::regex_search(f.err, std::regex(std::string("\\[") + r + "\\]<stderr>:rank " + r +
                                                    ": the process of rank 1 \\(pid \\d+\\) exited\n")))
        << f.err;
    EXPECT_FALSE(exists(dir, std::string("term.") + r)) << "rank " << r << " was signalled\n" << f.err;
  }
  EXPECT_FALSE(contains(f.err, "stopping")) << f.err;
  EXPECT_TRUE(contains(f.err, "ringfoldrun: the failure started at rank 1: ValueError: boom on rank 1 "
                              "(ranks 0, 2 report a failed peer)\n"))
      << f.err;
  std::vector<pid_t> pids = waitForPidFiles(d, 3, 1s);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

// Survivors that keep running (they never see the failure, or hang) are stopped once the grace
// (here RINGFOLD_FAILURE_GRACE=0.5 from the launcher's environment) is over; every wait bounded.
TEST(Ringfoldrun, SurvivorsStillRunningAfterTheFailureGraceAreStopped) {
  TempDir dir;
  const std::string survivor = "i=0; while [ $i -lt 1000 ]; do sleep 0.05; i=$((i+1)); done; exit 0";
  Finished f = run(launcher({"-np", "3", "sh", "-c", failureGraceJob(dir, survivor)}), 30s,
                   {"RINGFOLD_FAILURE_GRACE=0.5"});
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 3) << f.err;
  EXPECT_TRUE(contains(f.err, "ringfoldrun: 0.5 s after rank 1 failed (--failure-grace), stopping 2 remaining "
                              "rank(s) with SIGTERM\n"))
      << f.err;
  EXPECT_TRUE(exists(dir, "term.0")) << f.err;
  EXPECT_TRUE(exists(dir, "term.2")) << f.err;
  EXPECT_FALSE(contains(f.err, "sending SIGKILL")) << f.err;
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 3, 1s);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

// A signal to the launcher during the failure grace stops every rank at once (a 60 s grace here;
// the job must end long before it); the exit code stays the failed rank's.
TEST(Ringfoldrun, SignalDuringTheFailureGraceStopsEveryRankAtOnce) {
  TempDir dir;
  const std::string survivor = "i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; exit 0";
  Subprocess p(launcher({"-np", "3", "--failure-grace", "60", "sh", "-c", failureGraceJob(dir, survivor)}));
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 3, 10s);
  ASSERT_EQ(pids.size(), 3u);
  std::ifstream in(dir.path() + "/pid.1");
  long failed = 0;
  ASSERT_TRUE(in >> failed);
  // Rank 1 reaped (gone from /proc): the launcher has seen it fail and is in the grace.
  for (int i = 0; i < 500 && std::filesystem::exists("/proc/" + std::to_string(failed)); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(std::filesystem::exists("/proc/" + std::to_string(failed)));
  std::this_thread::sleep_for(200ms);
  p.signal(SIGTERM);
  Finished f = p.finish(20s);
  ASSERT_FALSE(f.timedOut) << "the launcher waited out the failure grace after SIGTERM\n" << f.err;
  EXPECT_EQ(f.exitCode, 3) << f.err;
  EXPECT_TRUE(contains(f.err, "ringfoldrun: received SIGTERM, stopping 2 remaining rank(s) with SIGTERM\n")) << f.err;
  EXPECT_TRUE(exists(dir, "term.0")) << f.err;
  EXPECT_TRUE(exists(dir, "term.2")) << f.err;
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

void expectSignalStopsAll(int sig, int wantExit) {
  TempDir dir;
  Subprocess p(launcher({"-np", "3", "sh", "-c", recordPid(dir) + "exec sleep 60"}));
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 3, 10s);
  ASSERT_EQ(pids.size(), 3u);
  p.signal(sig);
  Finished f = p.finish(15s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, wantExit) << f.err;
  EXPECT_TRUE(contains(f.err, "received " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM")))
      << f.err;
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty()) << "ranks left running after the launcher exited";
}

TEST(Ringfoldrun, SigintStopsAllRanksAndExits130) { expectSignalStopsAll(SIGINT, 130); }

TEST(Ringfoldrun, SigtermStopsAllRanksAndExits143) { expectSignalStopsAll(SIGTERM, 143); }

TEST(Ringfoldrun, KilledLauncherTakesItsRanksAlong) {
  TempDir dir;
  Subprocess p(launcher({"-np", "2", "sh", "-c", recordPid(dir) + "exec sleep 60"}));
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 2, 10s);
  ASSERT_EQ(pids.size(), 2u);
  p.signal(SIGKILL);
  Finished f = p.finish(10s);
  EXPECT_EQ(f.exitCode, 128 + SIGKILL);
  EXPECT_TRUE(waitUntilDead(pids, 5s).empty()) << "PR_SET_PDEATHSIG did not stop the ranks";
}

TEST(Ringfoldrun, AllRanksSucceedingExitsZeroAndLeavesNoBackgroundChildren) {
  TempDir dir;
  // Each rank leaves a background sleeper in its process group and exits 0 at once.
  const std::string script = "sleep 60 & echo $! > " + dir.path() + "/pid.$RINGFOLD_RANK; exit 0";
  Finished f = run(launcher({"-np", "2", "sh", "-c", script}), 20s);
  ASSERT_FALSE(f.timedOut);
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_LT(f.seconds, 10.0);
  std::vector<pid_t> pids = waitForPidFiles(dir.path(), 2, 1s);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_TRUE(waitUntilDead(pids, 2s).empty());
}

// Each rank's "Cpus_allowed_list" (from /proc), by rank.
std::map<int, std::string> allowedCpuLists(const Finished& f) {
  std::map<int, std::string> lists;
  const std::regex line(R"(\[(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+))");
  for (const auto& l : splitLines(f.out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) lists[std::stoi(m[1])] = m[2];
  }
  return lists;
}

TEST(Ringfoldrun, BindsLocalRanksToTheirShareOfTheCores) {
  Finished self = run({"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"}, 10s);
  const std::string mine = self.out.substr(self.out.find_first_of("0123456789"));
  auto launch = [](Args options) {
    for (const char* a : {"sh", "-c", "grep Cpus_allowed_list /proc/self/status"}) options.push_back(a);
    Finished f = run(launcher(options), 20s);
    EXPECT_EQ(f.exitCode, 0) << f.err;
    return f;
  };
  // With --bind-to none, and with auto while there are no more ranks than CPUs, every rank
  // keeps the launcher's CPUs (this test's own).
  for (const Args& options : {Args{"-np", "2", "--bind-to", "none"}, Args{"-np", "1"}}) {
    auto lists = allowedCpuLists(launch(options));
    ASSERT_EQ(lists.size(), static_cast<size_t>(std::stoi(options[1])));
    for (auto& [rank, list] : lists) EXPECT_EQ(list + "\n", mine) << rank;
  }
  // --bind-to core: ranks 0 and 1 of 2 get disjoint CPU sets when there are 2 CPUs or more.
  Finished f = launch({"-np", "2", "--bind-to", "core", "--verbose"});
  auto lists = allowedCpuLists(f);
  ASSERT_EQ(lists.size(), 2u) << f.out;
  EXPECT_TRUE(contains(f.err, ", CPUs " + lists[0])) << f.err;
  if (mine != "0\n") {
    EXPECT_NE(lists[0], lists[1]);
  }
  // auto with more ranks than CPUs (this machine kind has 2): round robin.
  if (mine == "0-1\n") {
    lists = allowedCpuLists(launch({"-np", "3"}));
    EXPECT_EQ(lists[0], "0");
    EXPECT_EQ(lists[1], "1");
    EXPECT_EQ(lists[2], "0");
  }
}

TEST(Ringfoldrun, RanksRendezvousThroughTheStoreItHosts) {
  Finished f = run(launcher({"-np", "3", STORE_CLIENT_PATH}), 30s, {"RINGFOLD_TIMEOUT=10"});
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_EQ(f.exitCode, 0) << f.err;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(f.out, "[" + std::to_string(r) + "]<stdout>:store_client rank " +
                                    std::to_string(r) + " of 3 ok"))
        << f.out << f.err;
  }
}

TEST(Ringfoldrun, StoreRefusesAClientWithoutTheJobSecret) {
  // Rank 0 replaces the secret it was given: the launcher's store must refuse it, and its
  // failure must fail the job (the other ranks then wait in vain and are stopped).
  Finished f = run(launcher({"-np", "2", "sh", "-c",
                             "if [ $RINGFOLD_RANK = 0 ]; then export RINGFOLD_SECRET=wrong; fi; "
                             "exec " STORE_CLIENT_PATH}),
                   30s);
  ASSERT_FALSE(f.timedOut) << f.err;
  EXPECT_NE(f.exitCode, 0);
  EXPECT_TRUE(contains(f.err, "[0]<stderr>:store_client failed")) << f.err;
  EXPECT_TRUE(contains(f.err, "ringfoldrun: rank 0 (pid ")) << f.err;
}

}  // namespace
}  // namespace ringfold::launcher::testing
