// The rank side of the multi-process C ABI tests (c_worker.cc, c_fault_worker.cc): checks that
// print instead of aborting, and the few C ABI calls every scenario makes. Plain ringfold.h only.
//
// Every rank prints, line-buffered (worker_job.h reads it):
//   FAIL <rank> line <n>: <what>     for each failed check (the driver fails on any)
//   MSG <rank> <key>: <text>         messages the driver compares across ranks
//   TIME <rank> <key>: <seconds>     durations the driver bounds
//   DONE <rank> <scenario>           at the end; the process exits 0 when no check failed.
// Every wait is bounded (kWait), so an engine that never completes a handle fails a check
// instead of hanging the job.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bindings/c/ringfold.h"

namespace rftest {

constexpr double kWait = 60.0;
inline int gRank = -1;
inline std::atomic<int> gFailures{0};

inline void fail(int line, const std::string& what) {
  ++gFailures;
  std::printf("FAIL %d line %d: %s\n", gRank, line, what.c_str());
  std::fflush(stdout);
}

inline std::string err() { return ringfold_last_error(); }
inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

#define CHECK(cond, detail)                                                   \
  do {                                                                        \
    if (!(cond)) rftest::fail(__LINE__, std::string(#cond) + " -- " + (detail)); \
  } while (0)
#define CHECK_OK(call)                                                                                         \
  do {                                                                                                         \
    const int rc_ = (call);                                                                                    \
    if (rc_ != RINGFOLD_OK)                                                                                    \
      rftest::fail(__LINE__, std::string(#call) + " -> " + std::to_string(rc_) + ": " + rftest::err());       \
  } while (0)
#define CHECK_EQ(a, b)                                                                                     \
  do {                                                                                                     \
    const auto a_ = (a);                                                                                   \
    const auto b_ = (b);                                                                                   \
    if (!(a_ == b_))                                                                                       \
      rftest::fail(__LINE__, std::string(#a " == " #b) + " -- " + std::to_string(a_) + " vs " + std::to_string(b_)); \
  } while (0)

inline void message(const std::string& key, const std::string& text) {
  std::printf("MSG %d %s: %s\n", gRank, key.c_str(), text.c_str());
  std::fflush(stdout);
}

inline void timing(const std::string& key, double seconds) {
  std::printf("TIME %d %s: %.3f\n", gRank, key.c_str(), seconds);
  std::fflush(stdout);
}

// Waits for `h` and releases it; returns its status (the message goes to *why).
inline int finish(int64_t h, std::string* why = nullptr) {
  const int rc = ringfold_wait(h, kWait);
  if (why) *why = err();
  if (rc != RINGFOLD_IN_PROGRESS) ringfold_release(h);
  return rc;
}

inline int64_t allreduce(const void* in, void* out, int dtype, std::vector<int64_t> shape, const char* name, int op,
                         double pre = 1.0, double post = 1.0, int set = 0) {
  int64_t h = -1;
  CHECK_OK(ringfold_allreduce_async(in, out, dtype, shape.data(), static_cast<int>(shape.size()), name, op, pre, post,
                                    set, RINGFOLD_CPU_DEVICE, &h));
  return h;
}

// The engine-allocated result of a completed handle (and its shape, when asked).
template <typename T>
std::vector<T> result(int64_t h, std::vector<int64_t>* shape = nullptr) {
  size_t bytes = 0;
  CHECK_OK(ringfold_result_bytes(h, &bytes));
  std::vector<T> out(bytes / sizeof(T));
  CHECK_OK(ringfold_result_copy(h, out.data(), bytes));
  if (shape) {
    int ndim = 0;
    CHECK_OK(ringfold_result_ndim(h, &ndim));
    shape->assign(ndim, -1);
    CHECK_OK(ringfold_result_shape(h, shape->data(), ndim));
  }
  return out;
}

// main(): `prog <scenario> [<dir>]` runs one scenario, prints DONE and exits 0 when no check
// failed, 1 when one did, 2 on a usage error. `needDir`: the directory argument is required.
inline int runScenario(int argc, char** argv, bool needDir,
                       const std::map<std::string, std::function<void(const std::string& dir)>>& scenarios) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < (needDir ? 3 : 2) || !scenarios.count(argv[1])) {
    std::string names;
    for (const auto& [name, run] : scenarios) names += (names.empty() ? "" : "|") + name;
    std::fprintf(stderr, "usage: %s %s %s\n", argv[0], names.c_str(), needDir ? "<dir>" : "[<dir>]");
    return 2;
  }
  const std::string scenario = argv[1];
  scenarios.at(scenario)(argc > 2 ? argv[2] : "/tmp");
  std::printf("DONE %d %s failures=%d\n", gRank, scenario.c_str(), gFailures.load());
  return gFailures.load() == 0 ? 0 : 1;
}

}  // namespace rftest
