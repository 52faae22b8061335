// RefusalLog: what the store server logs about the connections it refuses, bounded under a flood.
//
// Contract
//   * The first `burst` refusals are logged one line each ("rendezvous store refused connection
//     from ADDR:PORT: WHY"). After that, refusals are only counted, and one line per `interval`
//     says how many were not logged, from how many addresses, and the latest one:
//       rendezvous store refused 5765 more connection(s) in the last 10 s, not logged one by one,
//       from 1 address(es); latest from 127.0.0.1:41246: wrong secret (...); 5770 refused in all
//   * The one-by-one allowance comes back only after a whole interval without a refusal, so a
//     steady flood costs `burst` lines, then one line per interval, however fast it comes.
//   * flush(now) logs a summary that is due; it returns when the next one will be (none: no
//     refusal is waiting to be reported). finish() logs whatever is pending, due or not.
//   * Not thread-safe: the server's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

namespace ringfold::rendezvous {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kDefaultBurst = 5;

  explicit RefusalLog(std::chrono::milliseconds interval, int burst = kDefaultBurst);

  void refused(const std::string& peer, const std::string& why, Clock::time_point now);
  std::optional<Clock::time_point> flush(Clock::time_point now);
  void finish();

  int64_t total() const { return total_; }

 private:
  void summarize(Clock::time_point now);

  std::chrono::milliseconds interval_;
  int burst_;
  int burstLeft_;
  int64_t total_ = 0;
  int64_t suppressed_ = 0;              // counted since the last summary, not logged
  std::unordered_set<std::string> hosts_;  // their addresses (without port); capped
  std::string latest_;                  // "ADDR:PORT: WHY" of the latest suppressed one
  std::optional<Clock::time_point> lastRefusal_;
  std::optional<Clock::time_point> windowStart_;  // first suppressed refusal since the summary
};

}  // namespace ringfold::rendezvous
