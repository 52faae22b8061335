// Job: one ringfoldrun launch, start to finish: host the store, start the ranks, forward their
// output, supervise them, and stop all of them when one fails or the launcher is signalled.
//
// Contract
//   * run() blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD and reads them from a signalfd (no work
//     in a signal handler), ignores SIGPIPE, then starts the store (TcpStoreServer on 127.0.0.1,
//     ephemeral port, fresh secret) and the ranks. Call it from main() before any other thread
//     exists, so every thread inherits the blocked mask.
//   * A rank that exits non-zero or is killed: "ringfoldrun: rank R (pid P) exited with status S"
//     (or "was killed by signal SIGKILL") on stderr, then every other rank's process group gets
//     SIGTERM, and SIGKILL after the grace period. The exit code is that rank's status, or
//     128+signal.
//   * SIGINT/SIGTERM/SIGHUP to the launcher: forwarded to every rank's process group, SIGKILL
//     after the grace period (at once on a second signal); exit code 128+signal (130, 143, 129).
//   * When a rank's leader exits, what is left of its process group (background children) is
//     SIGKILLed before the leader is reaped (its zombie keeps the group id from being reused).
//   * Every wait is bounded: the job ends within grace period + a few seconds of the decision
//     to stop, even if a rank ignores SIGTERM or a grandchild holds an output pipe open.
//   * All ranks exiting 0: exit code 0. A command that cannot be executed: 127.
//
// Ranks are placed by computeRankLayout(); only local hosts are started here. Multi-host launch
// will add a remote starter (ssh) beside spawnRank(): the supervision above is the same, since
// an ssh client is a local child too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/output_forwarder.h"
#include "launcher/rank_layout.h"

namespace ringfold::launcher {

inline constexpr int kCannotExecuteExitCode = 127;

class Job {
 public:
  explicit Job(LaunchOptions options);
  // Runs the job to the end and returns the launcher's exit code.
  int run();

 private:
  struct Rank {
    RankSlot slot;
    pid_t pid = -1;
    bool running = false;
    int status = 0;  // wait status once reaped
  };

  // Starts every rank; returns false (after reporting it) if one could not be executed.
  bool startRanks(const std::string& program, const std::vector<std::vector<std::string>>& envs,
                  std::vector<OutputForwarder::Source>& outputs);
  // Reaps every rank that has exited; returns false once none is running.
  bool reapExited();
  void onRankExit(Rank& r);
  void beginStop(int sig, const std::string& why);
  void killAll();
  int runningCount() const;
  void say(const std::string& line) const;     // always, to stderr
  void verbose(const std::string& line) const;  // with --verbose

  LaunchOptions options_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  bool killed_ = false;
  int exitCode_ = 0;
  std::chrono::steady_clock::time_point killAt_;    // SIGKILL after the grace period
  std::chrono::steady_clock::time_point giveUpAt_;  // stop waiting for unkillable ranks
};

// "SIGKILL" for SIGKILL, "signal 64" when the number has no name.
std::string signalName(int sig);

}  // namespace ringfold::launcher
