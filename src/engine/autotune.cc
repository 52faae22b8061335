#include "engine/autotune.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <utility>

#include "common/error.h"
#include "common/params.h"

namespace ringfold::engine {

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

namespace {

// "RINGFOLD_X" or, when an alias supplied the value, "RINGFOLD_X (set as HOROVOD_X)".
std::string describeSource(const params::Param& p) {
  auto v = p.lookup();
  if (v && v->second != p.name) return std::string(p.name) + " (set as " + v->second + ")";
  return p.name;
}

int intParamInRange(const params::Param& p, int64_t lo, int64_t hi) {
  int64_t v = p.asInt();
  if (v < lo || v > hi) {
    RF_THROW(InvalidArgument, describeSource(p), "=", v, " is out of range: must be in [", lo, ", ", hi, "]");
  }
  return static_cast<int>(v);
}

void checkIntField(int v, int lo, int hi, const params::Param& p, const char* field) {
  if (v < lo || v > hi) {
    RF_THROW(InvalidArgument, p.name, " (AutotuneOptions::", field, ") = ", v,
             " is out of range: must be in [", lo, ", ", hi, "]");
  }
}

}  // namespace

AutotuneOptions autotuneOptionsFromParams() {
  AutotuneOptions o;
  o.warmupSamples = intParamInRange(params::kAutotuneWarmupSamples, 0, kAutotuneMaxWarmupSamples);
  o.stepsPerSample = intParamInRange(params::kAutotuneStepsPerSample, 1, kAutotuneMaxStepsPerSample);
  o.maxSamples = intParamInRange(params::kAutotuneMaxSamples, 1, kAutotuneMaxTrials);
  o.noise = params::kAutotuneNoise.asDouble();
  if (!std::isfinite(o.noise) || o.noise < 0) {
    RF_THROW(InvalidArgument, describeSource(params::kAutotuneNoise), "=", o.noise,
             " is out of range: must be a finite number >= 0");
  }
  o.logPath = params::kAutotuneLog.str();
  return o;
}

void validateAutotuneOptions(const AutotuneOptions& o) {
  checkIntField(o.warmupSamples, 0, kAutotuneMaxWarmupSamples, params::kAutotuneWarmupSamples, "warmupSamples");
  checkIntField(o.stepsPerSample, 1, kAutotuneMaxStepsPerSample, params::kAutotuneStepsPerSample,
                "stepsPerSample");
  checkIntField(o.maxSamples, 1, kAutotuneMaxTrials, params::kAutotuneMaxSamples, "maxSamples");
  if (!std::isfinite(o.noise) || o.noise < 0) {
    RF_THROW(InvalidArgument, params::kAutotuneNoise.name, " (AutotuneOptions::noise) = ", o.noise,
             " is out of range: must be a finite number >= 0");
  }
}

// ---------------------------------------------------------------------------------------------
// Search space and Gaussian process
//
// Inputs are normalised to [0,1] on a log scale for both knobs:
//   threshold: log2(1 + MiB) / log2(65)     (0 MiB -> 0, 64 MiB -> 1; 0 = no fusion is valid)
//   cycle:     log10(ms) / 2                (1 ms -> 0, 100 ms -> 1)
// Why log: throughput responds to these knobs per order of magnitude. Going from 1 to 4 MiB of
// fusion changes how many allreduces a step needs far more than 40 -> 43 MiB does, and a 1 -> 5 ms
// cycle changes latency as much as 20 -> 100 ms. An RBF kernel has one length scale per problem,
// which only fits if equal distances mean similar effects: on a linear scale the whole interesting
// small-threshold, short-cycle corner would be squeezed into a few percent of the box.
// A setting outside the box (the initial one may be, e.g. the 128 MiB default) keeps its
// extrapolated coordinate, clamped to [-1, 2], so the model sees it where it really is.
// ---------------------------------------------------------------------------------------------

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kRandomCandidates = 32;       // seeded random candidates per proposal, besides the grid
constexpr double kExplorationXi = 0.01;     // EI margin, on normalised scores
constexpr double kMinRelativeSpread = 0.1;  // see propose()
constexpr double kJitter = 1e-8;            // keeps the Cholesky factor positive definite at noise 0
constexpr std::array<double, 3> kLengthScales = {0.1, 0.15, 0.2};  // see propose()
constexpr std::array<int, 13> kGridMiB = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
constexpr std::array<double, 14> kGridCycleMs = {1, 1.5, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 70, 100};

struct Point {
  double x0 = 0;  // normalised threshold
  double x1 = 0;  // normalised cycle time
};

Point normalise(const TunableSettings& s) {
  double mib = static_cast<double>(s.fusionThresholdBytes) / kMiB;
  double t = std::log2(1.0 + mib) / std::log2(65.0);
  double c = std::log10(std::max(s.cycleTimeMs, 0.01)) / 2.0;
  return {std::clamp(t, -1.0, 2.0), std::clamp(c, -1.0, 2.0)};
}

// Snaps to the search space: whole MiB in [0, 64], cycle to 0.1 ms in [1, 100].
TunableSettings snap(double mib, double cycleMs) {
  double m = std::clamp(std::round(mib), 0.0, static_cast<double>(kAutotuneMaxThresholdBytes >> 20));
  double c = std::clamp(std::round(cycleMs * 10.0) / 10.0, kAutotuneMinCycleMs, kAutotuneMaxCycleMs);
  return {static_cast<uint64_t>(m) << 20, c};
}

// Inverse of normalise() for a point of the unit box, snapped.
TunableSettings fromUnit(double u0, double u1) {
  return snap(std::exp2(u0 * std::log2(65.0)) - 1.0, std::pow(10.0, 2.0 * u1));
}

// Uniform in [0,1) from the top 53 bits: mt19937_64's output is fixed by the standard, unlike
// std::uniform_real_distribution's, so proposals are the same with every standard library.
double unitDraw(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double kernel(const Point& a, const Point& b, double lengthScale) {
  double d0 = a.x0 - b.x0, d1 = a.x1 - b.x1;
  return std::exp(-(d0 * d0 + d1 * d1) / (2.0 * lengthScale * lengthScale));
}

// GP regression with unit signal variance, RBF kernel and observation noise `noise` (std. dev.):
// K = k(X,X) + noise^2 I = L L^T. n <= 256 and usually <= 20, so dense O(n^3) is nothing.
class GaussianProcess {
 public:
  GaussianProcess(std::vector<Point> x, std::vector<double> y, double noise, double lengthScale)
      : x_(std::move(x)), y_(std::move(y)), lengthScale_(lengthScale) {
    size_t n = x_.size();
    l_.assign(n * n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j <= i; ++j) l_[i * n + j] = kernel(x_[i], x_[j], lengthScale_);
      l_[i * n + i] += noise * noise + kJitter;
    }
    // Cholesky, in place on the lower triangle. K is symmetric positive definite (RBF kernel
    // plus a positive diagonal), so the pivots stay positive up to rounding; clamp for safety.
    for (size_t j = 0; j < n; ++j) {
      double d = l_[j * n + j];
      for (size_t k = 0; k < j; ++k) d -= l_[j * n + k] * l_[j * n + k];
      d = std::sqrt(std::max(d, kJitter));
      l_[j * n + j] = d;
      for (size_t i = j + 1; i < n; ++i) {
        double s = l_[i * n + j];
        for (size_t k = 0; k < j; ++k) s -= l_[i * n + k] * l_[j * n + k];
        l_[i * n + j] = s / d;
      }
    }
    // alpha = K^-1 y = L^-T (L^-1 y)
    alpha_ = forward(y_);
    for (size_t ii = n; ii-- > 0;) {
      double s = alpha_[ii];
      for (size_t k = ii + 1; k < n; ++k) s -= l_[k * n + ii] * alpha_[k];
      alpha_[ii] = s / l_[ii * n + ii];
    }
  }

  // log p(y | X) = -y^T K^-1 y / 2 - sum(log L_ii) - n log(2 pi) / 2
  double logMarginalLikelihood() const {
    size_t n = x_.size();
    double fit = 0, logDet = 0;
    for (size_t i = 0; i < n; ++i) {
      fit += y_[i] * alpha_[i];
      logDet += std::log(l_[i * n + i]);
    }
    return -0.5 * fit - logDet - 0.5 * static_cast<double>(n) * std::log(2.0 * std::numbers::pi);
  }

  // Posterior mean and standard deviation at p.
  std::pair<double, double> predict(const Point& p) const {
    std::vector<double> k(x_.size());
    double mean = 0;
    for (size_t i = 0; i < x_.size(); ++i) {
      k[i] = kernel(p, x_[i], lengthScale_);
      mean += k[i] * alpha_[i];
    }
    std::vector<double> v = forward(k);
    double var = 1.0;
    for (double e : v) var -= e * e;
    return {mean, std::sqrt(std::max(var, 1e-12))};
  }

 private:
  // Solves L v = b.
  std::vector<double> forward(const std::vector<double>& b) const {
    size_t n = x_.size();
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
      double s = b[i];
      for (size_t k = 0; k < i; ++k) s -= l_[i * n + k] * v[k];
      v[i] = s / l_[i * n + i];
    }
    return v;
  }

  std::vector<Point> x_;
  std::vector<double> y_;
  double lengthScale_;
  std::vector<double> l_;  // lower Cholesky factor, row-major n x n
  std::vector<double> alpha_;
};

// Expected improvement over `best` (maximisation) for a Gaussian N(mean, sd^2).
double expectedImprovement(double mean, double sd, double best) {
  double gain = mean - best - kExplorationXi;
  if (sd < 1e-9) return std::max(gain, 0.0);
  double z = gain / sd;
  double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi);
  return gain * cdf + sd * pdf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Autotuner
// ---------------------------------------------------------------------------------------------

Autotuner::Autotuner(TunableSettings initial, AutotuneOptions options)
    : options_(std::move(options)), initial_(initial), current_(initial), rng_(options_.seed) {
  validateAutotuneOptions(options_);
  if (!options_.logPath.empty()) {
    errno = 0;
    log_.open(options_.logPath, std::ios::out | std::ios::trunc);
    if (!log_) {
      RF_THROW(InvalidArgument, params::kAutotuneLog.name, ": cannot open '", options_.logPath,
               "' for writing", errno != 0 ? std::string(": ") + std::strerror(errno) : std::string());
    }
    log_ << "trial,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_us\n";
    log_.flush();
  }
}

int64_t Autotuner::cyclesPerTrial() const {
  return static_cast<int64_t>(options_.warmupSamples + kAutotuneScoredSamples) * options_.stepsPerSample;
}

const AutotuneTrial* Autotuner::bestTrial() const {
  const AutotuneTrial* top = nullptr;  // the earliest of equal scores wins
  for (const auto& t : trials_) {
    if (top == nullptr || t.score > top->score) top = &t;
  }
  return top;
}

TunableSettings Autotuner::best() const {
  const AutotuneTrial* top = bestTrial();
  return top != nullptr ? top->settings : initial_;
}

bool Autotuner::record(uint64_t bytes, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    RF_THROW(InvalidArgument, "Autotuner::record: cycle time must be finite and >= 0 seconds, got ", seconds);
  }
  if (finished_) return false;
  sampleBytes_ += static_cast<double>(bytes);
  sampleSeconds_ += seconds;
  if (++cyclesInSample_ < options_.stepsPerSample) return false;

  // A sample is complete. 1 ns floor: a sample of zero-time cycles must not score infinity.
  double score = sampleBytes_ / (std::max(sampleSeconds_, 1e-9) * 1e6);
  cyclesInSample_ = 0;
  sampleBytes_ = 0;
  sampleSeconds_ = 0;
  if (samplesInTrial_++ >= options_.warmupSamples) sampleScores_.push_back(score);
  if (static_cast<int>(sampleScores_.size()) < kAutotuneScoredSamples) return false;

  TunableSettings before = current_;
  finishTrial();
  return !(current_ == before);
}

void Autotuner::finishTrial() {
  double score = median(sampleScores_);
  sampleScores_.clear();
  samplesInTrial_ = 0;
  trials_.push_back({current_, score});
  logRow(std::to_string(trials_.size() - 1), current_, score);

  if (static_cast<int>(trials_.size()) >= options_.maxSamples) {
    const AutotuneTrial* top = bestTrial();
    finished_ = true;
    current_ = top->settings;
    logRow("best", top->settings, top->score);
    return;
  }
  current_ = propose();
}

TunableSettings Autotuner::propose() {
  // Observations normalised to mean 0, std 1, so the unit signal variance, the noise option and
  // the EI margin are on a fixed scale. The std is floored at 10% of the mean: when every trial
  // so far scored about the same (all in a flat region), dividing by their tiny spread would
  // blow measurement noise up to unit size and EI would chase it; with the floor, differences
  // of a few percent stay within the noise term and EI keeps exploring.
  size_t n = trials_.size();
  double mean = 0;
  for (const auto& t : trials_) mean += t.score;
  mean /= static_cast<double>(n);
  double var = 0;
  for (const auto& t : trials_) var += (t.score - mean) * (t.score - mean);
  double sd = std::sqrt(var / static_cast<double>(n));
  sd = std::max(sd, kMinRelativeSpread * std::abs(mean));
  if (!(sd > 0)) sd = 1.0;

  std::vector<Point> x;
  std::vector<double> y;
  double bestY = -1e300;
  for (const auto& t : trials_) {
    x.push_back(normalise(t.settings));
    y.push_back((t.score - mean) / sd);
    bestY = std::max(bestY, y.back());
  }

  // Length scale: the one of a short ladder that maximises the marginal likelihood (type-II
  // maximum likelihood on a grid: deterministic, 3 tiny Cholesky factorisations). The ladder
  // stops at 0.2 of the box: flat early scores make the likelihood prefer a long scale, under
  // which the model believes a few corner trials have seen the whole box, so EI hugs the edges
  // and never finds a narrow peak (the figures on a synthetic peak are in docs/engine.md).
  const GaussianProcess* model = nullptr;
  std::vector<GaussianProcess> fits;
  fits.reserve(kLengthScales.size());
  for (double ls : kLengthScales) {
    fits.emplace_back(x, y, options_.noise, ls);
    if (model == nullptr || fits.back().logMarginalLikelihood() > model->logMarginalLikelihood()) {
      model = &fits.back();
    }
  }

  // Candidates: a fixed grid (evenly spaced on the log scales), then seeded random points. The
  // draws happen every proposal, so the random stream depends only on the trial index.
  std::vector<TunableSettings> candidates;
  for (int mib : kGridMiB) {
    for (double ms : kGridCycleMs) candidates.push_back(snap(mib, ms));
  }
  for (int i = 0; i < kRandomCandidates; ++i) {
    double u0 = unitDraw(rng_);
    double u1 = unitDraw(rng_);
    candidates.push_back(fromUnit(u0, u1));
  }

  auto tried = [&](const TunableSettings& s) {
    return std::any_of(trials_.begin(), trials_.end(), [&](const AutotuneTrial& t) { return t.settings == s; });
  };
  bool anyUntried = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) { return !tried(c); });

  // Highest EI wins; ties go to the earliest candidate, so the choice is deterministic.
  const TunableSettings* choice = nullptr;
  double choiceEi = -1;
  for (const auto& c : candidates) {
    if (anyUntried && tried(c)) continue;
    auto [mu, sigma] = model->predict(normalise(c));
    double ei = expectedImprovement(mu, sigma, bestY);
    if (ei > choiceEi) {
      choiceEi = ei;
      choice = &c;
    }
  }
  return *choice;
}

void Autotuner::logRow(const std::string& label, const TunableSettings& s, double score) {
  if (!log_.is_open()) return;
  char line[160];
  std::snprintf(line, sizeof(line), "%s,%llu,%.6g,%.3f\n", label.c_str(),
                static_cast<unsigned long long>(s.fusionThresholdBytes), s.cycleTimeMs, score);
  log_ << line;
  log_.flush();  // the log is for people watching a live job: rows appear as trials end
}

}  // namespace ringfold::engine
