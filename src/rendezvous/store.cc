#include "rendezvous/store.h"

#include <sstream>

#include "common/error.h"
#include "rendezvous/deadline.h"

namespace ringfold::rendezvous {

void Store::setString(const std::string& key, const std::string& value) {
  set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string Store::getString(const std::string& key, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> v = get(key, timeout);
  return std::string(v.begin(), v.end());
}

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  // Waiting on each key in turn with the remaining budget waits exactly as long as the slowest
  // key, and reuses each backend's own get-with-wait (no polling here).
  const auto deadline = deadlineAfter(timeout);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left < std::chrono::milliseconds(0)) left = std::chrono::milliseconds(0);
    try {
      get(keys[i], left);
    } catch (const TimeoutError&) {
      std::ostringstream missing;
      bool first = true;
      for (size_t j = i; j < keys.size(); ++j) {
        if (j > i && check({keys[j]})) continue;
        missing << (first ? "" : ", ") << "'" << keys[j] << "'";
        first = false;
      }
      RF_THROW(TimeoutError, "store wait timed out after ", timeout.count(),
               " ms; keys still missing: ", missing.str());
    }
  }
}

}  // namespace ringfold::rendezvous
