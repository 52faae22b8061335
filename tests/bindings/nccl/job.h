// Forked jobs for the NCCL-API library's tests: `n` rank processes sharing one ncclUniqueId.
//
// runJob() forks every rank before any thread exists (the test process itself never calls
// NCCL); rank 0 calls ncclGetUniqueId and passes the id to the others through pipes. Each rank
// runs `body` and exits with its return value (0: success); a rank reports its failures on
// stderr with CHECK. The job has a hard deadline: ranks still running then are killed, and the
// job says so, so a hang fails the test instead of stalling it.
#pragma once

#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ncclt {

// In a rank: counts a failure and prints where and why; the rank's exit status is the count.
inline int& failures() {
  static int n = 0;
  return n;
}
inline long& checks() {
  static long n = 0;
  return n;
}
inline int& myRank() {
  static int r = -1;
  return r;
}
#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    ++::ncclt::checks();                                                            \
    if (!(cond)) {                                                                  \
      ++::ncclt::failures();                                                        \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", ::ncclt::myRank(), \
                   __FILE__, __LINE__, #cond);                                      \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
    }                                                                               \
  } while (0)
// An NCCL call that must succeed.
#define NCCLOK(call)                                                                                   \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    CHECK(r_ == ncclSuccess, "%s returned %d (%s): %s", #call, int(r_), ncclGetErrorString(r_),       \
          ncclGetLastError(nullptr));                                                                  \
  } while (0)

struct JobResult {
  std::vector<int> status;  // exit status per rank; -signal when killed by one
  bool timedOut = false;
  bool ok() const {
    if (timedOut) return false;
    for (int s : status) {
      if (s != 0) return false;
    }
    return true;
  }
  std::string describe() const {
    std::string d = timedOut ? "timed out; " : "";
    for (size_t r = 0; r < status.size(); ++r) d += "rank " + std::to_string(r) + ": " + std::to_string(status[r]) + "; ";
    return d;
  }
};

using Body = std::function<int(int rank, int n, const ncclUniqueId& id)>;

inline bool readAll(int fd, void* p, size_t n, int timeoutMs) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, timeoutMs) <= 0) return false;
    const ssize_t got = read(fd, b, n);
    if (got <= 0) return false;
    b += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// `env` is set in every rank before its body runs.
inline JobResult runJob(int n, const Body& body, std::chrono::seconds deadline,
                        const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::vector<int> readEnds(n, -1), writeEnds(n, -1);
  for (int r = 1; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    readEnds[r] = fds[0];
    writeEnds[r] = fds[1];
  }
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      myRank() = r;
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      ncclUniqueId id{};
      if (r == 0) {
        const ncclResult_t res = ncclGetUniqueId(&id);
        if (res != ncclSuccess) {
          std::fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
          _exit(100);
        }
        for (int p = 1; p < n; ++p) {
          if (write(writeEnds[p], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) _exit(101);
        }
      } else if (!readAll(readEnds[r], &id, sizeof id, 30000)) {
        std::fprintf(stderr, "rank %d: no unique id from rank 0\n", r);
        _exit(102);
      }
      int rc = 111;
      try {
        rc = body(r, n, id);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: exception %s\n", r, e.what());
      }
      if (std::getenv("NCCLT_VERBOSE")) std::fprintf(stderr, "rank %d: %ld checks, %d failed\n", r, checks(), failures());
      std::fflush(stderr);
      std::fflush(stdout);
      _exit(rc == 0 ? failures() > 0 ? 1 : 0 : rc);
    }
    pids[r] = pid;
  }
  for (int r = 1; r < n; ++r) {
    close(readEnds[r]);
    close(writeEnds[r]);
  }
  JobResult result;
  result.status.assign(n, 0);
  std::vector<bool> done(n, false);
  int remaining = n;
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        result.status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > end) {
      result.timedOut = true;
      for (int r = 0; r < n; ++r) {
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          int st = 0;
          waitpid(pids[r], &st, 0);
          result.status[r] = -SIGKILL;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

}  // namespace ncclt
