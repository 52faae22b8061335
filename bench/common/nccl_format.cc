#include "bench/common/nccl_format.h"

#include <cctype>
#include <cstdlib>

namespace ringfold::bench {

std::string fitNumber(double value, int width) {
  // Digits before the decimal point (0 for values below 1).
  int digits = 0;
  for (double bound = 1; value >= bound && digits < 40; bound *= 10) ++digits;
  char buf[64];
  if (digits < width - 2) {
    std::snprintf(buf, sizeof buf, "%*.2f", width, value);
  } else if (digits < width - 1) {
    std::snprintf(buf, sizeof buf, "%*.1f", width, value);
  } else if (digits < width + 1) {
    std::snprintf(buf, sizeof buf, "%*.0f", width, value);
  } else if (width >= 7) {
    std::snprintf(buf, sizeof buf, "%*.1e", width, value);
  } else {
    std::snprintf(buf, sizeof buf, "%*.0e", width, value);
  }
  return buf;
}

void printPreamble(FILE* out, const RunHeader& h) {
  std::fprintf(out, "# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", h.version.c_str(),
               h.versionCode, h.versionCode);
  std::fprintf(out, "# Collective test starting: %s\n", h.program.c_str());
  const bool factor = h.stepFactor > 1;
  std::fprintf(out,
               "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n",
               h.nThreads, h.nGpus, h.minBytes, h.maxBytes, factor ? h.stepFactor : h.stepBytes,
               factor ? "factor" : "bytes", h.warmupIters, h.iters, h.aggIters, h.validation,
               h.graph, h.unalign);
  if (h.blocking == 1) {
    std::fprintf(out, "# Blocking Enabled: wait for completion and barrier after each collective \n");
  } else if (h.blocking > 1) {
    std::fprintf(out, "# Blocking Enabled: wait for completion after each collective (no barrier) \n");
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "# Using devices\n");
}

std::string deviceLine(int rank, int group, int pid, const std::string& host, int device,
                       const std::string& busId, const std::string& name) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s", rank,
                group, pid, host.c_str(), device, busId.c_str(), name.c_str());
  return buf;
}

void printResultHeader(FILE* out, bool cpuTime) {
  const char* timeLabel = cpuTime ? "cputime" : "time";
  std::fprintf(out, "#\n");
  std::fprintf(out,
               "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
               "          \n",
               "", "", "", "", "");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n",
               "size", "count", "type", "redop", "root", timeLabel, "algbw", "busbw", "#wrong",
               timeLabel, "algbw", "busbw", "#wrong", "");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "", "");
}

void printRowPrefix(FILE* out, size_t bytes, size_t count, const std::string& type,
                    const std::string& op, int root) {
  char rootText[32];
  std::snprintf(rootText, sizeof rootText, "%6i", root);
  std::fprintf(out, "%12zu  %12zu  %8s  %6s  %6s", bytes, count, type.c_str(), op.c_str(),
               rootText);
}

void printRowBody(FILE* out, double timeUs, double algBw, double busBw,
                  std::optional<int64_t> wrong) {
  const std::string t = fitNumber(timeUs, 7);
  const std::string a = fitNumber(algBw, 6);
  const std::string b = fitNumber(busBw, 6);
  if (wrong) {
    std::fprintf(out, "  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(),
                 static_cast<double>(*wrong));
  } else {
    std::fprintf(out, "  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  }
}

void printRowEnd(FILE* out) { std::fprintf(out, "\n"); }

void printFooter(FILE* out, int64_t outOfBounds, double avgBusBw, const std::string& program) {
  std::fprintf(out, "# %-20s : %lld %s\n", "Out of bounds values",
               static_cast<long long>(outOfBounds), outOfBounds ? "FAILED" : "OK");
  std::fprintf(out, "# %-20s : %g %s\n", "Avg bus bandwidth", avgBusBw, "");
  std::fprintf(out, "#\n");
  std::fprintf(out, "# Collective test concluded: %s\n", program.c_str());
  std::fprintf(out, "#\n");
  std::fprintf(out, "\n");
  std::fflush(out);
}

std::optional<size_t> parseSize(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin || number < 0) return std::nullopt;
  while (*end == ' ') ++end;
  double unit = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case '\0': break;
    case 'K': unit = 1024.0; break;
    case 'M': unit = 1024.0 * 1024; break;
    case 'G': unit = 1024.0 * 1024 * 1024; break;
    default: return std::nullopt;
  }
  return static_cast<size_t>(number * unit);
}

std::vector<size_t> sizeSeries(size_t minBytes, size_t maxBytes, size_t stepBytes,
                               size_t stepFactor) {
  std::vector<size_t> sizes;
  for (size_t size = minBytes; size <= maxBytes;) {
    sizes.push_back(size);
    const size_t next = stepFactor > 1 ? size * stepFactor : size + stepBytes;
    if (next <= size) break;
    size = next;
  }
  return sizes;
}

}  // namespace ringfold::bench
