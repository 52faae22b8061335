// engine_perf: a training step's gradient allreduce through the engine, the way a framework
// plugin drives it: every step enqueues one tensor per layer (in backward order, as hooks fire)
// and waits for all of them. Sizes follow a convolutional network's profile: many small tensors
// (biases, norms) and a few large ones, `--tensors` of them adding up to about `--total`.
//
//   ringfoldrun -np 2 build/bench/engine_perf --tensors 160 --total 16M --steps 30
//
// Prints one line per configuration with the median step time, the effective allreduce
// bandwidth (tensor bytes per step / step time) and the engine's counters (batches per step,
// share of tensors agreed through the response cache). The engine's settings come from the
// environment (RINGFOLD_FUSION_THRESHOLD, RINGFOLD_CYCLE_TIME, RINGFOLD_TIMELINE, ...), so
// bench/engine/engine_compare.py can run configurations side by side. Results are checked
// (every element must equal the sum over ranks) unless --check 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <thread>

#include <cxxopts.hpp>

#include "common/params.h"
#include "engine/engine.h"

using namespace ringfold;
using namespace ringfold::engine;

namespace {

// ResNet-50's 161 gradient tensors (torchvision order): 53 convolutions, 53 batch norms (weight
// and bias each) and the classifier (weight and bias), 25,557,032 parameters.
std::vector<size_t> resnet50() {
  std::vector<size_t> out;
  auto conv = [&](size_t in, size_t outC, size_t k) { out.push_back(in * outC * k * k); };
  auto bn = [&](size_t c) {
    out.push_back(c);
    out.push_back(c);
  };
  conv(3, 64, 7);
  bn(64);
  size_t in = 64;
  const size_t widths[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const size_t w = widths[stage];
    for (size_t b = 0; b < blocks[stage]; ++b) {
      conv(in, w, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(w, 4 * w, 1);
      bn(4 * w);
      if (b == 0) {  // downsample
        conv(in, 4 * w, 1);
        bn(4 * w);
      }
      in = 4 * w;
    }
  }
  out.push_back(2048 * 1000);
  out.push_back(1000);
  return out;
}

// BERT-base (uncased, with pooler): 199 tensors, 109,482,240 parameters.
std::vector<size_t> bertBase() {
  const size_t h = 768, ff = 3072;
  std::vector<size_t> out = {30522 * h, 512 * h, 2 * h, h, h};  // embeddings + LayerNorm
  for (int layer = 0; layer < 12; ++layer) {
    for (int i = 0; i < 4; ++i) {  // query, key, value, attention output
      out.push_back(h * h);
      out.push_back(h);
    }
    out.insert(out.end(), {h, h, h * ff, ff, ff * h, h, h, h});  // LayerNorm, FFN, LayerNorm
  }
  out.push_back(h * h);  // pooler
  out.push_back(h);
  return out;
}

// Tensor sizes (floats): a geometric spread from 64 elements up, every fourth tensor large,
// scaled to add up to `totalBytes`.
std::vector<size_t> modelSizes(int tensors, uint64_t totalBytes) {
  std::vector<double> weights;
  for (int i = 0; i < tensors; ++i) weights.push_back(i % 4 == 3 ? 64.0 * (1 + i % 16) : 1.0 + (i % 3));
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<size_t> sizes;
  for (double w : weights) {
    sizes.push_back(std::max<size_t>(16, static_cast<size_t>(w / sum * static_cast<double>(totalBytes) / 4)));
  }
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("engine_perf", "gradient allreduce through the ringfold engine");
  options.add_options()("tensors", "tensors per step", cxxopts::value<int>()->default_value("160"))(
      "total", "bytes per step", cxxopts::value<std::string>()->default_value("16M"))(
      "steps", "timed steps", cxxopts::value<int>()->default_value("30"))(
      "warmup", "untimed steps", cxxopts::value<int>()->default_value("5"))(
      "check", "verify results", cxxopts::value<int>()->default_value("1"))(
      "model", "resnet50 or bert-base: replay that network's gradient sizes (overrides --tensors/--total)",
      cxxopts::value<std::string>()->default_value(""))(
      "single", "one tensor of the same total size instead (the baseline fusion is measured against)",
      cxxopts::value<int>()->default_value("0"))(
      "latency", "also report enqueue-to-completion of a 4-byte allreduce (median of this many)",
      cxxopts::value<int>()->default_value("0"))(
      "idle", "then stay idle this many seconds and report the engine's CPU use",
      cxxopts::value<double>()->default_value("0"))(
      "label", "configuration label for the output line", cxxopts::value<std::string>()->default_value(""))(
      "h,help", "help");
  try {
    auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", options.help().c_str());
      return 0;
    }
    const int tensors = args["tensors"].as<int>();
    const uint64_t total = params::parseBytes(args["total"].as<std::string>(), "--total");
    const int steps = args["steps"].as<int>(), warmup = args["warmup"].as<int>();
    const bool check = args["check"].as<int>() != 0;
    if (tensors < 1 || steps < 1 || warmup < 0) throw std::invalid_argument("--tensors and --steps must be positive");

    auto engine = Engine::fromEnvironment();
    const int rank = engine->rank(), size = engine->size();
    const std::string model = args["model"].as<std::string>();
    std::vector<size_t> sizes;
    if (model == "resnet50") {
      sizes = resnet50();
    } else if (model == "bert-base") {
      sizes = bertBase();
    } else if (model.empty()) {
      sizes = modelSizes(tensors, total);
    } else {
      throw std::invalid_argument("--model must be resnet50 or bert-base, not '" + model + "'");
    }
    if (args["single"].as<int>() != 0) {
      size_t all = 0;
      for (size_t n : sizes) all += n;
      sizes = {all};
    }
    const int count = static_cast<int>(sizes.size());
    uint64_t stepBytes = 0;
    for (size_t n : sizes) stepBytes += n * 4;
    std::vector<std::vector<float>> grads(count), outs(count);
    for (int t = 0; t < count; ++t) {
      grads[t].assign(sizes[t], static_cast<float>(rank + 1));
      outs[t].assign(sizes[t], 0.0f);
    }
    const float expect = static_cast<float>(size * (size + 1) / 2);

    std::vector<double> times;
    std::vector<Handle> handles(count);
    const EngineStats before = engine->stats();
    EngineStats warm{};
    for (int step = 0; step < warmup + steps; ++step) {
      if (step == warmup) warm = engine->stats();
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = count - 1; t >= 0; --t) {  // backward order
        TensorArgs a;
        a.name = "grad." + std::to_string(t);
        a.shape = {static_cast<int64_t>(sizes[t])};
        a.input = grads[t].data();
        a.output = outs[t].data();
        handles[t] = engine->enqueue(std::move(a));
      }
      for (int t = 0; t < count; ++t) {
        const Result* r = engine->handles().wait(handles[t]);
        if (!r->status.ok()) throw std::runtime_error(r->status.message);
        engine->handles().release(handles[t]);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= warmup) times.push_back(seconds);
      if (check) {
        for (int t = 0; t < count; ++t) {
          for (float v : outs[t]) {
            if (v != expect) throw std::runtime_error("wrong result in grad." + std::to_string(t));
          }
        }
      }
    }
    const EngineStats after = engine->stats();
    (void)before;
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double batchesPerStep = static_cast<double>(after.batches - warm.batches) / steps;
    const double cached = static_cast<double>(after.cacheHits - warm.cacheHits) /
                          std::max<double>(1.0, static_cast<double>(after.tensorsRun - warm.tensorsRun));
    if (rank == 0) {
      std::printf("# engine_perf ranks=%d model=%s tensors=%d bytes/step=%llu fusion=%s cycle=%sms timeline=%s\n", size,
                  model.empty() ? "synthetic" : model.c_str(), count, static_cast<unsigned long long>(stepBytes), params::kFusionThreshold.str().c_str(),
                  params::kCycleTime.str().c_str(), params::kTimeline.str().empty() ? "off" : "on");
      std::printf("%-12s median_step_ms %.3f  algbw_GBps %.3f  batches_per_step %.1f  cached %.2f\n",
                  args["label"].as<std::string>().c_str(), median * 1e3, stepBytes / median / 1e9,
                  batchesPerStep, cached);
    }
    const int latencyRuns = args["latency"].as<int>();
    if (latencyRuns > 0) {
      std::vector<double> lat;
      float one = 1.0f, res = 0.0f;
      for (int i = 0; i < latencyRuns; ++i) {
        TensorArgs a;
        a.name = "latency";
        a.shape = {1};
        a.input = &one;
        a.output = &res;
        const auto t0 = std::chrono::steady_clock::now();
        const Handle h = engine->enqueue(std::move(a));
        const Result* r = engine->handles().wait(h);
        lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (!r->status.ok()) throw std::runtime_error(r->status.message);
        engine->handles().release(h);
      }
      std::sort(lat.begin(), lat.end());
      if (rank == 0) {
        std::printf("latency_4B median_us %.1f  p90_us %.1f  (cycle %s ms)\n", lat[lat.size() / 2] * 1e6,
                    lat[lat.size() * 9 / 10] * 1e6, params::kCycleTime.str().c_str());
      }
    }
    const double idle = args["idle"].as<double>();
    if (idle > 0) {
      // The background thread keeps negotiating every cycle; how much CPU does that cost?
      auto cpu = [] {
        struct rusage u;
        getrusage(RUSAGE_SELF, &u);
        return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
      };
      const EngineStats s0 = engine->stats();
      const double c0 = cpu();
      std::this_thread::sleep_for(std::chrono::duration<double>(idle));
      const double used = cpu() - c0;
      const EngineStats s1 = engine->stats();
      std::printf("rank %d idle %.1f s: cpu %.1f%% of one core, %llu cycles\n", rank, idle, 100.0 * used / idle,
                  static_cast<unsigned long long>(s1.cycles - s0.cycles));
    }
    engine->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_perf: %s\n", e.what());
    return 1;
  }
}
