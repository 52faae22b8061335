#include "rendezvous/prefix_store.h"

#include <utility>

#include "common/error.h"

namespace ringfold::rendezvous {

PrefixStore::PrefixStore(Store& store, std::string prefix)
    : store_(store), prefix_(std::move(prefix)) {
  RF_ENFORCE(!prefix_.empty(), "PrefixStore needs a non-empty prefix");
}

void PrefixStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  store_.set(join(key), value);
}

std::vector<uint8_t> PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return store_.get(join(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return store_.add(join(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(join(k));
  return store_.check(full);
}

int64_t PrefixStore::deletePrefix(const std::string& prefix) { return store_.deletePrefix(join(prefix)); }

}  // namespace ringfold::rendezvous
