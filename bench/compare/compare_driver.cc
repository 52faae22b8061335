#include "bench/compare/compare_driver.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <vector>

#include "bench/common/nccl_format.h"
#include "bench/common/sum_pattern.h"

namespace ringfold::bench {
namespace {

// The sum pattern of bench/common/sum_pattern.h: small integers whose float sums are exact.
float inputValue(int rank, size_t i, uint64_t seed, int nranks) {
  return static_cast<float>(sumInput(i, rank, seed, nranks));
}

float expectedValue(size_t i, uint64_t seed, int nranks) {
  float acc = 0;
  for (int r = 0; r < nranks; ++r) acc += inputValue(r, i, seed, nranks);
  return acc;
}

struct Buffer {
  explicit Buffer(size_t elems) {
    const size_t bytes = std::max<size_t>(4096, (elems * sizeof(float) + 4095) / 4096 * 4096);
    data = static_cast<float*>(std::aligned_alloc(4096, bytes));
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, bytes);
  }
  ~Buffer() { std::free(data); }
  float* data;
};

}  // namespace

void requireFloatSum(const BenchFlags& f) {
  if (f.datatype != "float" && f.datatype != "float32") {
    throw FlagError("-d " + f.datatype + ": the comparison programs measure float only");
  }
  if (f.op != "sum") throw FlagError("-o " + f.op + ": the comparison programs measure sum only");
}

int runCompare(const std::string& program, const BenchFlags& f, CompareBackend& b) {
  const int rank = b.rank();
  const int n = b.size();
  const auto sizes = f.sizes();
  size_t capacity = 0;
  for (size_t s : sizes) capacity = std::max(capacity, s / sizeof(float));
  capacity = std::max(capacity, f.maxBytes / sizeof(float));
  Buffer send(capacity), recv(capacity);

  auto combineTime = [&](double seconds) {
    switch (f.average) {
      case 0: return b.combine(rank == 0 ? seconds : 0.0, CompareBackend::Combine::kSum);
      case 1: return b.combine(seconds, CompareBackend::Combine::kSum) / n;
      case 2: return b.combine(seconds, CompareBackend::Combine::kMin);
      default: return b.combine(seconds, CompareBackend::Combine::kMax);
    }
  };
  auto fill = [&](float* p, size_t count, uint64_t seed) {
    for (size_t i = 0; i < count; ++i) p[i] = inputValue(rank, i, seed, n);
  };
  auto one = [&](size_t count, bool inPlace, size_t shift) {
    b.allreduce(send.data + shift, recv.data + shift, count, inPlace);
    if (f.blocking == 1) b.barrier();
  };

  if (rank == 0) {
    RunHeader h;
    h.program = program;
    h.version = "compare-" + b.deviceName();
    h.minBytes = f.minBytes;
    h.maxBytes = f.maxBytes;
    h.stepBytes = f.stepBytes;
    h.stepFactor = f.stepFactor;
    h.warmupIters = f.warmupIters;
    h.iters = f.iters;
    h.aggIters = f.aggIters;
    h.validation = f.check;
    h.blocking = f.blocking;
    printPreamble(stdout, h);
  }
  // Device lines: each rank's pid reaches rank 0 through the compared library's own reduction.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<int> pids(n);
  for (int r = 0; r < n; ++r) {
    pids[r] = static_cast<int>(b.combine(rank == r ? getpid() : 0, CompareBackend::Combine::kSum));
  }
  if (rank == 0) {
    for (int r = 0; r < n; ++r) {
      std::printf("%s\n", deviceLine(r, 0, pids[r], host, 0, "0000:00:00", "cpu " + b.deviceName()).c_str());
    }
    printResultHeader(stdout, f.reportCpuTime != 0);
  }

  b.barrier();
  for (size_t size : sizeSeries(f.minBytes, f.maxBytes, 0, 2)) {
    const size_t count = size / sizeof(float);
    b.prepare(send.data, recv.data, count, false);
    for (int i = 0; i < f.warmupIters; ++i) one(count, false, 0);
    b.release();
  }

  double bwSum = 0;
  int bwCount = 0;
  int64_t wrongRows = 0;
  uint64_t rep = 0;
  for (size_t size : sizes) {
    const size_t count = size / sizeof(float);
    const size_t bytes = count * sizeof(float);
    if (rank == 0) printRowPrefix(stdout, bytes, count, "float", "sum", -1);
    for (bool inPlace : {false, true}) {
      const size_t steps = count ? std::max<size_t>(1, capacity / count) : 1;
      const int total = f.iters * f.aggIters;
      const size_t used = std::min<size_t>(steps, static_cast<size_t>(total));
      for (size_t k = 0; k < used; ++k) {
        b.prepare(send.data + k * count, recv.data + k * count, count, inPlace);
      }
      if (f.check > 0) fill(inPlace ? recv.data : send.data, count, 0);
      one(count, inPlace, 0);
      b.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < total; ++i) one(count, inPlace, count * (static_cast<size_t>(i) % steps));
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      const double seconds = combineTime(elapsed.count() / total);
      const double algBw = seconds > 0 ? static_cast<double>(bytes) / 1.0e9 / seconds : 0.0;
      const double busBw = algBw * 2.0 * (n - 1) / n;

      std::optional<int64_t> shown;
      if (f.check > 0) {
        int64_t wrong = 0;
        for (int c = 0; c < f.check; ++c) {
          const uint64_t seed = ++rep;
          std::memset(recv.data, 0xEE, bytes);
          fill(inPlace ? recv.data : send.data, count, seed);
          one(count, inPlace, 0);
          for (size_t i = 0; i < count; ++i) wrong += recv.data[i] != expectedValue(i, seed, n) ? 1 : 0;
        }
        wrong = static_cast<int64_t>(b.combine(static_cast<double>(wrong), CompareBackend::Combine::kSum));
        shown = wrong;
        if (wrong) ++wrongRows;
      }
      b.release();
      if (rank == 0) printRowBody(stdout, seconds * 1.0e6, algBw, busBw, shown);
      bwSum += busBw;
      ++bwCount;
    }
    if (rank == 0) printRowEnd(stdout);
  }
  if (rank == 0) printFooter(stdout, wrongRows, bwCount ? bwSum / bwCount : 0.0, program);
  return wrongRows == 0 ? 0 : 1;
}

}  // namespace ringfold::bench
