// Online tuning of the engine's two knobs, fusion threshold and cycle time, from measured
// throughput (RINGFOLD_AUTOTUNE=1, alias HOROVOD_AUTOTUNE), as Horovod's parameter_manager does.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace ringfold::engine {

// The settings the tuner controls. The engine broadcasts rank 0's current() to every rank.
struct TunableSettings {
  uint64_t fusionThresholdBytes = 128ull << 20;
  double cycleTimeMs = 1.0;
  bool operator==(const TunableSettings&) const = default;
};

struct AutotuneOptions {
  int warmupSamples = 3;      // samples discarded at the start of each trial
  int stepsPerSample = 10;    // cycles that carried data per sample
  int maxSamples = 20;        // trials (settings tried) before the best is kept
  double noise = 0.8;         // GP observation noise (std. dev., on normalised scores)
  std::string logPath;        // CSV log of every trial and the final choice; empty: none
  uint64_t seed = 1;          // any randomness is seeded: the same measurements give the same choices
};

// Search space (Horovod's ranges). Proposals are snapped: threshold to whole MiB, cycle to 0.1 ms.
inline constexpr uint64_t kAutotuneMaxThresholdBytes = 64ull << 20;
inline constexpr double kAutotuneMinCycleMs = 1.0;
inline constexpr double kAutotuneMaxCycleMs = 100.0;
// Samples scored per trial after the warmup; the trial's score is their median (odd: the median
// is one measured sample, and up to 2 outlier samples of 5 cannot move it).
inline constexpr int kAutotuneScoredSamples = 5;
// Accepted option ranges (beyond kAutotuneMaxTrials the tuning would outlast most jobs).
inline constexpr int kAutotuneMaxTrials = 256;
inline constexpr int kAutotuneMaxWarmupSamples = 1000;
inline constexpr int kAutotuneMaxStepsPerSample = 1000000;

// Reads the RINGFOLD_AUTOTUNE_* params (or their HOROVOD_* aliases). Throws InvalidArgument
// naming the RINGFOLD_AUTOTUNE_* variable (and the alias that supplied it) if a value is out of range.
AutotuneOptions autotuneOptionsFromParams();

// Throws InvalidArgument naming the RINGFOLD_AUTOTUNE_* variable of the first field out of
// range: warmupSamples in [0, 1000], stepsPerSample in [1, 1e6], maxSamples in [1, 256],
// noise finite and >= 0.
void validateAutotuneOptions(const AutotuneOptions& options);

// One scored trial: the setting tried and its score (median sample throughput, bytes/µs).
struct AutotuneTrial {
  TunableSettings settings;
  double score = 0;
};

// Autotuner: Bayesian optimisation of (fusion threshold, cycle time) for throughput.
//
// Vocabulary. A *cycle* is one engine cycle that moved data, reported by record(). A *sample*
// is `stepsPerSample` consecutive cycles; its throughput is their summed bytes over their summed
// seconds, in bytes/µs. A *trial* runs one setting for `warmupSamples` discarded samples (the
// pipeline and caches settle after a change) and then kAutotuneScoredSamples scored samples;
// its score is their median, since the machines are noisy.
//
// Contract:
//  * Trial 0 is the `initial` setting, unchanged (it may lie outside the search space).
//  * Each later trial is proposed by a Gaussian process fitted to all scored trials, maximising
//    expected improvement; proposals lie inside the search space, snapped, and are not repeats
//    of a setting already tried while untried candidates remain.
//  * After `maxSamples` trials the tuner settles on the highest-scoring trial (earliest on a
//    tie) for good: finished() becomes true, current() == best(), record() returns false.
//  * Pure logic, no clock and no threads: the same options and the same record() calls give
//    the same sequence of settings. Not thread-safe; rank 0's engine thread owns it.
//  * With a log path, the CSV log gets a header, one row per trial as it is scored
//    (trial,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_us) and a final `best` row,
//    each flushed. An unwritable path throws InvalidArgument naming it, at construction.
class Autotuner {
 public:
  Autotuner(TunableSettings initial, AutotuneOptions options);

  // Rank 0 calls this once per cycle that moved data, with the bytes the cycle's collectives
  // moved and the cycle's wall time in seconds (including its sleep). Returns true when
  // current() changed: a new trial starts with a different setting, or the tuner finished and
  // settled on a best that differs from the last trial. Throws InvalidArgument if `seconds` is
  // negative or not finite.
  bool record(uint64_t bytes, double seconds);

  TunableSettings current() const { return current_; }
  bool finished() const { return finished_; }
  // Best scored so far (initial before any score).
  TunableSettings best() const;
  // Trials scored so far, in order.
  const std::vector<AutotuneTrial>& trials() const { return trials_; }
  const AutotuneOptions& options() const { return options_; }
  // Cycles one trial takes: (warmupSamples + kAutotuneScoredSamples) * stepsPerSample.
  int64_t cyclesPerTrial() const;

 private:
  const AutotuneTrial* bestTrial() const;  // nullptr before any score
  void finishTrial();
  TunableSettings propose();
  void logRow(const std::string& label, const TunableSettings& s, double score);

  AutotuneOptions options_;
  TunableSettings initial_;
  TunableSettings current_;
  bool finished_ = false;
  std::vector<AutotuneTrial> trials_;
  std::vector<double> sampleScores_;  // scored samples of the current trial
  int samplesInTrial_ = 0;            // samples completed in the current trial, warmup included
  int cyclesInSample_ = 0;
  double sampleBytes_ = 0;
  double sampleSeconds_ = 0;
  std::mt19937_64 rng_;
  std::ofstream log_;
};

}  // namespace ringfold::engine
