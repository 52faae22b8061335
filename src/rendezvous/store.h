// Store: the key-value service ranks use to find each other (addresses, counters, barriers).
//
// Contract
//   * set(key, value) stores bytes; a later set of the same key replaces them.
//   * get(key, timeout) waits until the key exists and returns its value; it throws
//     TimeoutError naming the key if `timeout` passes first.
//   * add(key, delta) adds to a 64-bit counter (a missing key counts as 0) and returns the new
//     value; the counter is stored as its decimal text, so get() reads it too.
//   * check(keys) says, without waiting, whether every key exists.
//   * deletePrefix(prefix) removes every key that begins with `prefix` (byte for byte: pass
//     "a/b/" to spare "a/bc"; "" removes every key) and returns how many it removed. It does not
//     disturb waiters: a get() or wait() blocked on a key keeps waiting until the key is set
//     again or its timeout passes, whether or not the key existed and was deleted. A set() or
//     add() racing with it may survive it (or not); callers delete a prefix once nobody writes
//     under it any more.
//   * Implementations are thread-safe.
// Backends: TcpStore (the real one: a client of TcpStoreServer, HMAC-authenticated),
// HashStore (in-memory, for ranks as threads), FileStore (a shared directory), PrefixStore
// (namespaces another store).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringfold::rendezvous {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual int64_t deletePrefix(const std::string& prefix) = 0;

  // For error messages about a wait on other processes' keys: where the store is ("the
  // rendezvous store at 10.0.0.1:29500 (hosted by this rank)"), and, on the store's own host, how
  // many connections from other processes it has authenticated so far (std::nullopt when this
  // store cannot tell, as for a mere client).
  virtual std::string describe() const { return "the rendezvous store"; }
  virtual std::optional<int64_t> otherClients() const { return std::nullopt; }

  // Conveniences built on the four calls above.
  void setString(const std::string& key, const std::string& value);
  std::string getString(const std::string& key, std::chrono::milliseconds timeout);
  // Waits until every key exists (TimeoutError naming the missing keys after `timeout`).
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
};

}  // namespace ringfold::rendezvous
