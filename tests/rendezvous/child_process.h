// Bounded helpers for tests that fork: run a function in a child and collect its exit code.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

namespace ringfold::rendezvous::testing {

// Runs fn() in a forked child; the child exits with fn's return value (2 if it threw).
inline pid_t forkChild(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 2;
    try {
      rc = fn();
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  return pid;
}

// Waits for the child up to `timeout`; kills it and returns -1 if it is still running.
inline int waitChild(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace ringfold::rendezvous::testing
