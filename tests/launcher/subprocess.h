// Subprocess: runs a program (the built ringfoldrun) for the launcher tests, capturing its
// stdout and stderr, with a hard deadline: a launcher that hangs is SIGKILLed and reported, never
// waited on forever. Also helpers to look at the ranks a launcher started.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ringfold::launcher::testing {

struct Finished {
  int exitCode = -1;       // exit status, or 128+signal
  bool timedOut = false;   // the deadline passed and the process was killed
  std::string out;
  std::string err;
  double seconds = 0;      // from start() to exit
};

class Subprocess {
 public:
  // Starts argv[0] (a path) with argv, in the caller's environment plus `extraEnv` ("N=v").
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::vector<std::string>& extraEnv = {});
  ~Subprocess();  // SIGKILLs and reaps a process that was not finished
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Reads its output until it exits, at most `timeout`.
  Finished finish(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int outFd_ = -1, errFd_ = -1;
  std::chrono::steady_clock::time_point start_;
};

// Runs to the end (at most `timeout`).
Finished run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
             const std::vector<std::string>& extraEnv = {});

// A fresh empty directory under the temp dir, removed with its files by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// True if `pid` exists and is not a zombie.
bool processAlive(pid_t pid);
// Waits (at most `timeout`) until `dir` holds `count` files named pid.* and returns their pids.
std::vector<pid_t> waitForPidFiles(const std::string& dir, int count, std::chrono::milliseconds timeout);
// Waits (at most `timeout`) until none of `pids` is alive; returns the ones still alive.
std::vector<pid_t> waitUntilDead(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout);

std::vector<std::string> splitLines(const std::string& text);

}  // namespace ringfold::launcher::testing
