#include "launcher/supervision.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "launcher/rank_process.h"
#include "launcher/remote_rank.h"

namespace ringfold::launcher {

using Clock = std::chrono::steady_clock;

int blockJobSignals() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  RF_CHECK_ERRNO(fd, "signalfd");
  return fd;
}

void signalChild(ChildProcess& c, int sig) {
  if (!c.running) return;
  if (c.local) {
    signalGroup(c.pid, sig);
    if (sig != SIGKILL) signalGroup(c.pid, SIGCONT);
    return;
  }
  // A remote rank that has started hears the signal through its ssh stdin; one that has not
  // (ssh still connecting) is stopped by stopping its ssh client, whose end of file makes the
  // remote side stop whatever it started.
  bool told = c.started && signalRemoteRank(c.stdinFd, sig);
  if (sig == SIGKILL && c.stdinFd >= 0) {
    close(c.stdinFd);
    c.stdinFd = -1;
  }
  if (!told && !c.started) {
    signalGroup(c.pid, sig);
    if (sig != SIGKILL) signalGroup(c.pid, SIGCONT);
  }
}

bool reapIfExited(ChildProcess& c) {
  if (!c.running) return false;
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  // WNOWAIT: the leader stays a zombie, so its pid (= the group id) cannot be reused while
  // the rest of its group (background children it left behind) is killed.
  if (waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != c.pid) {
    return false;
  }
  signalGroup(c.pid, SIGKILL);
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.status = status;
  c.running = false;
  if (c.stdinFd >= 0) {
    close(c.stdinFd);
    c.stdinFd = -1;
  }
  return true;
}

std::string describeExit(ChildProcess& c, const std::string& who, const OutputForwarder* forwarder) {
  const int code = exitCodeOf(c.status);
  if (c.local) return who + " (pid " + std::to_string(c.pid) + ") " + describeStatus(c.status);
  // ssh's last words (why it failed), or the start marker, may still be in the pipes: give
  // the forwarder a moment to reach their end.
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (code != 0 && forwarder != nullptr &&
         !(forwarder->finished(c.stdoutSource) && forwarder->finished(c.stdoutSource + 1)) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (forwarder != nullptr && forwarder->started(c.stdoutSource)) c.started = true;
  const std::string said = forwarder != nullptr ? forwarder->lastLine(c.stdoutSource + 1) : "";
  const std::string tail = said.empty() ? "" : ": " + said;
  if (!c.started && code != 0) {
    return "host " + c.host + " did not start " + who + " (" +
           (code == kSshFailed ? "ssh failed" : "exit status " + std::to_string(code)) + tail + ")";
  }
  if (code == kSshFailed) {
    return "lost the connection to host " + c.host + " (" + who +
           (said.empty() ? ": ssh exited with status 255, the host stopped answering or closed "
                           "the connection"
                         : tail) +
           ")";
  }
  if (code > 128 && code < 128 + NSIG) {
    return who + " on host " + c.host + " was killed by signal " + signalName(code - 128);
  }
  return who + " on host " + c.host + " exited with status " + std::to_string(code);
}

std::vector<int> openLogFiles(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("--output-filename: cannot create " + dir + ": " + ec.message());
  std::vector<int> fds;
  for (const char* name : {"/stdout", "/stderr"}) {
    int fd = open((dir + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      int e = errno;
      for (int f : fds) close(f);
      throw Error("--output-filename: cannot write " + dir + name + ": " + std::strerror(e));
    }
    fds.push_back(fd);
  }
  return fds;
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + signalName(WTERMSIG(status));
  return "exited with status " + std::to_string(exitCodeOf(status));
}

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string formatSeconds(double s, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, s);
  return buf;
}

Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int msUntil(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left) + 1;
}

void sayLine(const std::string& line) {
  std::string text = "ringfoldrun: " + line + "\n";
  writeAll(STDERR_FILENO, text.data(), text.size());
}

}  // namespace ringfold::launcher
