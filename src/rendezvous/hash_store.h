// HashStore: an in-memory Store shared by ranks that are threads of one process (tests, the
// single-process case). get() waits on a condition variable.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/store.h"

namespace ringfold::rendezvous {

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t deletePrefix(const std::string& prefix) override;
  std::string describe() const override { return "the in-process store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

}  // namespace ringfold::rendezvous
