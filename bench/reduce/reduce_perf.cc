// reduce_perf: bandwidth of the CPU reducer on each ISA path, next to memcpy of the same size
// measured in the same run (the machine is shared and noisy: every figure is a median).
//
//   reduce_perf [--bytes 64M] [--runs 15] [--small 256K] [--dtypes float,half,bfloat16]
//
// Bytes per operand. GB/s counts bytes read + written: memcpy moves 2x the buffer, a reduce
// 3x (reads a and b, writes dst). "ratio" is reduce GB/s over memcpy GB/s. Out of place writes a
// third buffer; in place writes over a (dst == a), as the ring allreduce does. The small size
// (in cache) shows the per-element cost without the memory bottleneck.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/params.h"
#include "reduce/cpu_reducer.h"

using namespace ringfold;

namespace {

struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes) {
    void* p = nullptr;
    RF_ENFORCE(posix_memalign(&p, 4096, bytes) == 0, "out of memory for ", bytes, " bytes");
    data = static_cast<uint8_t*>(p);
  }
  ~Buffer() { free(data); }
  uint8_t* data;
  size_t size;
};

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
double medianSeconds(int runs, int reps, F&& body) {
  body();  // warm up: page faults, caches, frequency
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const double t0 = seconds();
    for (int i = 0; i < reps; ++i) body();
    t.push_back((seconds() - t0) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Values that stay finite and do not overflow under repeated in-place sums.
void fill(uint8_t* p, size_t bytes, DataType t, unsigned seed) {
  const size_t n = bytes / dataTypeSize(t);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float v = float(int32_t(x >> 9) % 2001 - 1000) * 1e-6f;
    switch (t) {
      case DataType::kFloat32: std::memcpy(p + 4 * i, &v, 4); break;
      case DataType::kFloat64: { double d = v; std::memcpy(p + 8 * i, &d, 8); break; }
      case DataType::kFloat16: { uint16_t h = uint16_t(0x1000 | (x & 0x83FF)); std::memcpy(p + 2 * i, &h, 2); break; }
      case DataType::kBfloat16: { uint32_t u; std::memcpy(&u, &v, 4); uint16_t b = uint16_t(u >> 16); std::memcpy(p + 2 * i, &b, 2); break; }
      default: p[i * dataTypeSize(t)] = uint8_t(x);
    }
  }
}

uint64_t parseSize(const char* s) { return params::parseBytes(s, "size argument"); }

void runSize(size_t bytes, int runs, const std::vector<DataType>& dtypes, const std::vector<CpuIsa>& isas) {
  Buffer a(bytes), b(bytes), c(bytes);
  std::memset(c.data, 0, bytes);
  // Small buffers repeat inside one timed run so that each run lasts long enough to time.
  const int reps = std::max<int>(1, int((8u << 20) / bytes));
  fill(a.data, bytes, DataType::kFloat32, 1);
  fill(b.data, bytes, DataType::kFloat32, 2);
  const double tCopy = medianSeconds(runs, reps, [&] { std::memcpy(c.data, a.data, bytes); });
  const double copyGBs = 2.0 * bytes / tCopy / 1e9;
  std::printf("\n# %zu bytes per operand, median of %d runs%s\n", bytes, runs,
              reps > 1 ? (" (x" + std::to_string(reps) + " calls each)").c_str() : "");
  std::printf("%-10s %-9s %-12s %10s %8s %8s\n", "op", "dtype", "path", "time(us)", "GB/s", "ratio");
  std::printf("%-10s %-9s %-12s %10.1f %8.2f %8.2f\n", "memcpy", "-", "libc", tCopy * 1e6, copyGBs, 1.0);
  for (DataType t : dtypes) {
    fill(a.data, bytes, t, 1);
    fill(b.data, bytes, t, 2);
    const size_t count = bytes / dataTypeSize(t);
    for (CpuIsa isa : isas) {
      auto red = makeCpuReducer(isa);
      for (bool inPlace : {false, true}) {
        // In place, a accumulates b run after run; the small inputs stay finite and normal.
        uint8_t* dst = inPlace ? a.data : c.data;
        const double tr = medianSeconds(runs, reps, [&] {
          red->reduce(dst, a.data, b.data, count, t, ReduceOp::kSum);
        });
        const double gbs = 3.0 * bytes / tr / 1e9;
        std::printf("%-10s %-9s %-12s %10.1f %8.2f %8.2f\n", inPlace ? "sum-inplace" : "sum",
                    dataTypeName(t), cpuIsaName(isa), tr * 1e6, gbs, gbs / copyGBs);
      }
    }
  }
  const double tCopy2 = medianSeconds(runs, reps, [&] { std::memcpy(c.data, a.data, bytes); });
  std::printf("%-10s %-9s %-12s %10.1f %8.2f   (again, after the reduces)\n", "memcpy", "-",
              "libc", tCopy2 * 1e6, 2.0 * bytes / tCopy2 / 1e9);
}

}  // namespace

int main(int argc, char** argv) try {
  size_t bytes = 64u << 20, small = 256u << 10;
  int runs = 15;
  std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--bytes" && val) { bytes = parseSize(val); ++i; }
    else if (arg == "--small" && val) { small = parseSize(val); ++i; }
    else if (arg == "--runs" && val) { runs = std::max(1, std::atoi(val)); ++i; }
    else if (arg == "--dtypes" && val) {
      dtypes.clear();
      std::string list = val;
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t end = std::min(list.find(',', pos), list.size());
        auto t = parseDataType(list.substr(pos, end - pos));
        RF_ENFORCE(t && isReducible(*t), "unknown dtype in --dtypes: ", list.substr(pos, end - pos));
        dtypes.push_back(*t);
        pos = end + 1;
      }
      ++i;
    } else {
      std::fprintf(stderr, "usage: %s [--bytes 64M] [--small 256K|0] [--runs 15] [--dtypes float,half,bfloat16]\n", argv[0]);
      return 2;
    }
  }
  std::vector<CpuIsa> isas = {CpuIsa::kPortable};
  if (detectCpuIsa() != CpuIsa::kPortable) isas.push_back(CpuIsa::kAvx2);
  if (detectCpuIsa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  std::printf("# reduce_perf: best path on this CPU: %s; GB/s = (read + written bytes) / time\n",
              cpuIsaName(detectCpuIsa()));
  runSize(bytes, runs, dtypes, isas);
  if (small > 0) runSize(small, runs, dtypes, isas);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "reduce_perf: %s\n", e.what());
  return 1;
}
