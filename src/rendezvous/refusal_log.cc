#include "rendezvous/refusal_log.h"

#include <cstdio>

#include "common/logging.h"

namespace ringfold::rendezvous {

namespace {

constexpr size_t kMaxHostsTracked = 4096;

std::string hostOf(const std::string& peer) {
  size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

std::string seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

RefusalLog::RefusalLog(std::chrono::milliseconds interval, int burst)
    : interval_(interval), burst_(burst), burstLeft_(burst) {}

void RefusalLog::refused(const std::string& peer, const std::string& why, Clock::time_point now) {
  ++total_;
  // A whole quiet interval (and nothing left to report) gives back the one-by-one allowance.
  if (lastRefusal_ && suppressed_ == 0 && now - *lastRefusal_ >= interval_) burstLeft_ = burst_;
  lastRefusal_ = now;
  if (burstLeft_ > 0) {
    --burstLeft_;
    RF_LOG(kWarning) << "rendezvous store refused connection from " << peer << ": " << why
                     << (burstLeft_ == 0 ? " (further refusals are counted and summarized every " +
                                               seconds(interval_) + " s)"
                                         : "");
    return;
  }
  ++suppressed_;
  if (hosts_.size() < kMaxHostsTracked) hosts_.insert(hostOf(peer));
  latest_ = peer + ": " + why;
  if (!windowStart_) windowStart_ = now;
}

void RefusalLog::summarize(Clock::time_point now) {
  if (suppressed_ > 0) {
    RF_LOG(kWarning) << "rendezvous store refused " << suppressed_ << " more connection(s) in the last "
                     << seconds(now - *windowStart_) << " s, not logged one by one, from "
                     << hosts_.size() << (hosts_.size() >= kMaxHostsTracked ? "+" : "")
                     << " address(es); latest from " << latest_ << "; " << total_ << " refused in all";
  }
  suppressed_ = 0;
  hosts_.clear();
  latest_.clear();
  windowStart_.reset();
}

std::optional<RefusalLog::Clock::time_point> RefusalLog::flush(Clock::time_point now) {
  if (windowStart_ && now >= *windowStart_ + interval_) summarize(now);
  if (!windowStart_) return std::nullopt;
  return *windowStart_ + interval_;  // the summary is due one interval after its window opened
}

void RefusalLog::finish() { summarize(Clock::now()); }

}  // namespace ringfold::rendezvous
