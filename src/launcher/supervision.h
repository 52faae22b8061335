// Supervision: what ringfoldrun does to each process it starts, shared by Job (job.h) and
// ElasticJob (elastic_job.h): signal it, reap it, and say how it ended.
//
// Contract
//   * blockJobSignals() blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread (call
//     it before any other thread exists, so every thread inherits the mask), ignores SIGPIPE,
//     and returns a non-blocking signalfd for those four; the caller closes it.
//   * A ChildProcess is a local rank (pid = its process group) or the local ssh client of a
//     remote one. signalChild() sends a signal: a local process group gets it, then SIGCONT
//     unless it was SIGKILL (a stopped process keeps a caught signal pending until continued);
//     a remote rank that has started hears it through its ssh stdin (remote_rank.h), one whose
//     ssh is still connecting has its ssh client signalled. SIGKILL closes the ssh stdin, which
//     makes the remote side kill the rank.
//   * reapIfExited() reaps the child if it exited: first SIGKILL to what is left of its group
//     (background children) while the zombie leader still holds the group id, then waitpid;
//     the ssh stdin is closed. Returns whether it was reaped by this call.
//   * describeExit() is the line that names how it ended: "rank 3 (pid 77) exited with status 1"
//     (local; "was killed by signal SIGKILL"), or for a remote one "host H did not start rank 3
//     (ssh failed: <ssh's last words>)", "lost the connection to host H (rank 3: ...)", "rank 3
//     on host H exited with status 1"; `who` is "rank 3" or "worker h:0:1". For a remote child
//     it waits up to 300 ms for the forwarder to reach the end of ssh's output.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/output_forwarder.h"

namespace ringfold::launcher {

inline constexpr int kSshFailed = 255;  // ssh's exit status for its own errors

struct ChildProcess {
  pid_t pid = -1;     // the rank, or its ssh client (both lead their own group)
  bool local = true;  // false: pid is an ssh client
  std::string host;
  bool running = false;
  int status = 0;           // wait status once reaped
  int stdinFd = -1;         // remote: write end of the ssh client's stdin
  bool started = false;     // local: at once; remote: once its marker arrived
  size_t stdoutSource = 0;  // index of its stdout among its forwarder's sources (stderr: + 1)
};

int blockJobSignals();
void signalChild(ChildProcess& c, int sig);
bool reapIfExited(ChildProcess& c);
std::string describeExit(ChildProcess& c, const std::string& who, const OutputForwarder* forwarder);

// --output-filename: creates `dir` and opens dir/stdout and dir/stderr (truncated,
// close-on-exec); returns {stdout fd, stderr fd}. Throws Error naming the path.
std::vector<int> openLogFiles(const std::string& dir);

// The process's exit code as a shell shows it: status, or 128+signal.
int exitCodeOf(int status);
// "exited with status 3" / "was killed by signal SIGKILL".
std::string describeStatus(int status);
// "SIGKILL" for SIGKILL, "signal 64" when the number has no name.
std::string signalName(int sig);
std::string formatSeconds(double s, const char* format = "%.3f");
std::chrono::steady_clock::duration toDuration(double seconds);
// Milliseconds until t for poll(): 0 when past, rounded up.
int msUntil(std::chrono::steady_clock::time_point t);
// "ringfoldrun: <line>" on stderr.
void sayLine(const std::string& line);

}  // namespace ringfold::launcher
