#include "rendezvous/hash_store.h"

#include <string>

#include "common/error.h"
#include "common/params.h"
#include "rendezvous/deadline.h"

namespace ringfold::rendezvous {

void HashStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::vector<uint8_t> HashStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = deadlineAfter(timeout);
  auto it = data_.find(key);
  while (it == data_.end()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      it = data_.find(key);
      if (it != data_.end()) break;
      RF_THROW(TimeoutError, "store key '", key, "' not set within ", timeout.count(), " ms");
    }
    it = data_.find(key);
  }
  return it->second;
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      value = params::parseInt(std::string(it->second.begin(), it->second.end()),
                               "store counter '" + key + "'");
    }
    value += delta;
    std::string text = std::to_string(value);
    data_[key] = std::vector<uint8_t>(text.begin(), text.end());
  }
  cv_.notify_all();
  return value;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys) {
    if (data_.find(k) == data_.end()) return false;
  }
  return true;
}

int64_t HashStore::deletePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t removed = 0;
  // Keys that begin with `prefix` sort together, from the first key not less than it.
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.starts_with(prefix);) {
    it = data_.erase(it);
    ++removed;
  }
  return removed;
}

}  // namespace ringfold::rendezvous
