// rf_sim: predicts ringfold's allreduce times on a job of any shape by running its real schedules
// against modelled links (bench/sim/simulator.h, docs/simulator.md), and prints them in
// nccl-tests' columns (out of place only; #wrong is N/A: no data moves), one table per
// algorithm, then which algorithm is fastest at each size.
//
//   rf_sim --ranks 512 --per-host 8 --algo ring,tree,hierarchical,hierarchical:cross=tree
//          -b 4 -e 1G -f 4 [--model FILE] [--alpha-remote 5e-6 --beta-remote 8e-11 ...]
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "bench/common/nccl_format.h"
#include "bench/sim/simulator.h"
#include "common/dtype.h"
#include "common/error.h"

namespace ringfold::sim {
namespace {

struct Algo {
  std::string label;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  AllreduceAlgorithm cross = AllreduceAlgorithm::kRing;
};

AllreduceAlgorithm flatAlgorithm(const std::string& name, const std::string& spec) {
  if (name == "ring") return AllreduceAlgorithm::kRing;
  if (name == "tree") return AllreduceAlgorithm::kTree;
  if (name == "direct") return AllreduceAlgorithm::kDirect;
  RF_THROW(InvalidArgument, "--algo: '", spec, "': ", name, " is not ring, tree or direct");
}

std::vector<Algo> parseAlgos(const std::string& list) {
  std::vector<Algo> algos;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string spec = list.substr(start, comma - start);
    start = comma + 1;
    if (spec.empty()) continue;
    Algo a;
    if (spec.rfind("hierarchical", 0) == 0) {
      a.algorithm = AllreduceAlgorithm::kHierarchical;
      const std::string rest = spec.substr(12);
      if (!rest.empty()) {
        if (rest.rfind(":cross=", 0) != 0) RF_THROW(InvalidArgument, "--algo: '", spec, "': expected hierarchical:cross=ALGO");
        a.cross = flatAlgorithm(rest.substr(7), spec);
      }
      a.label = std::string("hierarchical:cross=") + algorithmName(a.cross);
    } else {
      a.algorithm = flatAlgorithm(spec, spec);
      a.label = spec;
    }
    algos.push_back(a);
  }
  if (algos.empty()) RF_THROW(InvalidArgument, "--algo names no algorithm");
  return algos;
}

size_t sizeFlag(const cxxopts::ParseResult& r, const std::string& name) {
  const std::string text = r[name].as<std::string>();
  const auto v = bench::parseSize(text);
  if (!v) RF_THROW(InvalidArgument, "--", name, ": '", text, "' is not a size (e.g. 8, 64K, 1M, 1G)");
  return *v;
}

// The out-of-place half of nccl-tests' column header.
void printHeader(FILE* out) {
  std::fprintf(out, "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place\n", "", "", "", "", "");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
}

std::string humanBytes(size_t b) {
  char buf[32];
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) {
    std::snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
  } else if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", b);
  }
  return buf;
}

int run(int argc, char** argv) {
  cxxopts::Options options("rf_sim", "Predicted allreduce times: ringfold's schedules run against modelled links");
  options.add_options()
      ("ranks", "Ranks in the job (2 to 4096 and more)", cxxopts::value<int>()->default_value("8"))
      ("per-host", "Ranks per host (consecutive ranks share a host)", cxxopts::value<int>()->default_value("1"))
      ("algo", "Comma-separated: ring, tree, direct, hierarchical[:cross=ring|tree|direct]",
       cxxopts::value<std::string>()->default_value("ring,tree"))
      ("b,minbytes", "Smallest size", cxxopts::value<std::string>()->default_value("4"))
      ("e,maxbytes", "Largest size", cxxopts::value<std::string>()->default_value("64M"))
      ("f,stepfactor", "Size factor (> 1: geometric)", cxxopts::value<size_t>()->default_value("2"))
      ("i,stepbytes", "Size step when the factor is 1", cxxopts::value<std::string>()->default_value("1M"))
      ("d,datatype", "Element type (sets the element size)", cxxopts::value<std::string>()->default_value("float"))
      ("segment-bytes", "Ring, reduce-scatter and allgather segment", cxxopts::value<std::string>()->default_value("512K"))
      ("tree-segment-bytes", "Tree segment", cxxopts::value<std::string>()->default_value("512K"))
      ("ring-chunk-bytes", "Ring round chunk (0: one round)", cxxopts::value<std::string>()->default_value("256K"))
      ("model", "Model file (key = value lines; see docs/simulator.md)", cxxopts::value<std::string>())
      ("overhead", "o: CPU seconds per message at each end", cxxopts::value<std::string>())
      ("gamma", "CPU seconds per byte per reduce pass", cxxopts::value<std::string>())
      ("copy", "CPU seconds per byte of an unexpected message", cxxopts::value<std::string>())
      ("alpha-local", "Same-host latency (s)", cxxopts::value<std::string>())
      ("beta-local", "Same-host seconds per byte", cxxopts::value<std::string>())
      ("alpha-remote", "Cross-host latency (s)", cxxopts::value<std::string>())
      ("beta-remote", "NIC seconds per byte (8e-11: 100 Gb/s)", cxxopts::value<std::string>())
      ("cpus", "CPUs the whole job shares (0: one per rank; the emulated cluster: this machine's)",
       cxxopts::value<std::string>())
      ("max-messages", "Skip a run that would simulate more messages", cxxopts::value<double>()->default_value("1e8"))
      ("stats", "After each row, a comment with the simulation's messages, events and wall time")
      ("h,help", "Print this help");
  const cxxopts::ParseResult r = options.parse(argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  JobShape job{r["ranks"].as<int>(), r["per-host"].as<int>()};
  if (job.ranks < 2) RF_THROW(InvalidArgument, "--ranks must be at least 2, not ", job.ranks);
  if (job.perHost < 1) RF_THROW(InvalidArgument, "--per-host must be at least 1, not ", job.perHost);
  LinkModel model;
  if (r.count("model")) model.load(r["model"].as<std::string>());
  for (const char* const* k = linkModelKeys(); *k != nullptr; ++k) {
    std::string flag = std::string(*k) == "o" ? "overhead" : *k;
    for (char& c : flag) c = c == '_' ? '-' : c;
    if (r.count(flag)) model.set(*k, r[flag].as<std::string>(), "--" + flag);
  }
  const auto dtype = parseDataType(r["datatype"].as<std::string>());
  if (!dtype || !isReducible(*dtype)) RF_THROW(InvalidArgument, "--datatype: not a reducible type");
  const std::vector<Algo> algos = parseAlgos(r["algo"].as<std::string>());
  AllreduceCase base;
  base.elemSize = dataTypeSize(*dtype);
  base.segmentBytes = sizeFlag(r, "segment-bytes");
  base.treeSegmentBytes = sizeFlag(r, "tree-segment-bytes");
  base.ringChunkBytes = sizeFlag(r, "ring-chunk-bytes");
  const size_t minBytes = sizeFlag(r, "minbytes"), maxBytes = sizeFlag(r, "maxbytes");
  const size_t factor = r["stepfactor"].as<size_t>();
  const std::vector<size_t> sizes = bench::sizeSeries(minBytes, maxBytes, sizeFlag(r, "stepbytes"), factor);
  const double maxMessages = r["max-messages"].as<double>();
  const bool stats = r.count("stats") > 0;
  const char* type = dataTypeName(*dtype);

  std::printf("# rf_sim: ringfold's allreduce schedules (allreduce_plan.h) run by a model of the executor over modelled links\n");
  std::printf("# job: %d ranks, %d per host, %d hosts%s\n", job.ranks, job.perHost, job.hosts(),
              job.ranks % job.perHost != 0 ? " (the last one holds fewer)" : "");
  std::printf("# model: %s (seconds, seconds per byte)\n", model.text().c_str());
  std::printf("# plan: out of place, %s (%zu B), segment %zu B, tree segment %zu B, ring chunk %zu B\n", type,
              base.elemSize, base.segmentBytes, base.treeSegmentBytes, base.ringChunkBytes);
  std::printf("# sizes: %s to %s\n", humanBytes(minBytes).c_str(), humanBytes(maxBytes).c_str());

  const double busFactor = 2.0 * (job.ranks - 1) / job.ranks;
  std::map<size_t, std::vector<std::optional<double>>> times;  // bytes -> per algorithm
  for (size_t a = 0; a < algos.size(); ++a) {
    std::printf("#\n# algorithm: %s\n", algos[a].label.c_str());
    printHeader(stdout);
    double busSum = 0;
    int rows = 0;
    for (const size_t size : sizes) {
      AllreduceCase c = base;
      c.algorithm = algos[a].algorithm;
      c.cross = algos[a].cross;
      const size_t count = size / c.elemSize;
      c.bytes = count * c.elemSize;
      auto& slot = times[c.bytes];
      slot.resize(algos.size());
      bench::printRowPrefix(stdout, c.bytes, count, type, "sum", -1);
      try {
        const double estimate = static_cast<double>(estimateMessages(job, c));
        if (estimate > maxMessages) {
          std::printf("  skipped: about %.3g messages to simulate, more than --max-messages %.3g\n", estimate, maxMessages);
          continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const SimResult res = simulateAllreduce(job, model, c);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (res.deadlock) {
          std::printf("  deadlock\n# %s\n", res.report.c_str());
          continue;
        }
        const double us = res.seconds * 1e6;
        const double algBw = res.seconds > 0 ? static_cast<double>(c.bytes) / res.seconds / 1e9 : 0.0;
        bench::printRowBody(stdout, us, algBw, algBw * busFactor, std::nullopt);
        bench::printRowEnd(stdout);
        if (stats) {
          std::printf("#   simulated %llu messages (%llu unexpected), %llu events in %.2f s\n",
                      static_cast<unsigned long long>(res.messages), static_cast<unsigned long long>(res.unexpected),
                      static_cast<unsigned long long>(res.events), wall);
        }
        slot[a] = us;
        busSum += algBw * busFactor;
        ++rows;
      } catch (const Error& e) {  // a plan that does not fit the job, or a schedule the executor would reject
        std::printf("  error: %s\n", e.what());
      }
      std::fflush(stdout);
    }
    std::printf("# %-20s : %g\n", "Avg bus bandwidth", rows > 0 ? busSum / rows : 0.0);
  }

  std::printf("#\n# fastest algorithm per size (time in us)\n# %10s  %-24s", "size", "fastest");
  for (const Algo& a : algos) std::printf("  %24s", a.label.c_str());
  std::printf("\n");
  for (const auto& [bytes, row] : times) {
    int best = -1;
    for (size_t a = 0; a < row.size(); ++a) {
      if (row[a] && (best < 0 || *row[a] < *row[best])) best = static_cast<int>(a);
    }
    std::printf("  %10zu  %-24s", bytes, best >= 0 ? algos[best].label.c_str() : "-");
    for (const auto& t : row) {
      if (t) {
        std::printf("  %24s", bench::fitNumber(*t, 12).c_str());
      } else {
        std::printf("  %24s", "-");
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace ringfold::sim

int main(int argc, char** argv) {
  try {
    return ringfold::sim::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rf_sim: %s\n", e.what());
    return 1;
  }
}
