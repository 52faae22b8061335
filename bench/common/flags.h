// The nccl-tests command line, parsed with cxxopts, shared by every bench program.
//
//   -b/--minbytes 32M  -e/--maxbytes 32M  -i/--stepbytes 1M  -f/--stepfactor 1
//   -n/--iters 20  -w/--warmup_iters 1  -m/--agg_iters 1  -c/--check 1
//   -d/--datatype float|all  -o/--op sum|all  -r/--root 0 (-1: every root)
//   -a/--average 1 (0 rank 0, 1 mean, 2 min, 3 max)  -z/--blocking 0  -T/--timeout 0 (seconds)
//   -C/--report_cputime 0  -t/--nthreads 1  -g/--ngpus 1  -G/--cudagraph 0
//
// ringfold runs one rank per process, so -t and -g must stay 1 (start more processes with
// ringfoldrun -np N instead) and -G must stay 0; anything else is an error that says so.
// A program adds its own flags through options() before parse().
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace ringfold::bench {

struct BenchFlags {
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  size_t stepFactor = 1;
  int iters = 20;
  int warmupIters = 1;
  int aggIters = 1;
  int check = 1;
  std::string datatype = "float";
  std::string op = "sum";
  int root = 0;
  int average = 1;
  int blocking = 0;
  int timeoutSec = 0;
  int reportCpuTime = 0;
  int nThreads = 1;
  int nGpus = 1;
  int graph = 0;

  std::vector<size_t> sizes() const;
};

// Thrown for a bad command line; the message says what is wrong and how to fix it.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FlagParser {
 public:
  FlagParser(const std::string& program, const std::string& description);
  // Add program-specific flags here before parse().
  cxxopts::Options& options() { return options_; }
  // Parses argv. Returns false after printing --help (the caller exits 0). Throws FlagError.
  bool parse(int argc, char** argv);
  const BenchFlags& flags() const { return flags_; }
  const cxxopts::ParseResult& result() const { return result_; }

 private:
  cxxopts::Options options_;
  cxxopts::ParseResult result_;
  BenchFlags flags_;
};

}  // namespace ringfold::bench
