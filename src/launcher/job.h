// Job: one ringfoldrun launch, start to finish: host the store, start the ranks (here, or over
// ssh on other hosts), forward their output, supervise them, and stop all of them when one
// fails, a host does not come up, or the launcher is signalled.
//
// Contract
//   * run() blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD and reads them from a signalfd (no work
//     in a signal handler), ignores SIGPIPE, then starts the store (TcpStoreServer on the
//     address store_address.h picks, ephemeral port, fresh secret) and the ranks. Call it from
//     main() before any other thread exists, so every thread inherits the blocked mask.
//   * Before anything starts: the command is looked up on PATH (when some rank is local), ssh
//     (when some rank is remote), and every remote host must resolve and have a route; a
//     failure is reported naming it (127 for a missing program, 1 otherwise).
//   * Local ranks: fork/exec (rank_process.h), bound to CPUs as --bind-to says
//     (cpu_binding.h). Remote ranks: one local ssh client per rank
//     (remote_rank.h), which counts as started once the remote side printed its marker.
//   * A remote rank not started within the start timeout (--start-timeout, else
//     RINGFOLD_START_TIMEOUT, else 60 s): "ringfoldrun: host H did not start rank R within S s
//     (<ssh's last words>)", exit code 1, and every rank is stopped.
//   * A rank that exits non-zero or is killed: "ringfoldrun: rank R (pid P) exited with status
//     S" (or "was killed by signal SIGKILL"; remote: "rank R on host H ..."; ssh's own failure,
//     255: "lost the connection to host H" with ssh's message) on stderr. The other ranks then
//     get the failure grace (--failure-grace, else RINGFOLD_FAILURE_GRACE, else 2 s) to fail
//     and exit on their own: they see the dead peer within milliseconds and name it, where a
//     SIGTERM from the launcher could make one fail first on a peer the launcher had just
//     stopped, and name that one. Nothing is signalled during the grace; it ends early when
//     every rank has exited. The ranks still running at its end are stopped: "ringfoldrun:
//     S s after rank R failed (--failure-grace), stopping N remaining rank(s) with SIGTERM",
//     and SIGKILL after the grace period. No grace (they are stopped at once) when it is 0,
//     when the failed rank is a remote one that never started (no peer can have met it), or
//     when ssh lost its host (255: no rank was seen to die; the others would notice a lost host
//     only after RINGFOLD_TIMEOUT).
//     The exit code is that rank's status, or 128+signal.
//   * At the end of such a job, when the rank that exited first is not where the failure
//     started (it reports a failed peer, while another rank raised), or when other ranks report
//     a failed peer: "ringfoldrun: the failure started at rank R: <its error line> (ranks A, B
//     report a failed peer)", chosen as failure_cause.h says; the exit code is then rank R's
//     status if it failed on its own.
//   * Every signal but SIGKILL is followed by SIGCONT to the same process group (here, or on
//     the remote host), so a stopped rank (SIGSTOP, SIGTSTP) acts on it at once instead of
//     holding the job for the whole grace period.
//   * SIGINT/SIGTERM/SIGHUP to the launcher: forwarded to every rank (to a remote rank through
//     its ssh stdin) at once, during a failure grace too, SIGKILL after the grace period (at
//     once on a second signal); exit code 128+signal (130, 143, 129), or the failed rank's when
//     the signal came during its failure grace.
//   * When a rank's leader exits, what is left of its process group (background children) is
//     SIGKILLed before the leader is reaped (its zombie keeps the group id from being reused);
//     remote hosts do the same (remote_rank.h).
//   * If the launcher dies, even by SIGKILL, local ranks and ssh clients die of
//     PR_SET_PDEATHSIG, and each remote side sees its stdin close and kills its rank.
//   * Every wait is bounded: the job ends within grace period + a few seconds of the decision
//     to stop (after a rank's failure: the end of the failure grace), even if a rank ignores
//     SIGTERM, a host is unreachable, or a grandchild holds an output pipe open (an ssh client
//     that is still there at the end is SIGKILLed).
//   * All ranks exiting 0: exit code 0. A command that cannot be executed: 127.
//   * --verbose adds what is started where and the start-up time: "all N ranks started X s
//     after launch".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/output_forwarder.h"
#include "launcher/rank_layout.h"
#include "launcher/supervision.h"

namespace ringfold::launcher {

inline constexpr int kCannotExecuteExitCode = 127;
inline constexpr int kStartFailedExitCode = 1;

class Job {
 public:
  explicit Job(LaunchOptions options);
  // Runs the job to the end and returns the launcher's exit code.
  int run();

 private:
  struct Rank : ChildProcess {  // pid, running, status, ... (supervision.h)
    RankSlot slot;
    int failedSeq = -1;     // order among the ranks that failed on their own (failure_cause.h)
    bool stopped = false;   // died of the signal the launcher sent it
  };
  // What startRanks() needs for each rank: a local environment, or a remote ssh argv + script.
  struct Start {
    std::vector<std::string> env;
    std::vector<int> cpus;  // local: the CPUs it is bound to (empty: unbound)
    std::vector<std::string> sshArgv;
    std::string script;
  };

  // Starts every rank; returns false (after reporting it) if one could not be executed.
  bool startRanks(const std::string& program, const std::string& ssh,
                  const std::vector<Start>& starts, std::vector<OutputForwarder::Source>& outputs);
  std::vector<int> openOutputFiles();  // --output-filename: stdout, stderr fds per rank
  // Reaps every rank that has exited; returns false once none is running.
  bool reapExited();
  void onRankExit(Rank& r);
  // At the end of a failed job: names the rank whose failure came first when that is not the
  // rank first reported, or when others report a failed peer (failure_cause.h).
  void reportCause(const OutputForwarder& forwarder);
  void checkStarted(const OutputForwarder& forwarder);
  void signalRank(Rank& r, int sig);
  void beginStop(int sig, const std::string& why);
  // After the first failure: the failure grace, or beginStop at once (the contract).
  void beginFailureGrace(const Rank& failed);
  void killAll();
  void abandonRemote();  // SIGKILL and reap the ssh clients still running
  int runningCount() const;
  void say(const std::string& line) const;     // always, to stderr
  void verbose(const std::string& line) const;  // with --verbose
  double secondsSinceLaunch() const;

  LaunchOptions options_;
  std::vector<Rank> ranks_;
  const OutputForwarder* forwarder_ = nullptr;
  bool failing_ = false;   // a rank failed: the others are in their failure grace
  bool stopping_ = false;  // the ranks have been signalled
  bool killed_ = false;
  bool allStarted_ = false;
  int exitCode_ = 0;
  int failedCount_ = 0;
  int firstFailed_ = -1;  // the rank whose exit stopped the job
  int64_t firstFailureNs_ = 0;  // when (steady_clock, as OutputForwarder's times)
  double startTimeoutSeconds_ = 60;
  double failureGraceSeconds_ = 2;
  std::string nonce_;  // marks a remote rank's start line and the end of its script
  std::chrono::steady_clock::time_point launchedAt_;
  std::chrono::steady_clock::time_point startDeadline_;
  std::chrono::steady_clock::time_point stopAt_;    // the end of the failure grace
  std::chrono::steady_clock::time_point killAt_;    // SIGKILL after the grace period
  std::chrono::steady_clock::time_point giveUpAt_;  // stop waiting for unkillable ranks
};

}  // namespace ringfold::launcher
