#include "launcher/host_discovery.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "launcher/output_forwarder.h"
#include "launcher/rank_environment.h"
#include "launcher/rank_process.h"
#include "launcher/supervision.h"

namespace ringfold::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxOutputBytes = 1 << 20;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string lastLineOf(const std::string& text) {
  std::string t = trim(text);
  while (!t.empty() && t.back() == '\n') t.pop_back();
  size_t nl = t.rfind('\n');
  return trim(nl == std::string::npos ? t : t.substr(nl + 1));
}

// Reads what is available on fd into out; returns false at end of file (or an error).
bool readSome(int fd, std::string& out) {
  char buf[8192];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n > 0) {
    out.append(buf, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

}  // namespace

std::string runDiscoveryScript(const std::string& script, std::chrono::milliseconds timeout, RunningScript* running) {
  const std::string name = "host discovery script '" + script + "'";
  RankProcess p;
  try {
    p = spawnRank(0, "/bin/sh", {"/bin/sh", "-c", script}, currentEnvironment());
  } catch (const SpawnError& e) {
    throw DiscoveryError(name + ": " + e.what());
  }
  if (running != nullptr) {
    std::lock_guard<std::mutex> lock(running->mutex);
    running->pid = p.pid;
  }
  // Kills what is left of the group and reaps the script (its zombie keeps the group id
  // from being reused until then).
  auto reap = [&](int& status) {
    if (running != nullptr) {
      std::lock_guard<std::mutex> lock(running->mutex);
      running->pid = -1;
    }
    signalGroup(p.pid, SIGKILL);
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  const auto deadline = Clock::now() + timeout;
  std::string out, err;
  int fds[2] = {p.stdoutFd, p.stderrFd};
  bool open[2] = {true, true};
  bool exited = false, timedOut = false;
  int status = 0;
  while (true) {
    if (!exited) {
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(p.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == p.pid) {
        exited = true;
        reap(status);  // and what it left behind (it may hold the pipes open)
      }
    }
    if (exited) {
      // Whatever is still buffered in the pipes, without waiting for writers that were killed.
      for (int i = 0; i < 2; ++i) {
        if (!open[i]) continue;
        pollfd pfd{fds[i], POLLIN, 0};
        while (poll(&pfd, 1, 0) > 0 && readSome(fds[i], i == 0 ? out : err) && out.size() <= kMaxOutputBytes) {
        }
      }
      break;
    }
    if (Clock::now() >= deadline || out.size() > kMaxOutputBytes) {
      timedOut = Clock::now() >= deadline;
      reap(status);
      break;
    }
    pollfd pfd[2];
    nfds_t n = 0;
    for (int i = 0; i < 2; ++i) {
      if (open[i]) pfd[n++] = {fds[i], POLLIN, 0};
    }
    // Both pipes closed: the script is exiting; look again soon. Else wake on output, and now
    // and then to notice an exit while a leftover child holds the pipes.
    int r = poll(pfd, n, n == 0 ? 5 : 50);
    for (nfds_t k = 0; r > 0 && k < n; ++k) {
      if (pfd[k].revents == 0) continue;
      int i = pfd[k].fd == fds[0] ? 0 : 1;
      if (!readSome(fds[i], i == 0 ? out : err)) open[i] = false;
    }
  }
  close(fds[0]);
  close(fds[1]);
  if (timedOut) {
    throw DiscoveryError(name + " did not finish within " +
                         formatSeconds(std::chrono::duration<double>(timeout).count(), "%g") +
                         " s (RINGFOLD_ELASTIC_DISCOVERY_TIMEOUT)");
  }
  if (out.size() > kMaxOutputBytes) throw DiscoveryError(name + " printed more than 1 MiB");
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    const std::string said = lastLineOf(err);
    throw DiscoveryError(name + " " + describeStatus(status) + (said.empty() ? "" : ": " + said));
  }
  return out;
}

std::vector<HostSlots> parseDiscoveryOutput(const std::string& output, int defaultSlots) {
  std::vector<HostSlots> hosts;
  std::set<std::string> lines;
  size_t start = 0, lineNo = 0;
  while (start < output.size()) {
    size_t nl = output.find('\n', start);
    if (nl == std::string::npos) nl = output.size();
    const std::string line = trim(output.substr(start, nl - start));
    start = nl + 1;
    ++lineNo;
    if (line.empty() || !lines.insert(line).second) continue;
    const std::string where = "host discovery line " + std::to_string(lineNo) + " '" + line + "'";
    if (line.find_first_of(", \t") != std::string::npos) {
      throw DiscoveryError(where + ": expected host or host:slots");
    }
    HostSlots h;
    const size_t colon = line.find(':');
    try {
      // -H's rules for the name (a placeholder count: ":0" must parse here too).
      h = parseHosts(line.substr(0, colon)).at(0);
    } catch (const UsageError& e) {
      throw DiscoveryError(where + ": " + e.what());
    }
    h.slots = defaultSlots;
    if (colon != std::string::npos) {
      const std::string n = line.substr(colon + 1);
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000) {
        throw DiscoveryError(where + ": slots must be a number 0 or more, got '" + n + "'");
      }
      h.slots = static_cast<int>(v);
    }
    for (const auto& other : hosts) {
      if (other.host == h.host) {
        throw DiscoveryError(where + ": host '" + h.host + "' is listed again with other slots");
      }
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

std::string hostsText(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  return s.empty() ? "(none)" : s;
}

namespace {
bool sameHosts(const std::vector<HostSlots>& a, const std::vector<HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  }
  return true;
}
}  // namespace

DiscoveryPoller::DiscoveryPoller(std::string script, int defaultSlots, std::chrono::milliseconds interval,
                                 std::chrono::milliseconds timeout)
    : script_(std::move(script)), defaultSlots_(defaultSlots), interval_(interval), timeout_(timeout) {
  eventFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  RF_CHECK_ERRNO(eventFd_, "eventfd for host discovery");
}

DiscoveryPoller::~DiscoveryPoller() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  {
    std::lock_guard<std::mutex> lock(running_.mutex);
    if (running_.pid > 0) signalGroup(running_.pid, SIGKILL);
  }
  if (thread_.joinable()) thread_.join();
  close(eventFd_);
}

std::vector<HostSlots> DiscoveryPoller::runOnce() {
  return parseDiscoveryOutput(runDiscoveryScript(script_, timeout_, &running_), defaultSlots_);
}

std::vector<HostSlots> DiscoveryPoller::discoverNow() {
  std::vector<HostSlots> hosts = runOnce();
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = hosts;
  return hosts;
}

void DiscoveryPoller::start() {
  thread_ = std::thread([this] { loop(); });
}

std::optional<std::vector<HostSlots>> DiscoveryPoller::takeChange() {
  uint64_t v;
  ssize_t unused = read(eventFd_, &v, sizeof v);
  (void)unused;
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<std::vector<HostSlots>> c;
  c.swap(change_);
  return c;
}

void DiscoveryPoller::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, interval_, [this] { return stop_.load(); });
    if (stop_) break;
    lock.unlock();
    std::optional<std::vector<HostSlots>> hosts;
    try {
      hosts = runOnce();
    } catch (const Error& e) {
      if (stop_) break;  // killed by the destructor
      std::string line =
          "ringfoldrun: host discovery failed, keeping the previous hosts: " + std::string(e.what()) + "\n";
      writeAll(STDERR_FILENO, line.data(), line.size());
    }
    lock.lock();
    if (hosts && !sameHosts(*hosts, last_)) {
      last_ = *hosts;
      change_ = std::move(hosts);
      uint64_t one = 1;
      ssize_t unused = write(eventFd_, &one, sizeof one);
      (void)unused;
    }
  }
}

}  // namespace ringfold::launcher
