// PrefixStore: a view of another Store whose keys all live under `prefix + "/"`, so that
// independent users (process sets, repeated rendezvous rounds) cannot collide.
// It holds a reference: the underlying store must outlive it. Thread-safe when the underlying
// store is.
#pragma once

#include <string>

#include "rendezvous/store.h"

namespace ringfold::rendezvous {

class PrefixStore : public Store {
 public:
  PrefixStore(Store& store, std::string prefix);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  // Removes the keys under prefix() + "/" + `prefix` only ("": every key of this view).
  int64_t deletePrefix(const std::string& prefix) override;
  std::string describe() const override { return store_.describe(); }
  std::optional<int64_t> otherClients() const override { return store_.otherClients(); }

  const std::string& prefix() const { return prefix_; }

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }

  Store& store_;
  std::string prefix_;
};

}  // namespace ringfold::rendezvous
