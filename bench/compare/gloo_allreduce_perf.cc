// gloo_allreduce_perf: Gloo's float32 sum allreduce over its TCP transport, timed, checked and
// printed exactly like ringfold's all_reduce_perf (compare_driver.h), for same-run comparisons.
//
//   ringfoldrun -np 4 build/bench/gloo_allreduce_perf --store-dir /tmp/x -b 4K -e 64M -f 4
//
// Ranks: --rank/--size, else RINGFOLD_RANK/RINGFOLD_SIZE (set by ringfoldrun), else
// RANK/WORLD_SIZE, else a single rank. Rendezvous: a gloo FileStore in --store-dir (a fresh,
// empty directory shared by the ranks). Every rank listens on --hostname (127.0.0.1).
//
// --algorithm picks what is measured:
//   ring             gloo::allreduce(), the current API with its ring (what PyTorch's gloo
//                    backend calls for CPU tensors)
//   bcube            gloo::allreduce() with the BCUBE algorithm
//   ring_chunked     gloo::AllreduceRingChunked (reduce-scatter + allgather ring)
//   halving_doubling gloo::AllreduceHalvingDoubling (Rabenseifner)
//   legacy_ring      gloo::AllreduceRing (naive ring: P-1 full-size steps)
// The older algorithms work in place on buffers bound at construction: they are constructed
// before timing, and out of place is a copy into the output followed by the in-place run.
#include <stdlib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench/compare/compare_driver.h"

namespace ringfold::bench {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

int envInt(const char* a, const char* b, int fallback) {
  for (const char* name : {a, b}) {
    const char* v = std::getenv(name);
    if (v && *v) return std::atoi(v);
  }
  return fallback;
}

class GlooBackend final : public CompareBackend {
 public:
  GlooBackend(int rank, int size, const std::string& storeDir, const std::string& host,
              std::string algorithm, std::chrono::milliseconds timeout)
      : algorithm_(std::move(algorithm)) {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    attr.ai_family = AF_INET;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(storeDir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout);
    ctx->connectFullMesh(store, device_);
    ctx_ = ctx;
  }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string deviceName() const override { return "gloo-tcp-" + algorithm_; }

  void barrier() override {
    gloo::BarrierOptions o(ctx_);
    o.setTag(nextTag());
    gloo::barrier(o);
  }

  double combine(double value, Combine how) override {
    double v = value;
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(&v, 1);
    o.setTag(nextTag());
    ReduceFn fn = static_cast<ReduceFn>(&gloo::sum<double>);
    if (how == Combine::kMin) fn = static_cast<ReduceFn>(&gloo::min<double>);
    if (how == Combine::kMax) fn = static_cast<ReduceFn>(&gloo::max<double>);
    o.setReduceFunction(fn);
    gloo::allreduce(o);
    return v;
  }

  void prepare(const float*, float* recv, size_t count, bool) override {
    if (count == 0 || isCurrentApi()) return;
    auto key = std::make_pair(recv, count);
    if (legacy_.count(key)) return;
    const std::vector<float*> ptrs{recv};
    const int n = static_cast<int>(count);
    std::unique_ptr<gloo::Algorithm> algo;
    if (algorithm_ == "ring_chunked") {
      algo = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx_, ptrs, n);
    } else if (algorithm_ == "halving_doubling") {
      algo = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx_, ptrs, n);
    } else {
      algo = std::make_unique<gloo::AllreduceRing<float>>(ctx_, ptrs, n);
    }
    legacy_.emplace(key, std::move(algo));
  }

  void release() override { legacy_.clear(); }

  void allreduce(const float* send, float* recv, size_t count, bool inPlace) override {
    if (count == 0) return;
    if (isCurrentApi()) {
      gloo::AllreduceOptions o(ctx_);
      if (!inPlace) o.setInput(const_cast<float*>(send), count);
      o.setOutput(recv, count);
      o.setAlgorithm(algorithm_ == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                           : gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      o.setTag(nextTag());
      gloo::allreduce(o);
      return;
    }
    auto it = legacy_.find(std::make_pair(recv, count));
    if (it == legacy_.end()) {
      prepare(send, recv, count, inPlace);
      it = legacy_.find(std::make_pair(recv, count));
    }
    if (!inPlace) std::memcpy(recv, send, count * sizeof(float));
    it->second->run();
  }

 private:
  bool isCurrentApi() const { return algorithm_ == "ring" || algorithm_ == "bcube"; }
  uint32_t nextTag() { return tag_++ & 0x7fffffff; }

  std::string algorithm_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> ctx_;
  std::map<std::pair<float*, size_t>, std::unique_ptr<gloo::Algorithm>> legacy_;
  uint32_t tag_ = 1;
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  using namespace ringfold::bench;
  setlinebuf(stdout);
  const std::string program = "gloo_allreduce_perf";
  FlagParser parser(program, "Gloo allreduce (TCP, float sum) in nccl-tests format");
  parser.options().add_options()
      ("store-dir", "Empty directory for Gloo's FileStore rendezvous", cxxopts::value<std::string>()->default_value(""))
      ("hostname", "Address this rank listens on", cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("rank", "This rank (default: RINGFOLD_RANK, RANK)", cxxopts::value<int>()->default_value("-1"))
      ("size", "Number of ranks (default: RINGFOLD_SIZE, WORLD_SIZE)", cxxopts::value<int>()->default_value("-1"))
      ("A,algorithm", "ring | bcube | ring_chunked | halving_doubling | legacy_ring",
       cxxopts::value<std::string>()->default_value("ring"));
  std::string algorithm;
  int rank = -1, size = -1;
  std::string storeDir;
  try {
    if (!parser.parse(argc, argv)) return 0;
    requireFloatSum(parser.flags());
    algorithm = parser.result()["algorithm"].as<std::string>();
    if (algorithm != "ring" && algorithm != "bcube" && algorithm != "ring_chunked" &&
        algorithm != "halving_doubling" && algorithm != "legacy_ring") {
      throw FlagError("unknown --algorithm '" + algorithm + "'");
    }
    rank = parser.result()["rank"].as<int>();
    size = parser.result()["size"].as<int>();
    if (rank < 0) rank = envInt("RINGFOLD_RANK", "RANK", 0);
    if (size < 0) size = envInt("RINGFOLD_SIZE", "WORLD_SIZE", 1);
    if (rank >= size) throw FlagError("rank " + std::to_string(rank) + " is not below size " + std::to_string(size));
    storeDir = parser.result()["store-dir"].as<std::string>();
    if (storeDir.empty()) {
      if (size > 1) throw FlagError("--store-dir is required with more than one rank");
      char tmpl[] = "/tmp/gloo_allreduce_perf.XXXXXX";
      if (!mkdtemp(tmpl)) throw FlagError("cannot create a temporary store directory");
      storeDir = tmpl;
    }
  } catch (const FlagError& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
    return 2;
  }
  try {
    const int timeoutSec = parser.flags().timeoutSec > 0 ? parser.flags().timeoutSec : 120;
    GlooBackend backend(rank, size, storeDir, parser.result()["hostname"].as<std::string>(),
                        algorithm, std::chrono::seconds(timeoutSec));
    return runCompare(program, parser.flags(), backend);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    return 2;
  }
}
