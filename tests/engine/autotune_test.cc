// Autotuner tests: driven by synthetic throughput functions, never by the clock.
#include "engine/autotune.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"

using namespace ringfold;
using namespace ringfold::engine;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBytesPerCycle = 4 * kMiB;
const TunableSettings kInitial{128 * kMiB, 1.0};  // the engine's defaults

using ScoreFn = std::function<double(const TunableSettings&)>;  // bytes per µs

// Smooth, peaked on log scales: optimum 2000 bytes/µs at 24 MiB, 8 ms; floor 200.
double logShaped(const TunableSettings& s) {
  double a = std::log2(1.0 + static_cast<double>(s.fusionThresholdBytes) / kMiB) - std::log2(25.0);
  double b = std::log10(s.cycleTimeMs) - std::log10(8.0);
  return 200.0 + 1800.0 * std::exp(-a * a / 2.0 - b * b / (2.0 * 0.4 * 0.4));
}
const TunableSettings kLogOptimum{24 * kMiB, 8.0};

// Smooth bowl on linear scales: optimum 1500 at 40 MiB, 30 ms, falling to ~300 at the far corners.
double linearShaped(const TunableSettings& s) {
  double a = (static_cast<double>(s.fusionThresholdBytes) / kMiB - 40.0) / 64.0;
  double b = (s.cycleTimeMs - 30.0) / 100.0;
  return 1500.0 - 1200.0 * std::min(1.0, a * a + b * b);
}
const TunableSettings kLinearOptimum{40 * kMiB, 30.0};

// Deterministic multiplicative noise in [1 - amp, 1 + amp] (an LCG, so no platform drift).
struct Noise {
  double amplitude = 0;
  uint64_t state = 12345;
  double next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(state >> 11) * 0x1.0p-53;
    return 1.0 + amplitude * (2.0 * u - 1.0);
  }
};

// Feeds one cycle at the tuner's current setting; returns record()'s answer.
bool feedCycle(Autotuner& tuner, const ScoreFn& f, Noise& noise) {
  double bytesPerUs = f(tuner.current()) * noise.next();
  double seconds = static_cast<double>(kBytesPerCycle) / (bytesPerUs * 1e6);
  return tuner.record(kBytesPerCycle, seconds);
}

// Runs to the end; returns the setting of every trial, in order.
std::vector<TunableSettings> runToEnd(Autotuner& tuner, const ScoreFn& f, double noiseAmp = 0) {
  Noise noise{noiseAmp};
  std::vector<TunableSettings> seen{tuner.current()};
  for (int guard = 0; !tuner.finished() && guard < 1000000; ++guard) {
    if (feedCycle(tuner, f, noise) && !tuner.finished()) seen.push_back(tuner.current());
  }
  EXPECT_TRUE(tuner.finished());
  return seen;
}

AutotuneOptions smallOptions() {
  AutotuneOptions o;
  o.warmupSamples = 1;
  o.stepsPerSample = 2;
  return o;
}

bool inSearchSpace(const TunableSettings& s) {
  double tenths = s.cycleTimeMs * 10.0;
  return s.fusionThresholdBytes <= kAutotuneMaxThresholdBytes && s.fusionThresholdBytes % kMiB == 0 &&
         s.cycleTimeMs >= kAutotuneMinCycleMs && s.cycleTimeMs <= kAutotuneMaxCycleMs &&
         std::abs(tenths - std::round(tenths)) < 1e-9;
}

std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument thrown)";
}

}  // namespace

TEST(AutotuneTrials, FirstTrialIsTheInitialSetting) {
  Autotuner tuner(kInitial, AutotuneOptions{});
  EXPECT_EQ(tuner.current(), kInitial);
  EXPECT_EQ(tuner.best(), kInitial);
  EXPECT_FALSE(tuner.finished());
  auto seen = runToEnd(tuner, logShaped);
  ASSERT_FALSE(tuner.trials().empty());
  EXPECT_EQ(tuner.trials()[0].settings, kInitial);
  EXPECT_EQ(seen[0], kInitial);
}

TEST(AutotuneTrials, FinishesAfterMaxSamplesTrialsAndStaysPut) {
  AutotuneOptions o;  // defaults: 3 warmup + 5 scored samples of 10 cycles = 80 cycles a trial
  Autotuner tuner(kInitial, o);
  ASSERT_EQ(tuner.cyclesPerTrial(), 80);
  Noise noise;
  for (int64_t i = 0; i < (o.maxSamples * tuner.cyclesPerTrial()) - 1; ++i) {
    feedCycle(tuner, logShaped, noise);
    ASSERT_EQ(static_cast<int64_t>(tuner.trials().size()), (i + 1) / tuner.cyclesPerTrial());
  }
  EXPECT_FALSE(tuner.finished());
  feedCycle(tuner, logShaped, noise);
  EXPECT_TRUE(tuner.finished());
  EXPECT_EQ(tuner.trials().size(), 20u);
  EXPECT_EQ(tuner.current(), tuner.best());
  TunableSettings settled = tuner.current();
  for (int i = 0; i < 500; ++i) EXPECT_FALSE(feedCycle(tuner, linearShaped, noise));
  EXPECT_EQ(tuner.current(), settled);
  EXPECT_EQ(tuner.trials().size(), 20u);
}

TEST(AutotuneTrials, RecordReturnsTrueExactlyWhenCurrentChanges) {
  Autotuner tuner(kInitial, smallOptions());
  Noise noise;
  int changes = 0;
  while (!tuner.finished()) {
    TunableSettings before = tuner.current();
    bool changed = feedCycle(tuner, logShaped, noise);
    EXPECT_EQ(changed, !(before == tuner.current()));
    changes += changed;
  }
  // 19 new trials (all distinct settings) plus, unless the last trial was the best, the settling.
  EXPECT_GE(changes, 19);
  EXPECT_LE(changes, 20);
}

TEST(AutotuneTrials, SingleTrialKeepsTheInitialSetting) {
  AutotuneOptions o = smallOptions();
  o.maxSamples = 1;
  Autotuner tuner(kInitial, o);
  Noise noise;
  for (int64_t i = 0; i < tuner.cyclesPerTrial(); ++i) EXPECT_FALSE(feedCycle(tuner, logShaped, noise));
  EXPECT_TRUE(tuner.finished());
  EXPECT_EQ(tuner.current(), kInitial);
  EXPECT_EQ(tuner.best(), kInitial);
}

TEST(AutotuneSearch, BestIsTheHighestScoringTrial) {
  for (double amp : {0.0, 0.2}) {
    Autotuner tuner(kInitial, smallOptions());
    runToEnd(tuner, logShaped, amp);
    const AutotuneTrial* top = &tuner.trials()[0];
    for (const auto& t : tuner.trials()) {
      if (t.score > top->score) top = &t;
    }
    EXPECT_EQ(tuner.best(), top->settings);
    EXPECT_EQ(tuner.current(), top->settings);
  }
}

TEST(AutotuneSearch, LandsNearTheOptimumOfALogShapedFunction) {
  for (double amp : {0.0, 0.1}) {
    Autotuner tuner(kInitial, smallOptions());
    runToEnd(tuner, logShaped, amp);
    double peak = logShaped(kLogOptimum);
    double got = logShaped(tuner.best());
    EXPECT_GE(got, 0.9 * peak) << "noise " << amp << ": threshold " << tuner.best().fusionThresholdBytes
                               << " cycle " << tuner.best().cycleTimeMs;
    EXPECT_GE(got, 3.0 * logShaped(kInitial));
  }
}

TEST(AutotuneSearch, LandsNearTheOptimumOfALinearShapedFunction) {
  for (double amp : {0.0, 0.1}) {
    Autotuner tuner(kInitial, smallOptions());
    runToEnd(tuner, linearShaped, amp);
    double peak = linearShaped(kLinearOptimum);
    double got = linearShaped(tuner.best());
    EXPECT_GE(got, 0.9 * peak) << "noise " << amp << ": threshold " << tuner.best().fusionThresholdBytes
                               << " cycle " << tuner.best().cycleTimeMs;
    EXPECT_GE(got, 2.0 * linearShaped(kInitial));
  }
}

// A peak about a tenth of the box wide in each direction, amid a flat floor: the tuner must
// keep exploring instead of chasing the noise on the floor.
TEST(AutotuneSearch, FindsANarrowPeak) {
  auto narrow = [](const TunableSettings& s) {
    double a = std::log2(1.0 + static_cast<double>(s.fusionThresholdBytes) / kMiB) - 2.0;  // 3 MiB
    double b = std::log10(s.cycleTimeMs) - std::log10(2.5);
    return 100.0 + 900.0 * std::exp(-a * a / (2 * 0.5 * 0.5) - b * b / (2 * 0.2 * 0.2));
  };
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    AutotuneOptions o = smallOptions();
    o.seed = seed;
    Autotuner tuner(kInitial, o);
    runToEnd(tuner, narrow, 0.1);
    EXPECT_GE(narrow(tuner.best()), 800.0) << "seed " << seed << ": threshold " << tuner.best().fusionThresholdBytes
                                           << " cycle " << tuner.best().cycleTimeMs;
  }
}

TEST(AutotuneSearch, ProposalsStayInTheSearchSpaceAndDoNotRepeat) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    for (const ScoreFn& f : {ScoreFn(logShaped), ScoreFn(linearShaped)}) {
      AutotuneOptions o = smallOptions();
      o.seed = seed;
      o.maxSamples = 40;
      Autotuner tuner(kInitial, o);
      auto seen = runToEnd(tuner, f, 0.3);
      ASSERT_EQ(seen.size(), 40u);
      for (size_t i = 1; i < seen.size(); ++i) {
        EXPECT_TRUE(inSearchSpace(seen[i])) << "trial " << i << ": " << seen[i].fusionThresholdBytes << " B, "
                                            << seen[i].cycleTimeMs << " ms";
        for (size_t j = 0; j < i; ++j) EXPECT_FALSE(seen[i] == seen[j]) << "trial " << i << " repeats " << j;
      }
    }
  }
}

TEST(AutotuneSearch, SameMeasurementsGiveTheSameSettings) {
  for (double amp : {0.0, 0.25}) {
    Autotuner a(kInitial, smallOptions());
    Autotuner b(kInitial, smallOptions());
    auto first = runToEnd(a, logShaped, amp);
    auto second = runToEnd(b, logShaped, amp);
    EXPECT_EQ(first, second);
    EXPECT_EQ(a.best(), b.best());
  }
}

TEST(AutotuneScoring, ScoreIsMedianSampleThroughputInBytesPerMicrosecond) {
  AutotuneOptions o;
  o.warmupSamples = 0;
  o.stepsPerSample = 2;
  o.maxSamples = 2;
  Autotuner tuner(kInitial, o);
  // Five samples of two cycles each: 2 MB in {1, 2, 4, 0.5, 8} ms -> {2000, 1000, 500, 4000, 250}.
  for (double ms : {1.0, 2.0, 4.0, 0.5, 8.0}) {
    tuner.record(1000000, ms * 0.25e-3);
    tuner.record(1000000, ms * 0.75e-3);
  }
  ASSERT_EQ(tuner.trials().size(), 1u);
  EXPECT_DOUBLE_EQ(tuner.trials()[0].score, 1000.0);
}

TEST(AutotuneScoring, WarmupSamplesAreDiscarded) {
  // Trial 0's first three samples (the warmup) run 1000x faster than the rest.
  auto firstScore = [](int warmup) {
    AutotuneOptions o;
    o.warmupSamples = warmup;
    o.stepsPerSample = 4;
    o.maxSamples = 2;
    Autotuner tuner(kInitial, o);
    for (int cycle = 0; tuner.trials().empty(); ++cycle) {
      double seconds = cycle < 3 * o.stepsPerSample ? 1e-6 : 1e-3;
      tuner.record(1000000, seconds);
    }
    return tuner.trials()[0].score;
  };
  EXPECT_DOUBLE_EQ(firstScore(3), 1000.0);  // 1 MB per ms
  EXPECT_GT(firstScore(0), 100000.0);       // without warmup, the outliers are the median
}

TEST(AutotuneScoring, RecordRejectsBadDurations) {
  Autotuner tuner(kInitial, AutotuneOptions{});
  EXPECT_THROW(tuner.record(1, -1.0), InvalidArgument);
  EXPECT_THROW(tuner.record(1, std::nan("")), InvalidArgument);
  EXPECT_NO_THROW(tuner.record(1, 0.0));
}

TEST(AutotuneLog, CsvHasHeaderOneRowPerTrialAndBest) {
  std::string path = ::testing::TempDir() + "/autotune_test_log.csv";
  AutotuneOptions o = smallOptions();
  o.maxSamples = 6;
  o.logPath = path;
  Autotuner tuner(kInitial, o);
  {
    std::ifstream in(path);
    std::string header;
    ASSERT_TRUE(std::getline(in, header));  // written and flushed at construction
    EXPECT_EQ(header, "trial,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_us");
  }
  runToEnd(tuner, logShaped);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 6u + 1u);
  for (int i = 0; i < 6; ++i) {
    const auto& t = tuner.trials()[i];
    std::ostringstream cycle;
    cycle << t.settings.cycleTimeMs;
    EXPECT_EQ(lines[1 + i].rfind(std::to_string(i) + "," + std::to_string(t.settings.fusionThresholdBytes) + "," +
                                     cycle.str() + ",",
                                 0),
              0u)
        << lines[1 + i];
    double logged = std::stod(lines[1 + i].substr(lines[1 + i].rfind(',') + 1));
    EXPECT_NEAR(logged, t.score, 0.001);
  }
  EXPECT_EQ(lines[7].rfind("best," + std::to_string(tuner.best().fusionThresholdBytes) + ",", 0), 0u) << lines[7];
  std::remove(path.c_str());
}

TEST(AutotuneLog, UnwritablePathThrowsNamingIt) {
  AutotuneOptions o;
  o.logPath = "/nonexistent-dir-for-ringfold/autotune.csv";
  std::string msg = messageOf([&] { Autotuner tuner(kInitial, o); });
  EXPECT_NE(msg.find(o.logPath), std::string::npos) << msg;
  EXPECT_NE(msg.find("RINGFOLD_AUTOTUNE_LOG"), std::string::npos) << msg;
}

TEST(AutotuneOptions, BadOptionsThrowNamingTheVariable) {
  auto withOpt = [](const std::function<void(AutotuneOptions&)>& edit) {
    AutotuneOptions o;
    edit(o);
    return messageOf([&] { Autotuner tuner(kInitial, o); });
  };
  EXPECT_NE(withOpt([](auto& o) { o.maxSamples = 0; }).find("RINGFOLD_AUTOTUNE_MAX_SAMPLES"), std::string::npos);
  EXPECT_NE(withOpt([](auto& o) { o.stepsPerSample = -1; }).find("RINGFOLD_AUTOTUNE_STEPS_PER_SAMPLE"),
            std::string::npos);
  EXPECT_NE(withOpt([](auto& o) { o.stepsPerSample = 0; }).find("RINGFOLD_AUTOTUNE_STEPS_PER_SAMPLE"),
            std::string::npos);
  EXPECT_NE(withOpt([](auto& o) { o.warmupSamples = -1; }).find("RINGFOLD_AUTOTUNE_WARMUP_SAMPLES"),
            std::string::npos);
  EXPECT_NE(withOpt([](auto& o) { o.noise = -0.1; }).find("RINGFOLD_AUTOTUNE_NOISE"), std::string::npos);
  EXPECT_NE(withOpt([](auto& o) { o.noise = std::nan(""); }).find("RINGFOLD_AUTOTUNE_NOISE"), std::string::npos);
  EXPECT_EQ(withOpt([](auto& o) { o.warmupSamples = 0; o.noise = 0; }), "(no InvalidArgument thrown)");
}

namespace {
const char* const kAutotuneVars[] = {
    "RINGFOLD_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
    "RINGFOLD_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
    "RINGFOLD_AUTOTUNE_MAX_SAMPLES", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
    "RINGFOLD_AUTOTUNE_NOISE", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
    "RINGFOLD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG"};
void clearAutotuneEnv() {
  for (const char* v : kAutotuneVars) unsetenv(v);
}
}  // namespace

TEST(AutotuneOptions, FromParamsReadsDefaultsNamesAndAliases) {
  clearAutotuneEnv();
  AutotuneOptions o = autotuneOptionsFromParams();
  EXPECT_EQ(o.warmupSamples, 3);
  EXPECT_EQ(o.stepsPerSample, 10);
  EXPECT_EQ(o.maxSamples, 20);
  EXPECT_DOUBLE_EQ(o.noise, 0.8);
  EXPECT_EQ(o.logPath, "");

  setenv("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "7", 1);
  setenv("RINGFOLD_AUTOTUNE_NOISE", "0.25", 1);
  setenv("HOROVOD_AUTOTUNE_LOG", "/tmp/x.csv", 1);
  o = autotuneOptionsFromParams();
  EXPECT_EQ(o.maxSamples, 7);
  EXPECT_DOUBLE_EQ(o.noise, 0.25);
  EXPECT_EQ(o.logPath, "/tmp/x.csv");
  clearAutotuneEnv();
}

TEST(AutotuneOptions, FromParamsOutOfRangeNamesTheVariable) {
  clearAutotuneEnv();
  setenv("RINGFOLD_AUTOTUNE_MAX_SAMPLES", "0", 1);
  std::string msg = messageOf([] { autotuneOptionsFromParams(); });
  EXPECT_NE(msg.find("RINGFOLD_AUTOTUNE_MAX_SAMPLES=0"), std::string::npos) << msg;
  clearAutotuneEnv();

  setenv("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "-5", 1);
  msg = messageOf([] { autotuneOptionsFromParams(); });
  EXPECT_NE(msg.find("RINGFOLD_AUTOTUNE_STEPS_PER_SAMPLE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"), std::string::npos) << msg;
  clearAutotuneEnv();

  setenv("RINGFOLD_AUTOTUNE_WARMUP_SAMPLES", "-1", 1);
  EXPECT_NE(messageOf([] { autotuneOptionsFromParams(); }).find("RINGFOLD_AUTOTUNE_WARMUP_SAMPLES"),
            std::string::npos);
  clearAutotuneEnv();

  setenv("RINGFOLD_AUTOTUNE_NOISE", "-1", 1);
  EXPECT_NE(messageOf([] { autotuneOptionsFromParams(); }).find("RINGFOLD_AUTOTUNE_NOISE"), std::string::npos);
  clearAutotuneEnv();

  setenv("RINGFOLD_AUTOTUNE_MAX_SAMPLES", "many", 1);  // does not parse: params names it too
  EXPECT_NE(messageOf([] { autotuneOptionsFromParams(); }).find("RINGFOLD_AUTOTUNE_MAX_SAMPLES"),
            std::string::npos);
  clearAutotuneEnv();
}
