// The remote side of a remote rank (remote_rank.h), run here with /bin/sh standing in for ssh:
// startRemoteRank() with argv {"sh", "-c", <bootstrap>} is exactly what sshd would run, minus
// the network. Checks the environment and directory the rank gets, the exit status coming
// back, TERM/KILL lines, end of file on stdin (the launcher died) stopping the rank's whole
// process group, and that the secret is on no command line.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "launcher/rank_environment.h"
#include "launcher/remote_rank.h"
#include "launcher/subprocess.h"

namespace ringfold::launcher {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

struct Remote {
  RankProcess p;
  std::string out, err;
  int exitCode = -1;
};

// Starts `command` as a remote rank would be, with `env` exported and `cwd` entered.
Remote start(const std::vector<std::string>& command, const std::vector<std::string>& env,
             const std::string& cwd, double grace = 3) {
  const std::string nonce = newNonce();
  RemoteScriptInput in{env, cwd, command, "testhost", grace, nonce};
  Remote r;
  r.p = startRemoteRank(0, "/bin/sh", {"sh", "-c", remoteBootstrapCommand(nonce)},
                        currentEnvironment(), remoteScript(in));
  return r;
}

// Reads both pipes to EOF (at most `timeout`), then reaps. Fails the test on a timeout.
void finish(Remote& r, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int fds[2] = {r.p.stdoutFd, r.p.stderrFd};
  std::string* sinks[2] = {&r.out, &r.err};
  char buf[4096];
  while ((fds[0] >= 0 || fds[1] >= 0) && std::chrono::steady_clock::now() < deadline) {
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    poll(p, 2, 50);
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      ssize_t n = read(fds[i], buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  if (fds[0] >= 0 || fds[1] >= 0) {
    ADD_FAILURE() << "the remote side did not finish in time; out: " << r.out << " err: " << r.err;
    signalGroup(r.p.pid, SIGKILL);
  }
  int status = 0;
  waitpid(r.p.pid, &status, 0);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.p.stdinFd >= 0) close(r.p.stdinFd);
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

std::string pidFile(const TempDir& d) { return "echo $$ > " + d.path() + "/tmp.$$ && mv " + d.path() + "/tmp.$$ " + d.path() + "/pid.$$; "; }

TEST(RemoteProtocol, RankGetsEnvironmentDirectoryAndItsStatusComesBack) {
  TempDir dir;
  Remote r = start({"sh", "-c", "echo \"FOO=[$FOO] MULTI=[$MULTI] Q=[$Q] PWD=$(pwd)\"; echo warn >&2; exit 7"},
                   {"FOO=bar baz", "MULTI=line1\nline2", "Q=it's \"quoted\" $HOME `x`"}, dir.path());
  finish(r);
  EXPECT_EQ(r.exitCode, 7) << r.err;
  auto lines = testing::splitLines(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("#rf-started-", 0), 0u) << r.out;
  EXPECT_EQ(r.out.substr(lines[0].size() + 1),
            "FOO=[bar baz] MULTI=[line1\nline2] Q=[it's \"quoted\" $HOME `x`] PWD=" + dir.path() + "\n");
  EXPECT_EQ(r.err, "warn\n");
}

TEST(RemoteProtocol, MissingWorkingDirectoryIsNamed) {
  Remote r = start({"true"}, {}, "/nonexistent/ringfold-dir");
  finish(r);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("ringfoldrun: host testhost has no directory /nonexistent/ringfold-dir"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("#rf-started-"), std::string::npos);
}

TEST(RemoteProtocol, MissingCommandExits127) {
  TempDir dir;
  Remote r = start({"ringfold-no-such-program"}, {}, dir.path());
  finish(r);
  EXPECT_EQ(r.exitCode, 127) << r.err;
}

TEST(RemoteProtocol, TermLineSignalsTheRanksGroup) {
  TempDir dir;
  // The rank leaves a background child in its group: TERM must reach both.
  Remote r = start({"sh", "-c", "sleep 60 & echo $! > " + dir.path() + "/pid.child; " + pidFile(dir) + "wait"},
                   {}, dir.path());
  auto pids = testing::waitForPidFiles(dir.path(), 2, 10s);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_TRUE(signalRemoteRank(r.p.stdinFd, SIGTERM));
  finish(r);
  EXPECT_EQ(r.exitCode, 128 + SIGTERM);
  EXPECT_TRUE(testing::waitUntilDead(pids, 2s).empty());
}

// A stopped rank keeps a caught TERM pending until continued: the remote side sends CONT after
// it, so the rank's handler runs at once (without it, finish() would time out).
TEST(RemoteProtocol, TermLineReachesAStoppedRank) {
  TempDir dir;
  Remote r = start({"sh", "-c", "trap 'exit 9' TERM; " + pidFile(dir) + "kill -STOP $$; while true; do sleep 0.05; done"},
                   {}, dir.path(), /*grace=*/30);
  auto pids = testing::waitForPidFiles(dir.path(), 1, 10s);
  ASSERT_EQ(pids.size(), 1u);
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {
    std::ifstream status("/proc/" + std::to_string(pids[0]) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("State:", 0) == 0) stopped = line.find('T') != std::string::npos;
    }
    if (!stopped) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(stopped) << "the rank did not stop itself";
  ASSERT_TRUE(signalRemoteRank(r.p.stdinFd, SIGTERM));
  finish(r, 10s);
  EXPECT_EQ(r.exitCode, 9) << r.err;  // its own TERM handler ran: not the grace period's KILL
  EXPECT_TRUE(testing::waitUntilDead(pids, 2s).empty());
}

TEST(RemoteProtocol, EndOfStdinStopsTheRankEvenIfItIgnoresTerm) {
  TempDir dir;
  Remote r = start({"sh", "-c", "trap '' TERM; " + pidFile(dir) + "while true; do sleep 0.05; done"}, {},
                   dir.path(), /*grace=*/0.3);
  auto pids = testing::waitForPidFiles(dir.path(), 1, 10s);
  ASSERT_EQ(pids.size(), 1u);
  close(r.p.stdinFd);  // as when the launcher (and so its ssh client) dies
  r.p.stdinFd = -1;
  auto t0 = std::chrono::steady_clock::now();
  finish(r);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_TRUE(testing::waitUntilDead(pids, 2s).empty());
}

TEST(RemoteProtocol, SecretIsOnNoCommandLine) {
  TempDir dir;
  const std::string secret = "ringfold-test-secret-" + newNonce();
  Remote r = start({"sh", "-c", pidFile(dir) + "sleep 60"}, {"RINGFOLD_SECRET=" + secret}, dir.path());
  ASSERT_EQ(testing::waitForPidFiles(dir.path(), 1, 10s).size(), 1u);
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(secret) != std::string::npos) ++seen;
  }
  EXPECT_EQ(seen, 0) << "the job secret is visible in some process's command line";
  signalRemoteRank(r.p.stdinFd, SIGKILL);
  finish(r);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL);
}

}  // namespace
}  // namespace ringfold::launcher
