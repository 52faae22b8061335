// RankProcess: one rank started with fork/exec, its output on pipes, in its own process group.
//
// Contract
//   * spawnRank() forks; the child leads a new process group (setpgid, set on both sides of the
//     fork so the parent may signal the group at once), asks for SIGKILL when the launcher's
//     thread that forked it dies (PR_SET_PDEATHSIG; it exits at once if the launcher is already
//     gone), gets /dev/null as stdin (ranks run in background groups, so a terminal read would
//     stop them) or, with stdinPipe, a pipe whose write end the caller gets (the ssh client of
//     a remote rank), stdout/stderr on pipes, the default signal mask and dispositions, the CPUs
//     `cpus` lists when it is not empty (sched_setaffinity; a refusal leaves the rank unbound,
//     see cpu_binding.h), and execs `program` with `argv` and `env`. Nothing but
//     async-signal-safe calls run in the child.
//   * An exec failure is reported to the parent through a close-on-exec pipe, so spawnRank()
//     throws SpawnError("cannot execute 'x': No such file or directory") instead of returning a
//     rank that died with 127.
//   * Call from the thread that stays alive for the whole job (PR_SET_PDEATHSIG follows the
//     forking thread), with SIGINT/SIGTERM/SIGCHLD blocked if the launcher uses signalfd.
//
// resolveProgram() finds `name` on the PATH of `env` (like execvp) before forking, so a missing
// command is reported once, before any rank starts.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace ringfold::launcher {

class SpawnError : public Error {
 public:
  explicit SpawnError(const std::string& what) : Error(what) {}
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;        // also its process group id
  int stdoutFd = -1;     // read ends, owned by the caller (close-on-exec)
  int stderrFd = -1;
  int stdinFd = -1;      // write end with stdinPipe (close-on-exec, non-blocking), else -1
};

// Returns the path to exec, or std::nullopt if `name` is not an executable found on PATH.
std::optional<std::string> resolveProgram(const std::string& name, const std::vector<std::string>& env);

RankProcess spawnRank(int rank, const std::string& program, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, bool stdinPipe = false,
                      const std::vector<int>& cpus = {});

// Signals the process group `pgid`; ESRCH (group gone) is not an error. Returns true if sent.
bool signalGroup(pid_t pgid, int sig);

}  // namespace ringfold::launcher
