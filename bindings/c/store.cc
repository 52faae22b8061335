// The C ABI's access to the job's store (ringfold.h, "the job's store"): ringfold_store_set,
// ringfold_store_get and ringfold_store_check, usable with or without an initialized engine.
//
// Contract (as ringfold.h states it): the store is the one init would meet through, chosen from
// the environment at each call (bootstrapFromEnvironment): a job of several ranks opens it as
// the engine does (openJobStore: a client, or on the hosting rank the process's own server,
// which a later init reuses); a job of one rank connects to RINGFOLD_STORE_ADDR:PORT with
// RINGFOLD_SECRET when all three are set (the bootstrap derives no store for one rank, but
// ringfoldrun's elastic mode names its own for an incarnation of one worker), else uses a store
// in this process's memory. One connection per distinct target is kept, replaced when the
// target changes, dropped after a call on it failed, and never used by a fork()ed child.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/c/capi.h"
#include "common/params.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/job_store.h"
#include "rendezvous/tcp_store.h"

using namespace ringfold::capi;
using ringfold::detail::concat;
namespace params = ringfold::params;
namespace rdv = ringfold::rendezvous;

namespace {

// The store a call uses, and what it was opened for.
struct Target {
  std::string key;  // identifies the target: "memory", or kind, host, port and secret
  std::shared_ptr<rdv::Store> store;
};

class StoreCache {
 public:
  // The store the environment names now, opened (or reused).
  std::shared_ptr<rdv::Store> open() {
    const rdv::BootstrapInfo info = rdv::bootstrapFromEnvironment();
    std::string key;
    std::string host;
    int port = 0;
    std::string secret;
    if (info.size > 1) {
      key = concat(info.hostStore ? "hosted|" : "client|", info.storeAddr, "|", info.storePort, "|", info.secret);
    } else if (auto single = singleRankStore()) {
      std::tie(host, port, secret) = *single;
      key = concat("client|", host, "|", port, "|", secret);
    } else {
      key = "memory";
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ != getpid()) {  // a fork()ed child: the parent's connection is not ours
      abandon();
      pid_ = getpid();
    }
    if (current_.store && current_.key == key) return current_.store;
    abandon();
    std::shared_ptr<rdv::Store> store;
    if (key == "memory") {
      if (!memory_) memory_ = std::make_shared<rdv::HashStore>();
      store = memory_;
    } else if (info.size > 1) {
      auto job = std::make_shared<rdv::JobStore>(rdv::openJobStore(info));
      store = std::shared_ptr<rdv::Store>(job, job->store.get());  // keeps the server, if hosted, alive
    } else {
      store = std::make_shared<rdv::TcpStore>(host, port, secret, params::kStartTimeout.asSeconds());
    }
    current_ = {key, store};
    return store;
  }

  // Forgets `store` if it is still the current one (a call on it failed: reconnect next time).
  void drop(const std::shared_ptr<rdv::Store>& store) {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_.store == store && current_.key != "memory") abandon();
  }

 private:
  // RINGFOLD_STORE_ADDR, _PORT and RINGFOLD_SECRET, each under its own name (not an alias of
  // another launcher, whose port means something else), when all three are set.
  static std::optional<std::tuple<std::string, int, std::string>> singleRankStore() {
    const auto addr = params::kStoreAddr.lookup();
    const auto port = params::kStorePort.lookup();
    const auto secret = params::kSecret.lookup();
    if (!addr || !port || !secret) return std::nullopt;
    if (addr->second != params::kStoreAddr.name || port->second != params::kStorePort.name) return std::nullopt;
    const int64_t p = params::parseInt(port->first, port->second);
    if (p < 1 || p > 65535) invalid(concat(port->second, "='", port->first, "' is not a TCP port"));
    return std::make_tuple(addr->first, static_cast<int>(p), secret->first);
  }

  // Lets go of the current connection. In a forked child it is the parent's: kept reachable
  // and never destroyed (its destructor would talk on the parent's socket).
  void abandon() {
    if (current_.store && pid_ != 0 && pid_ != getpid()) {
      static auto* abandoned = new std::vector<std::shared_ptr<rdv::Store>>();
      abandoned->push_back(std::move(current_.store));
    }
    current_ = {};
  }

  std::mutex mu_;
  pid_t pid_ = getpid();
  Target current_;
  std::shared_ptr<rdv::Store> memory_;
};

StoreCache& cache() {
  static auto* c = new StoreCache;  // never destroyed: no static destructor races a late call
  return *c;
}

std::string keyOf(const char* key) {
  requireOut(key, "key");
  if (*key == '\0') invalid("key is empty");
  return key;
}

// Runs f(store) on the current store; an I/O failure on it drops the connection, so the next
// call reconnects (the store may have been restarted, or the variables changed).
template <typename F>
auto withStore(F&& f) {
  std::shared_ptr<rdv::Store> store = cache().open();
  try {
    return f(*store);
  } catch (const ringfold::IoError&) {
    cache().drop(store);
    throw;
  }
}

}  // namespace

extern "C" {

RINGFOLD_API int ringfold_store_set(const char* key, const void* value, size_t len) noexcept {
  return guard("ringfold_store_set", [&] {
    const std::string k = keyOf(key);
    if (len > 0) requireOut(value, "value");
    const auto* bytes = static_cast<const uint8_t*>(value);
    const std::vector<uint8_t> v(bytes, bytes + len);
    withStore([&](rdv::Store& s) {
      s.set(k, v);
      return 0;
    });
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_store_get(const char* key, double timeout_seconds, void* buf, size_t capacity,
                                    size_t* len) noexcept {
  const char* fn = "ringfold_store_get";
  return guard(fn, [&] {
    const std::string k = keyOf(key);
    requireOut(len, "len");
    if (capacity > 0) requireOut(buf, "buf");
    if (std::isnan(timeout_seconds)) invalid("timeout_seconds is NaN");
    std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
    if (timeout_seconds >= 0 && timeout_seconds < 365.0 * 24 * 3600) {
      timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(timeout_seconds * 1000.0)));
    }
    std::shared_ptr<rdv::Store> store = cache().open();
    std::vector<uint8_t> value;
    try {
      value = store->get(k, timeout);
    } catch (const ringfold::TimeoutError& e) {
      setError(fn, e.what());
      return RINGFOLD_IN_PROGRESS;
    } catch (const ringfold::IoError&) {
      cache().drop(store);
      throw;
    }
    *len = value.size();
    if (value.size() > capacity) {
      invalid(concat("the value of '", k, "' has ", value.size(), " bytes, more than the buffer's ", capacity,
                     " (*len says how many: call again with a buffer that large)"));
    }
    if (!value.empty()) std::memcpy(buf, value.data(), value.size());
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_store_check(const char* key) noexcept {
  bool present = false;
  const int rc = guard("ringfold_store_check", [&] {
    const std::string k = keyOf(key);
    present = withStore([&](rdv::Store& s) { return s.check({k}); });
    return RINGFOLD_OK;
  });
  if (rc != RINGFOLD_OK) return -rc;
  return present ? 1 : 0;
}

}  // extern "C"
