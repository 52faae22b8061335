// reduce_perf: bandwidth of the CPU reducer on each ISA path, next to memcpy of the same size
// measured in the same run. The machine is shared and noisy, so every row interleaves its runs
// with memcpy runs (copy, reduce, copy, reduce, ...) and reports both medians and their ratio.
//
//   reduce_perf [--bytes 64M] [--small 256K|0] [--runs 15] [--dtypes float,half,bfloat16]
//
// Sizes are bytes per operand. GB/s counts bytes read + written: memcpy moves 2x the buffer, a
// reduce 3x (reads a and b, writes dst). "ratio" = reduce GB/s / memcpy GB/s. "sum" writes a
// third buffer (out of place; large ones use non-temporal stores), "sum-inplace" writes over a
// (dst == a), as the ring allreduce does. "copy-nt" is a streaming-store copy, for reference:
// glibc's memcpy does not stream at these sizes when the last-level cache is large.
// The small size (in cache) shows the per-element cost without the memory bottleneck.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/params.h"
#include "reduce/cpu_reducer.h"

using namespace ringfold;

namespace {

struct Buffer {
  explicit Buffer(size_t bytes) {
    void* p = nullptr;
    RF_ENFORCE(posix_memalign(&p, 4096, bytes) == 0, "out of memory for ", bytes, " bytes");
    data = static_cast<uint8_t*>(p);
  }
  ~Buffer() { free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data;
};

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds per call of body and of copy, their runs interleaved.
template <class F, class G>
std::pair<double, double> timePaired(int runs, int reps, F&& body, G&& copy) {
  body();  // warm up: page faults, caches, frequency
  copy();
  std::vector<double> tb, tc;
  for (int r = 0; r < runs; ++r) {
    double t0 = seconds();
    for (int i = 0; i < reps; ++i) copy();
    tc.push_back((seconds() - t0) / reps);
    t0 = seconds();
    for (int i = 0; i < reps; ++i) body();
    tb.push_back((seconds() - t0) / reps);
  }
  return {median(tb), median(tc)};
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void copyStreamAvx2(uint8_t* dst, const uint8_t* src, size_t bytes) {
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
  _mm_sfence();
  std::memcpy(dst + i, src + i, bytes - i);
}
#endif

// Values that stay finite and normal under repeated in-place sums.
void fill(uint8_t* p, size_t bytes, DataType t, unsigned seed) {
  const size_t n = bytes / dataTypeSize(t);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float v = float(int32_t(x >> 9) % 2001 - 1000) * 1e-6f;
    switch (t) {
      case DataType::kFloat32: std::memcpy(p + 4 * i, &v, 4); break;
      case DataType::kFloat64: { const double d = v; std::memcpy(p + 8 * i, &d, 8); break; }
      case DataType::kFloat16: { const uint16_t h = uint16_t(0x1000 | (x & 0x83FF)); std::memcpy(p + 2 * i, &h, 2); break; }
      case DataType::kBfloat16: { uint32_t u; std::memcpy(&u, &v, 4); const uint16_t b = uint16_t(u >> 16); std::memcpy(p + 2 * i, &b, 2); break; }
      default: std::memset(p + i * dataTypeSize(t), int(x & 0x7F), dataTypeSize(t));
    }
  }
}

void printRow(const char* op, const char* dtype, const char* path, size_t bytes, double factor,
              std::pair<double, double> t) {
  const double gbs = factor * double(bytes) / t.first / 1e9;
  const double copy = 2.0 * double(bytes) / t.second / 1e9;
  std::printf("%-12s %-9s %-9s %10.1f %8.2f %11.2f %7.2f\n", op, dtype, path, t.first * 1e6, gbs,
              copy, gbs / copy);
}

void runSize(size_t bytes, int runs, const std::vector<DataType>& dtypes, const std::vector<CpuIsa>& isas) {
  Buffer a(bytes), b(bytes), c(bytes), d(bytes);
  // Touch every page first: an untouched buffer reads as the shared zero page, far too fast.
  fill(a.data, bytes, DataType::kFloat32, 1);
  fill(b.data, bytes, DataType::kFloat32, 2);
  std::memset(c.data, 0, bytes);
  std::memset(d.data, 0, bytes);
  // Small buffers repeat inside one timed run so that each run lasts long enough to time.
  const int reps = std::max<int>(1, int((8u << 20) / bytes));
  auto copy = [&] { std::memcpy(d.data, c.data, bytes); };
  std::printf("\n# %zu bytes per operand, median of %d interleaved runs%s\n", bytes, runs,
              reps > 1 ? (" of " + std::to_string(reps) + " calls").c_str() : "");
  std::printf("%-12s %-9s %-9s %10s %8s %11s %7s\n", "op", "dtype", "path", "time(us)", "GB/s",
              "memcpyGB/s", "ratio");
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    printRow("copy-nt", "-", "avx2", bytes, 2.0,
             timePaired(runs, reps, [&] { copyStreamAvx2(a.data, b.data, bytes); }, copy));
  }
#endif
  for (DataType t : dtypes) {
    fill(a.data, bytes, t, 1);
    fill(b.data, bytes, t, 2);
    const size_t count = bytes / dataTypeSize(t);
    for (CpuIsa isa : isas) {
      auto red = makeCpuReducer(isa);
      for (bool inPlace : {false, true}) {
        // In place, a accumulates b run after run; the small inputs stay finite and normal.
        uint8_t* dst = inPlace ? a.data : c.data;
        auto t2 = timePaired(runs, reps, [&] { red->reduce(dst, a.data, b.data, count, t, ReduceOp::kSum); }, copy);
        printRow(inPlace ? "sum-inplace" : "sum", dataTypeName(t), cpuIsaName(isa), bytes, 3.0, t2);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  size_t bytes = 64u << 20, small = 256u << 10;
  int runs = 15;
  std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--bytes" && val) {
      bytes = params::parseBytes(val, "--bytes");
    } else if (arg == "--small" && val) {
      small = params::parseBytes(val, "--small");
    } else if (arg == "--runs" && val) {
      runs = std::max(1, std::atoi(val));
    } else if (arg == "--dtypes" && val) {
      dtypes.clear();
      const std::string list = val;
      for (size_t pos = 0; pos <= list.size();) {
        const size_t end = std::min(list.find(',', pos), list.size());
        const std::string name = list.substr(pos, end - pos);
        auto t = parseDataType(name);
        RF_ENFORCE(t && isReducible(*t), "unknown dtype in --dtypes: ", name);
        dtypes.push_back(*t);
        pos = end + 1;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--bytes 64M] [--small 256K|0] [--runs 15] [--dtypes float,half,bfloat16]\n",
                   argv[0]);
      return 2;
    }
    ++i;
  }
  RF_ENFORCE(bytes >= 64 && (small == 0 || small >= 64), "sizes must be at least 64 bytes");
  std::vector<CpuIsa> isas = {CpuIsa::kPortable};
  if (detectCpuIsa() != CpuIsa::kPortable) isas.push_back(CpuIsa::kAvx2);
  if (detectCpuIsa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  std::printf("# reduce_perf: best path on this CPU: %s; GB/s = (bytes read + written) / time\n",
              cpuIsaName(detectCpuIsa()));
  runSize(bytes, runs, dtypes, isas);
  if (small > 0) runSize(small, runs, dtypes, isas);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "reduce_perf: %s\n", e.what());
  return 1;
}
