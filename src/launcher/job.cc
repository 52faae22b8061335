#include "launcher/job.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "launcher/rank_environment.h"
#include "launcher/rank_process.h"
#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"

namespace ringfold::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// After SIGKILL, how long to wait for ranks to be reaped before giving up on them (a process in
// uninterruptible sleep cannot be hurried), and for output pipes to drain at the end.
constexpr auto kReapAfterKill = std::chrono::seconds(5);
constexpr auto kOutputDrain = std::chrono::seconds(2);

// The store is dialled on loopback: every rank of a single-host launch is on this machine.
constexpr const char* kStoreBindAddr = "127.0.0.1";

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + signalName(WTERMSIG(status));
  return "exited with status " + std::to_string(exitCodeOf(status));
}

int msUntil(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left) + 1;
}

}  // namespace

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

Job::Job(LaunchOptions options) : options_(std::move(options)) {}

void Job::say(const std::string& line) const {
  std::string text = "ringfoldrun: " + line + "\n";
  writeAll(STDERR_FILENO, text.data(), text.size());
}

void Job::verbose(const std::string& line) const {
  if (options_.verbose) say(line);
}

int Job::runningCount() const {
  int n = 0;
  for (const auto& r : ranks_) n += r.running ? 1 : 0;
  return n;
}

bool Job::startRanks(const std::string& program, const std::vector<std::vector<std::string>>& envs,
                     std::vector<OutputForwarder::Source>& outputs) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    RankProcess p;
    try {
      p = spawnRank(r.slot.rank, program, options_.command, envs[i]);
    } catch (const SpawnError& e) {
      say(e.what());
      exitCode_ = kCannotExecuteExitCode;
      return false;
    }
    r.pid = p.pid;
    r.running = true;
    const std::string tag = "[" + std::to_string(r.slot.rank) + "]";
    outputs.push_back({p.stdoutFd, STDOUT_FILENO, tag + "<stdout>:"});
    outputs.push_back({p.stderrFd, STDERR_FILENO, tag + "<stderr>:"});
    verbose("started rank " + std::to_string(r.slot.rank) + " (pid " + std::to_string(r.pid) +
            ") on " + r.slot.host);
  }
  return true;
}

void Job::beginStop(int sig, const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  killAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options_.gracePeriodSeconds));
  int n = runningCount();
  if (n > 0) {
    say(why + "stopping " + std::to_string(n) + " remaining rank(s) with " + signalName(sig));
  }
  for (const auto& r : ranks_) {
    if (r.running) signalGroup(r.pid, sig);
  }
}

void Job::killAll() {
  killed_ = true;
  giveUpAt_ = Clock::now() + kReapAfterKill;
  for (const auto& r : ranks_) {
    if (r.running) signalGroup(r.pid, SIGKILL);
  }
}

void Job::onRankExit(Rank& r) {
  std::string what = "rank " + std::to_string(r.slot.rank) + " (pid " + std::to_string(r.pid) +
                     ") " + describeStatus(r.status);
  bool failed = !(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
  if (!failed || stopping_) {
    verbose(what);
    return;
  }
  say(what);
  exitCode_ = exitCodeOf(r.status);
  beginStop(SIGTERM, "");
}

bool Job::reapExited() {
  for (auto& r : ranks_) {
    if (!r.running) continue;
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    // WNOWAIT: the leader stays a zombie, so its pid (= the group id) cannot be reused while
    // the rest of its group (background children it left behind) is killed.
    if (waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != r.pid) {
      continue;
    }
    signalGroup(r.pid, SIGKILL);
    int status = 0;
    while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.status = status;
    r.running = false;
    onRankExit(r);
  }
  return runningCount() > 0;
}

int Job::run() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int sigFd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  RF_CHECK_ERRNO(sigFd, "signalfd");
  std::unique_ptr<int, void (*)(int*)> sigFdCloser(&sigFd, [](int* fd) { close(*fd); });

  requireLocalHosts(options_.hosts, thisHostname());
  std::vector<RankSlot> layout = computeRankLayout(options_.hosts, options_.numProc);

  const std::vector<std::string> base = currentEnvironment();
  // Found before anything starts, on the PATH the ranks will have (-x PATH=... counts).
  auto program = resolveProgram(options_.command[0],
                                buildRankEnvironment(base, options_, layout[0], StoreEndpoint{}));
  if (!program) {
    say("cannot execute '" + options_.command[0] + "': command not found");
    return kCannotExecuteExitCode;
  }

  // The store: in this process, on loopback, with a fresh secret.
  const std::string secret = rendezvous::generateSecret();
  rendezvous::TcpStoreServer store(kStoreBindAddr, 0, secret);
  StoreEndpoint endpoint{kStoreBindAddr, store.port(), secret};
  verbose("rendezvous store listening on " + endpoint.addr + ":" + std::to_string(endpoint.port));

  std::vector<std::vector<std::string>> envs;
  for (const auto& slot : layout) {
    envs.push_back(buildRankEnvironment(base, options_, slot, endpoint));
    ranks_.push_back(Rank{slot});
  }

  std::vector<OutputForwarder::Source> outputs;
  bool started = startRanks(*program, envs, outputs);
  OutputForwarder forwarder(std::move(outputs));
  if (!started) beginStop(SIGTERM, "");

  while (reapExited()) {
    int timeoutMs = -1;
    if (stopping_) timeoutMs = msUntil(killed_ ? giveUpAt_ : killAt_);
    pollfd pfd{sigFd, POLLIN, 0};
    int r = poll(&pfd, 1, timeoutMs);
    if (r < 0 && errno != EINTR) RF_CHECK_ERRNO(r, "poll on the signalfd");
    if (r > 0) {
      signalfd_siginfo si;
      while (read(sigFd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {  // non-blocking
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped at the top of the loop
        if (!stopping_) {
          exitCode_ = 128 + sig;
          beginStop(sig, "received " + signalName(sig) + ", ");
        } else if (!killed_) {
          say("received " + signalName(sig) + " again, killing the ranks");
          killAll();
        }
      }
    }
    if (stopping_ && !killed_ && Clock::now() >= killAt_ && runningCount() > 0) {
      char grace[32];
      std::snprintf(grace, sizeof grace, "%g", options_.gracePeriodSeconds);
      say(std::to_string(runningCount()) + " rank(s) still running after the " + grace +
          " s grace period, sending SIGKILL");
      killAll();
    } else if (killed_ && Clock::now() >= giveUpAt_ && runningCount() > 0) {
      say("giving up on " + std::to_string(runningCount()) +
          " rank(s) that did not exit after SIGKILL");
      break;
    }
  }
  forwarder.stop(kOutputDrain);
  return exitCode_;
}

}  // namespace ringfold::launcher
