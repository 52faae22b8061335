// Helpers for tcp_uring tests: ranks as threads (each with its own Device, rendezvous through a
// HashStore), deterministic payloads, and an environment guard. Everything listens on 127.0.0.1.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "rendezvous/hash_store.h"
#include "transport/connection.h"
#include "transport/device.h"

namespace ringfold::test {

using namespace std::chrono_literals;

// Sets environment variables for the lifetime of the guard and restores them afterwards. The
// store-address variables are always cleared so devices listen on 127.0.0.1 only, and
// RINGFOLD_LOCAL_TRANSPORT is tcp unless the guard names it: these ranks share a host, and the
// tests are about TCP unless they ask for Unix sockets.
class EnvGuard {
 public:
  EnvGuard() : EnvGuard(std::initializer_list<std::pair<const char*, const char*>>{}) {}
  EnvGuard(std::initializer_list<std::pair<const char*, const char*>> list) {
    std::map<std::string, std::string> vars;
    vars["RINGFOLD_LOCAL_TRANSPORT"] = "tcp";
    for (auto& [k, v] : list) vars[k] = v;
    for (const char* name : {"RINGFOLD_STORE_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "MASTER_ADDR",
                             "RINGFOLD_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE"}) {
      if (!vars.count(name)) vars[name] = "";
    }
    for (auto& [name, value] : vars) {
      const char* old = getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value.empty()) {
        unsetenv(name.c_str());
      } else {
        setenv(name.c_str(), value.c_str(), 1);
      }
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  ~EnvGuard() {
    for (auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The backend the per-peer selector gives ranks of one host under RINGFOLD_LOCAL_TRANSPORT (the
// guard sets tcp unless told): "unix_uring" for unix, else "tcp_uring". Every rank of these
// tests shares a host.
inline const char* localBackend() {
  const char* local = getenv("RINGFOLD_LOCAL_TRANSPORT");
  return local != nullptr && std::string(local) == "unix" ? "unix_uring" : "tcp_uring";
}

// Byte i of the message identified by `seed`.
inline uint8_t pattern(uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 11));
}

inline std::vector<uint8_t> patterned(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}

// First index where `v` differs from pattern(seed), or -1.
inline long long firstWrong(const std::vector<uint8_t>& v, uint64_t seed, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (v[i] != pattern(seed, i)) return static_cast<long long>(i);
  }
  return -1;
}

struct Rank {
  int rank;
  int size;
  transport::Device& device;
  std::vector<std::unique_ptr<transport::Connection>>& peers;
  transport::Connection& to(int r) { return *peers.at(r); }
};

// How runRanks starts each rank's device (every field optional).
struct RankThreads {
  // The rank's device; default: createDevice(localBackend()).
  std::function<std::unique_ptr<transport::Device>(int rank)> device;
  // Adjusts the rank's ConnectSpec (prefix "t", every peer) before connectAll, e.g. to a subset.
  std::function<void(transport::ConnectSpec&)> spec;
  std::chrono::milliseconds connectTimeout{20000};
  // On an error a rank aborts its device, as a communicator does, so its peers fail at once.
  bool abortOnError = false;
};

// Runs `body` on `size` threads, each with its own Device connected to the others through one
// HashStore. Returns each rank's exception (null when it finished cleanly).
inline std::vector<std::exception_ptr> runRanks(int size, const std::function<void(Rank&)>& body,
                                                const RankThreads& how) {
  rendezvous::HashStore store;
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<transport::Device> device;
      try {
        device = how.device ? how.device(r) : transport::createDevice(localBackend());
        transport::ConnectSpec spec;
        spec.store = &store;
        spec.prefix = "t";
        spec.rank = r;
        spec.size = size;
        spec.timeout = how.connectTimeout;
        if (how.spec) how.spec(spec);
        auto peers = device->connectAll(spec);
        Rank rank{r, size, *device, peers};
        body(rank);
      } catch (...) {
        errors[r] = std::current_exception();
        if (device && how.abortOnError) {
          std::string text;
          int peer;
          const transport::ErrorKind kind = transport::describeError(errors[r], text, peer);
          device->abort(kind, text);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// The same with localBackend() devices.
inline std::vector<std::exception_ptr> runRanks(int size, const std::function<void(Rank&)>& body,
                                                std::chrono::milliseconds connectTimeout = 20s) {
  RankThreads how;
  how.connectTimeout = connectTimeout;
  return runRanks(size, body, how);
}

inline std::string describe(const std::exception_ptr& e) {
  if (!e) return "ok";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Fails the test with each rank's error.
inline void expectAllOk(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << describe(errors[r]);
}

}  // namespace ringfold::test
