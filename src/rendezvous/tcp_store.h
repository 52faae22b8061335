// TcpStore: the Store over TCP. TcpStoreServer holds the keys; TcpStore is its client.
//
// Protocol (all integers little-endian; a "field" is u32 length + that many bytes):
//   handshake : server sends a 32-byte random nonce; the client answers
//               HMAC-SHA256(secret, "ringfold-store-v1" || nonce) and its own 32-byte nonce;
//               the server checks (constant time) and answers HMAC(secret, "ringfold-store-srv" ||
//               client nonce), so both sides prove they hold the secret. A wrong or missing
//               answer (or none within the handshake timeout) closes the connection, is counted
//               in refusedCount() and logged with the peer's address: one line each for the
//               first few, then one summary line per refusalLogInterval with the number not
//               logged (refusal_log.h), so a flood of bad connections cannot flood the log.
//   request   : u8 op then its fields; one request at a time per connection:
//                 SET    (1) key, value           -> u8 status
//                 GET    (2) key                  -> u8 status, value        (when the key exists)
//                 ADD    (3) key, i64 delta       -> u8 status, i64 new value
//                 CHECK  (4) u32 count, keys      -> u8 status, u8 all-present
//                 CANCEL (5)  only while a GET waits: the server answers that GET with status
//                             CANCELLED (or with its value, if it raced with a set); ignored
//                             otherwise.
//                 DELETE_PREFIX (6) prefix        -> u8 status, u64 keys removed
//                             removes every key that begins with the prefix (bounded like a
//                             key: 4 KiB; "" removes every key); GETs parked on a removed key
//                             stay parked until it is set again (or they are cancelled).
//               status: 0 OK, 1 ERROR (followed by a message field), 2 CANCELLED.
//               Every length is checked against its bound (keys: 4 KiB; values and the keys of
//               one CHECK together: RINGFOLD_STORE_MAX_VALUE_BYTES) before anything is
//               allocated; an oversized prefix or unknown op closes that connection with a
//               warning logged, and the server keeps serving everyone else.
//   GET waits on the server (no polling) until the key exists; the client enforces the timeout
//   and then sends CANCEL, so the connection stays usable.
// The server is one thread driving epoll over non-blocking sockets; it serves thousands of
// concurrent clients. The secret is used as given (its bytes are the HMAC key); it must not be
// empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace ringfold::rendezvous {

class TcpStoreServer {
 public:
  // Listens on bindAddr:port (port 0 picks a free one) and starts the server thread.
  // bindAddr may be a numeric address or a host name; "" or "0.0.0.0" listens everywhere.
  TcpStoreServer(const std::string& bindAddr, int port, std::string secret,
                 std::chrono::milliseconds handshakeTimeout = std::chrono::seconds(5),
                 std::chrono::milliseconds refusalLogInterval = std::chrono::seconds(10));
  ~TcpStoreServer();  // stop()
  // Stops the thread and closes every connection; clients then see the store closed. Idempotent.
  void stop();
  int port() const;
  // The numeric address it listens on ("0.0.0.0": every interface).
  const std::string& address() const;
  // Number of connections refused so far: wrong secret, handshake not completed in time,
  // oversized or malformed input.
  int64_t refusedCount() const;
  // Number of connections that completed the handshake so far (every client, this process's
  // own included).
  int64_t authenticatedCount() const;
  // The keys held now, and their bytes (keys and values together): what deletePrefix gives back.
  int64_t keyCount() const;
  int64_t keyBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Thread-safe: each call borrows an idle authenticated connection from a small pool (opening
// a new one when all are busy), so a get() that waits never blocks another thread's set().
// A TcpStore must not be used across fork(); a child process creates its own.
class TcpStore : public Store {
 public:
  // Connects (retrying until connectTimeout, for a server that is still starting) and
  // authenticates. Throws TimeoutError naming host:port if it cannot connect in time, and
  // Error("... refused: wrong secret ...") if the server rejects the secret.
  // A server that disappears later makes calls throw IoError(-1, "rendezvous store at
  // host:port closed the connection").
  TcpStore(const std::string& host, int port, std::string secret,
           std::chrono::milliseconds connectTimeout);
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t deletePrefix(const std::string& prefix) override;
  std::string describe() const override;  // "the rendezvous store at host:port"
  // Connections this client has opened and authenticated so far.
  int64_t connectionsOpened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringfold::rendezvous
