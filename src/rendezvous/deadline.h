// deadlineAfter(timeout): now + timeout on the steady clock, with negative timeouts read as 0
// and huge ones (milliseconds::max(), "forever") clamped to ten years so the sum cannot
// overflow. Internal to rendezvous.
#pragma once

#include <algorithm>
#include <chrono>

namespace ringfold::rendezvous {

inline std::chrono::steady_clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 10);
  return std::chrono::steady_clock::now() +
         std::clamp(timeout, std::chrono::milliseconds(0), kForever);
}

}  // namespace ringfold::rendezvous
