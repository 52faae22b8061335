#include "bench/common/flags.h"

#include <iostream>

#include "bench/common/nccl_format.h"

namespace ringfold::bench {

std::vector<size_t> BenchFlags::sizes() const {
  return sizeSeries(minBytes, maxBytes, stepBytes, stepFactor);
}

FlagParser::FlagParser(const std::string& program, const std::string& description)
    : options_(program, description) {
  using cxxopts::value;
  options_.add_options()
      ("b,minbytes", "Smallest size in bytes (K/M/G suffixes)", value<std::string>()->default_value("32M"))
      ("e,maxbytes", "Largest size in bytes (K/M/G suffixes)", value<std::string>()->default_value("32M"))
      ("i,stepbytes", "Size increment when -f is 1", value<std::string>()->default_value("1M"))
      ("f,stepfactor", "Size multiplier between rows (> 1 to use it)", value<size_t>()->default_value("1"))
      ("n,iters", "Timed iterations per size", value<int>()->default_value("20"))
      ("w,warmup_iters", "Warm-up iterations", value<int>()->default_value("1"))
      ("m,agg_iters", "Collectives per timed iteration", value<int>()->default_value("1"))
      ("c,check", "Checked iterations per size (0: no check, #wrong shows N/A)", value<int>()->default_value("1"))
      ("d,datatype", "Element type or 'all'", value<std::string>()->default_value("float"))
      ("o,op", "Reduction or 'all' (sum prod max min avg)", value<std::string>()->default_value("sum"))
      ("r,root", "Root rank; -1 runs every root", value<int>()->default_value("0"))
      ("a,average", "Time over ranks: 0 rank 0, 1 mean, 2 min, 3 max", value<int>()->default_value("1"))
      ("z,blocking", "1: barrier after each collective", value<int>()->default_value("0"))
      ("T,timeout", "Seconds a collective may wait for a peer (0: library default)", value<int>()->default_value("0"))
      ("C,report_cputime", "Label the time column cputime (same clock here)", value<int>()->default_value("0"))
      ("t,nthreads", "Threads per process; must be 1 (ranks are processes)", value<int>()->default_value("1"))
      ("g,ngpus", "Devices per thread; must be 1 (ranks are processes)", value<int>()->default_value("1"))
      ("G,cudagraph", "CUDA graph launches; must be 0", value<int>()->default_value("0"))
      ("h,help", "Print this help");
}

bool FlagParser::parse(int argc, char** argv) {
  try {
    result_ = options_.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw FlagError(std::string(e.what()) + " (see --help)");
  }
  if (result_.count("help")) {
    std::cout << options_.help() << std::endl;
    return false;
  }
  if (!result_.unmatched().empty()) {
    throw FlagError("unexpected argument '" + result_.unmatched().front() + "' (see --help)");
  }
  BenchFlags f;
  auto size = [&](const char* name) {
    const std::string text = result_[name].as<std::string>();
    const auto v = parseSize(text);
    if (!v) throw FlagError(std::string("invalid size '") + text + "' for --" + name);
    return *v;
  };
  try {
    f.minBytes = size("minbytes");
    f.maxBytes = size("maxbytes");
    f.stepBytes = size("stepbytes");
    f.stepFactor = result_["stepfactor"].as<size_t>();
    f.iters = result_["iters"].as<int>();
    f.warmupIters = result_["warmup_iters"].as<int>();
    f.aggIters = result_["agg_iters"].as<int>();
    f.check = result_["check"].as<int>();
    f.datatype = result_["datatype"].as<std::string>();
    f.op = result_["op"].as<std::string>();
    f.root = result_["root"].as<int>();
    f.average = result_["average"].as<int>();
    f.blocking = result_["blocking"].as<int>();
    f.timeoutSec = result_["timeout"].as<int>();
    f.reportCpuTime = result_["report_cputime"].as<int>();
    f.nThreads = result_["nthreads"].as<int>();
    f.nGpus = result_["ngpus"].as<int>();
    f.graph = result_["cudagraph"].as<int>();
  } catch (const cxxopts::exceptions::exception& e) {
    throw FlagError(std::string(e.what()) + " (see --help)");
  }
  if (f.nThreads != 1 || f.nGpus != 1) {
    throw FlagError(
        "-t/--nthreads and -g/--ngpus must be 1: every ringfold rank is its own process. Start N "
        "ranks with `ringfoldrun -np N " + options_.program() + " ...` instead");
  }
  if (f.graph != 0) throw FlagError("-G/--cudagraph is not supported: there are no CUDA graphs here");
  if (f.minBytes > f.maxBytes) throw FlagError("-b/--minbytes is larger than -e/--maxbytes");
  if (f.stepFactor <= 1 && f.stepBytes == 0 && f.minBytes != f.maxBytes) {
    throw FlagError("-i/--stepbytes 0 with -f 1 would never reach -e/--maxbytes");
  }
  if (f.iters < 1) throw FlagError("-n/--iters must be at least 1");
  if (f.warmupIters < 0) throw FlagError("-w/--warmup_iters must not be negative");
  if (f.aggIters < 1) throw FlagError("-m/--agg_iters must be at least 1");
  if (f.check < 0) throw FlagError("-c/--check must not be negative");
  if (f.average < 0 || f.average > 3) throw FlagError("-a/--average must be 0, 1, 2 or 3");
  if (f.timeoutSec < 0) throw FlagError("-T/--timeout must not be negative");
  flags_ = f;
  return true;
}

}  // namespace ringfold::bench
