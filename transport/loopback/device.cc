// loopback Device: a mailbox (Endpoint) registered in a process-global table under a unique
// address; connectAll publishes the address through the Store and looks up the peers'.
#include "transport/loopback/device.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "common/error.h"
#include "rendezvous/store.h"
#include "transport/loopback/connection.h"
#include "transport/loopback/memory_region.h"

namespace ringfold::transport::loopback {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<Endpoint>> endpoints;
  std::atomic<uint64_t> next{0};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: devices may outlive static teardown
  return *r;
}

class LoopbackDevice final : public Device {
 public:
  LoopbackDevice() : endpoint_(std::make_shared<Endpoint>()) {
    auto& reg = registry();
    endpoint_->address = detail::concat("loopback:", ::getpid(), ":", reg.next.fetch_add(1));
    endpoint_->group = std::make_shared<Group>();
    endpoint_->group->members.push_back(endpoint_);
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.endpoints[endpoint_->address] = endpoint_;
  }

  ~LoopbackDevice() override {
    auto& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.endpoints.erase(endpoint_->address);
  }

  const char* name() const override { return "loopback"; }

  using transport::Device::connectAll;
  std::vector<std::unique_ptr<transport::Connection>> connectAll(const ConnectSpec& spec) override {
    RF_ENFORCE(!connected_, "loopback: connectAll may be called once per device");
    RF_ENFORCE(spec.store != nullptr, "loopback: connectAll needs a store");
    const int rank = spec.rank, size = spec.size;
    RF_ENFORCE(size >= 1 && rank >= 0 && rank < size, "loopback: rank ", rank, " of ", size);
    RF_ENFORCE(spec.peers.empty() || spec.peers.size() == static_cast<size_t>(size), "loopback: ",
               spec.peers.size(), " peer flags for ", size, " ranks");
    connected_ = true;
    endpoint_->rank = rank;
    auto keyOf = [&](int r) { return detail::concat(spec.prefix, "/addr/", r); };
    spec.store->setString(keyOf(rank), endpoint_->address);

    const auto deadline = std::chrono::steady_clock::now() + spec.timeout;
    std::vector<std::shared_ptr<Endpoint>> peers(size);
    for (int p = 0; p < size; ++p) {
      if (p == rank || (!spec.peers.empty() && !spec.peers[p])) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      std::string address;
      try {
        address = spec.store->getString(keyOf(p), std::max(left, std::chrono::milliseconds(0)));
      } catch (const TimeoutError&) {
        RF_THROW(TimeoutError, "loopback: rank ", p, " did not publish its address (", keyOf(p),
                 ") within ", spec.timeout.count(), " ms");
      }
      {
        auto& reg = registry();
        std::lock_guard<std::mutex> lock(reg.mu);
        auto it = reg.endpoints.find(address);
        if (it != reg.endpoints.end()) peers[p] = it->second.lock();
      }
      if (!peers[p]) {
        RF_THROW(Error, "loopback: rank ", p, "'s address '", address,
                 "' is not a live loopback device of this process (loopback joins threads of one "
                 "process only; use tcp_uring between processes)");
      }
      if (firstPeer_ < 0) firstPeer_ = p;
    }
    // Devices joined directly or through each other share one group, so one abort poisons them
    // all; the registry's lock serialises the merges.
    {
      auto& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      for (auto& peer : peers) {
        if (!peer) continue;
        std::shared_ptr<Group> theirs;
        {
          std::lock_guard<std::mutex> peerLock(peer->mu);
          theirs = peer->group;
        }
        auto mine = group();
        mine->absorb(mine, theirs);
      }
    }
    std::vector<std::unique_ptr<transport::Connection>> out(size);
    for (int p = 0; p < size; ++p) {
      if (peers[p]) out[p] = std::make_unique<Connection>(endpoint_, peers[p], p);
    }
    return out;
  }

  std::unique_ptr<transport::MemoryRegion> registerMemory(void* data, size_t size) override {
    return std::make_unique<MemoryRegion>(data, size);
  }

  void abort(ErrorKind kind, const std::string& message) override {
    group()->abort(kind, message, endpoint_->rank);
  }

  bool aborted() const override { return group()->aborted.load(std::memory_order_acquire); }

  std::exception_ptr abortReason() const override {
    std::lock_guard<std::mutex> lock(endpoint_->mu);
    return endpoint_->poisonLocked(firstPeer_);
  }

  // Sends copy straight into the receiver and receives complete when copied: nothing to drive.
  void progress() override {}

  void setWaitHook(std::function<void()> hook) override {
    std::lock_guard<std::mutex> lock(endpoint_->mu);
    endpoint_->waitHook = std::move(hook);
  }

 private:
  std::shared_ptr<Group> group() const {
    std::lock_guard<std::mutex> lock(endpoint_->mu);
    return endpoint_->group;
  }

  std::shared_ptr<Endpoint> endpoint_;
  bool connected_ = false;
  int firstPeer_ = -1;  // the rank an abort reason blames when this device started the abort
};

}  // namespace

std::unique_ptr<transport::Device> createDevice() { return std::make_unique<LoopbackDevice>(); }

}  // namespace ringfold::transport::loopback
