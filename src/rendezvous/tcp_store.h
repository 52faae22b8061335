// TcpStore: the Store over TCP. TcpStoreServer holds the keys; TcpStore is its client.
//
// Protocol (all integers little-endian):
//   handshake : server sends a 32-byte random nonce; the client answers
//               HMAC-SHA256(secret, "ringfold-store-v1" || nonce) and its own 32-byte nonce;
//               the server checks (constant time) and answers HMAC(secret, "ringfold-store-srv" ||
//               client nonce), so both sides prove they hold the secret. A wrong or missing
//               answer closes the connection and is logged with the peer's address.
//   request   : u8 op (SET, GET, ADD, CHECK) then length-prefixed fields (u32 length + bytes).
//               Every length is checked against RINGFOLD_STORE_MAX_VALUE_BYTES before anything
//               is allocated; an oversized prefix closes the connection with an error logged.
//   GET waits on the server (no polling) until the key exists; the client enforces the timeout.
// The server is one thread driving epoll; it serves thousands of concurrent clients.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace ringfold::rendezvous {

class TcpStoreServer {
 public:
  // Listens on bindAddr:port (port 0 picks a free one) and starts the server thread.
  TcpStoreServer(const std::string& bindAddr, int port, std::string secret);
  ~TcpStoreServer();  // stops the thread and closes every connection
  int port() const;
  // Number of handshakes refused so far (wrong secret, oversized or malformed input).
  int64_t refusedCount() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public Store {
 public:
  // Connects (retrying until connectTimeout, for a server that is still starting) and
  // authenticates. Throws TimeoutError naming host:port if it cannot connect in time, and
  // Error("... refused: wrong secret ...") if the server rejects the secret.
  TcpStore(const std::string& host, int port, std::string secret,
           std::chrono::milliseconds connectTimeout);
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringfold::rendezvous
