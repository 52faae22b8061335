// HostDiscovery: which hosts an elastic job may use now, from the user's discovery script
// (ringfoldrun --host-discovery-script S, Horovod's contract for S).
//
// Contract
//   * runDiscoveryScript() runs S with `/bin/sh -c S` (the launcher's environment, stdin
//     /dev/null, its own process group, SIGKILLed if the launcher dies) and returns its stdout.
//     It is bounded: a script still running after `timeout` is SIGKILLed with its whole group,
//     and so is anything it left behind once it exits, so a background child holding the pipe
//     cannot stall the launcher. Throws DiscoveryError: "host discovery script 'S' exited with
//     status 3: <its last stderr line>", "... was killed by signal SIGSEGV", "... did not finish
//     within 30 s", or an output over 1 MiB.
//   * parseDiscoveryOutput(): each non-blank line (surrounding blanks trimmed) is "host" (given
//     `defaultSlots`, --slots) or "host:slots" (slots >= 0; 0 lists a host without slots). Hosts
//     keep the order they were printed in; a line printed twice counts once (Horovod dedups
//     lines too); the same host with two slot counts, a bad slot count or a bad host name
//     (host_list.h's rules, no ',' or blanks inside) throws DiscoveryError naming the line.
//     No line at all is a valid answer: no host is available now.
//   * DiscoveryPoller runs the script on its own thread every `interval` (the first run is
//     discoverNow(), on the caller's thread, whose error fails the job as Horovod's first
//     discovery does). A later run that fails is reported on stderr ("ringfoldrun: host
//     discovery failed, keeping the previous hosts: ...") and changes nothing. When a run's
//     hosts differ from the last ones published, they are published: eventFd() becomes
//     readable and takeChange() returns them (once). The destructor stops the thread at once
//     moment: a script still running is SIGKILLed.
#pragma once

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "launcher/host_list.h"

namespace ringfold::launcher {

class DiscoveryError : public Error {
 public:
  explicit DiscoveryError(const std::string& what) : Error(what) {}
};

// While the script runs, its pid (= process group) is in *running (under *mutex), so that
// another thread may kill it; -1 once it is reaped.
struct RunningScript {
  std::mutex mutex;
  pid_t pid = -1;
};
std::string runDiscoveryScript(const std::string& script, std::chrono::milliseconds timeout,
                               RunningScript* running = nullptr);

std::vector<HostSlots> parseDiscoveryOutput(const std::string& output, int defaultSlots);

// "a:2,b:1" (for messages).
std::string hostsText(const std::vector<HostSlots>& hosts);

class DiscoveryPoller {
 public:
  DiscoveryPoller(std::string script, int defaultSlots, std::chrono::milliseconds interval,
                  std::chrono::milliseconds timeout);
  ~DiscoveryPoller();
  DiscoveryPoller(const DiscoveryPoller&) = delete;
  DiscoveryPoller& operator=(const DiscoveryPoller&) = delete;

  // Runs the script once, here; the result becomes the last published hosts. Throws
  // DiscoveryError.
  std::vector<HostSlots> discoverNow();
  // Starts the polling thread (after discoverNow()).
  void start();
  int eventFd() const { return eventFd_; }
  // The hosts published since the last call, if they changed; clears eventFd().
  std::optional<std::vector<HostSlots>> takeChange();

 private:
  void loop();
  std::vector<HostSlots> runOnce();

  const std::string script_;
  const int defaultSlots_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds timeout_;
  int eventFd_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::vector<HostSlots> last_;                   // last published
  std::optional<std::vector<HostSlots>> change_;  // published, not yet taken
  RunningScript running_;
  std::thread thread_;
};

}  // namespace ringfold::launcher
