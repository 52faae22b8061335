// DeviceState of the rdma backend (see device.h for the files).
//
// DeviceState: the state behind a Device, shared (shared_ptr) by the Device, its Connections,
// MemoryRegions and Requests, so any of them may outlive the others safely. Progress happens
// only in the thread calling test()/wait()/progress(): poll the fabric, dispatch completions to
// the peers, flush what they queued. wait() spins for RINGFOLD_SPIN_US, then blocks on the
// fabric's wait fd in slices of at most 1 ms (200 us while a wait hook is set), or sleeps in
// short slices when the fabric has none, so an idle rank uses no CPU. Before blocking, every
// peer gets its unreturned credits back (protocol.h).
//
// Failure (as tcp_uring's DeviceState): the first error poisons the device (poison()); every
// pending and later request throws that same error, after settle() has drained the writes
// already handed to the fabric (at most 2 s) and dropped every pointer to a request. abort()
// sends a kAbort slot to every peer (waiting at most 2 s for credits and completions), then
// poisons; a kAbort from rank P poisons with throwError(kind, P, text). The destructor closes the
// fabric without waiting on any peer.
//
// Liveness (transport/liveness/monitor.h): DeviceState implements liveness::Links (kNotice and
// kAbort slots; no unacknowledged-data view: the fabric hides it; pids of same-host peers from
// the hello). A wait that has lasted half its timeout announces whom it waits for and withdraws
// that when it ends; a wait that times out blames the rank the monitor finds.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/rdma/device.h"
#include "transport/rdma/fabric.h"
#include "transport/rdma/registration_cache.h"

namespace ringfold::transport::rdma {

class Peer;
struct RequestState;

// Settings read once from the environment when the device is created.
struct Tuning {
  uint32_t slots = 64;
  uint32_t slotBytes = 16 << 10;
  size_t chunkBytes = 1 << 20;
  uint64_t regCacheBytes = uint64_t{1} << 30;
  std::chrono::microseconds spin{50};
  std::chrono::milliseconds timeout{60000};
  static Tuning fromEnvironment();
};

class DeviceState final : private liveness::Links {
 public:
  explicit DeviceState(const Options& options);
  ~DeviceState() override;
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  // Connects the peers spec.peers selects (protocol.h, start-up); returns them by rank (null at
  // `rank` and at peers not selected).
  std::vector<Peer*> connect(const ConnectSpec& spec);

  // Start-up in steps, for a caller that carries the blobs its own way without blocking
  // (PairLink: over one socket); connect() runs them over the store. In this order:
  //   begin(rank, size, selected): opens the fabric and makes a ring per selected peer; returns
  //     this rank's blob for them (protocol.h, start-up). Once per device.
  //   insert(p, blob): peer p's blob; throws Error when this rank cannot use it.
  //   linked(): every selected peer's blob is in (the liveness monitor learns the pairs).
  //   greet(p): p has inserted this rank's blob too: the hello to p may go.
  //   greeted(p): p's hello arrived and this rank's landed (progress() drives it).
  std::string begin(int rank, int size, const std::vector<int>& selected);
  void insert(int peer, const std::string& blob);
  void linked();
  void greet(int peer);
  bool greeted(int peer) const;
  void logConnected(size_t peers) const;
  Peer* peer(int p) const { return p >= 0 && p < static_cast<int>(peers_.size()) ? peers_[p].get() : nullptr; }

  int rank() const { return rank_; }
  const Tuning& tuning() const { return tuning_; }
  Fabric& fabric() { return *fabric_; }
  Fabric* fabricIfOpen() const { return fabric_.get(); }
  bool writesOrdered() const { return ordered_; }
  RegistrationCache* cache() { return cache_.get(); }
  liveness::Monitor& monitor() { return *monitor_; }
  const std::shared_ptr<liveness::Monitor>& sharedMonitor() const { return monitor_.shared(); }
  Stats& counters() { return stats_; }
  Stats stats() const;
  void shareMonitor(std::shared_ptr<liveness::Monitor> monitor);

  // Finds a registration for [data, data + size) for `r` (see RequestState); throws what the
  // fabric throws.
  void registerFor(RequestState& r);
  // The request is complete: counts it, releases what it acquired, marks it done.
  void finish(RequestState& r);

  // Polls the fabric, dispatches, flushes the peers; never blocks. Returns how many completions.
  unsigned progress();
  // Drives progress until `request` completes; throws IoError naming its peer after `timeout`.
  void wait(RequestState& request, std::chrono::milliseconds timeout);

  bool poisoned() const { return poison_ != nullptr; }
  const std::exception_ptr& poisonError() const { return poison_; }
  void setWaitHook(std::function<void()> hook) { hook_ = std::move(hook); }
  bool aborted() const { return monitor_->aborted(*this); }
  // Records the first failure (later ones are ignored); callable from completion handlers.
  void poison(std::exception_ptr error) noexcept;
  void poisonIo(int peer, const std::string& what) noexcept;
  // Drains the writes in flight (bounded), then drops every pointer to a request.
  void settle() noexcept;
  [[noreturn]] void throwPoison();
  // A pending request is being destroyed: poison (unless already) and settle.
  void abandon(RequestState& request) noexcept;

  void abort(ErrorKind kind, const std::string& message);
  void onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept;
  // Closes everything; later requests throw "the rdma device was destroyed".
  void shutdown() noexcept;

 private:
  void dispatch(const Completion& c);
  // Waits for a completion (or `slice`) without spinning; returns at once if one may be pending.
  void block(std::chrono::steady_clock::duration slice);
  bool anyBusy() const;
  bool abortsSent() const;  // to every peer but silentPeer_
  bool drainUntil(std::chrono::milliseconds budget, bool (DeviceState::*done)() const);
  bool idle() const { return !anyBusy(); }
  void waitForHellos(const std::vector<int>& peers, std::chrono::steady_clock::time_point deadline);
  // liveness::Links, for monitor_.
  void sendNotice(int peer, const liveness::Notice& notice) override;
  void sendAbort(int peer, ErrorKind kind, const std::string& text) override;
  liveness::Unacknowledged unacknowledged(int peer) const override;
  int pid(int peer) const override;

  Options options_;
  Tuning tuning_;
  std::shared_ptr<Fabric> fabric_;
  bool ordered_ = true;
  std::unique_ptr<RegistrationCache> cache_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int rank_ = -1;
  int silentPeer_ = -1;  // the peer the poison error names, when abort() follows it
  bool connected_ = false;
  std::exception_ptr poison_;
  bool settled_ = false;
  bool closed_ = false;
  std::function<void()> hook_;
  Stats stats_;
  liveness::MonitorSlot monitor_;
};

}  // namespace ringfold::transport::rdma
