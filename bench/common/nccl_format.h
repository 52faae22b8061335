// nccl-tests output, line for line: the preamble, the three-line column header, one row per
// size (out-of-place then in-place columns), and the footer. Every bench binary (ringfold's
// and the Gloo / Open MPI comparison programs) prints through these functions, so one parser
// reads them all and the numbers can be put next to NCCL's own.
//
// Numbers are fitted to their column as nccl-tests does: with two decimals while they fit,
// then one, then none, then in exponent notation.
//
// Only rank 0 prints; the functions write to `out` and never synchronize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace ringfold::bench {

// `value` printed right-aligned in exactly `width` characters when it can be.
std::string fitNumber(double value, int width);

struct RunHeader {
  std::string program;     // e.g. "all_reduce_perf"
  std::string version;     // shown as "nccl-tests version <version>"
  int versionCode = 0;     // shown as nccl-headers= and nccl-library=
  int nThreads = 1;
  int nGpus = 1;
  size_t minBytes = 0;
  size_t maxBytes = 0;
  size_t stepBytes = 0;
  size_t stepFactor = 1;   // > 1: geometric steps
  int warmupIters = 0;
  int iters = 0;
  int aggIters = 1;
  int validation = 1;
  int graph = 0;
  int unalign = 0;
  int blocking = 0;
};

// "# nccl-tests version ..." through "# Using devices".
void printPreamble(FILE* out, const RunHeader& h);
// One "#  Rank ..." line, without the newline.
std::string deviceLine(int rank, int group, int pid, const std::string& host, int device,
                       const std::string& busId, const std::string& name);
// "#" then the three column-header lines.
void printResultHeader(FILE* out, bool cpuTime);
// size, count, type, redop, root columns.
void printRowPrefix(FILE* out, size_t bytes, size_t count, const std::string& type,
                    const std::string& op, int root);
// time, algbw, busbw, #wrong; `wrong` empty prints N/A (checking off or not meaningful).
void printRowBody(FILE* out, double timeUs, double algBw, double busBw,
                  std::optional<int64_t> wrong);
void printRowEnd(FILE* out);
// "# Out of bounds values", "# Avg bus bandwidth", "# Collective test concluded".
void printFooter(FILE* out, int64_t outOfBounds, double avgBusBw, const std::string& program);

// nccl-tests' size syntax: a number with an optional K, M or G (binary) suffix, e.g. 8, 64K,
// 0.5M. Returns nullopt when `text` is not one.
std::optional<size_t> parseSize(const std::string& text);

// The byte sizes from minBytes to maxBytes: times stepFactor when it is > 1, else plus
// stepBytes. Stops when a step would not grow (e.g. from 0), so it always ends.
std::vector<size_t> sizeSeries(size_t minBytes, size_t maxBytes, size_t stepBytes,
                               size_t stepFactor);

}  // namespace ringfold::bench
