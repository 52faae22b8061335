// DeviceState of the shm backend (see device.h for the files).
//
// DeviceState: the state behind a Device, shared (shared_ptr) by the Device, its Connections and
// Requests, so any of them may outlive the others. Progress happens only in the thread calling
// test()/wait()/progress(): each peer drains its incoming ring, bounces old unmatched requests to
// send, and pushes what it has queued. wait() spins for RINGFOLD_SPIN_US, then sleeps on this
// rank's doorbell (an eventfd) and every peer's socket, in slices of at most 1 ms (200 us while a
// wait hook is set), so an idle rank uses no CPU and a dead peer is seen at once.
//
// Failure (as the other backends): the first error poisons the device; every pending and later
// request throws it. abort() sends kAbort to every peer (at most 2 s for ring space), then
// poisons; a kAbort from rank P poisons with throwError(kind, P, text).
//
// Liveness (transport/liveness/monitor.h): DeviceState implements liveness::Links (kNotice and
// kAbort slots; peers' pids from their sockets' credentials).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/shm/device.h"

namespace ringfold::transport::shm {

class Peer;
struct RequestState;

// Settings read once from the environment when the device is created.
struct Tuning {
  uint32_t slots = 64;
  uint32_t slotBytes = 16 << 10;
  size_t cmaMinBytes = 64 << 10;
  bool cma = false;  // RINGFOLD_SHM_CMA: on (where permitted) or off
  std::chrono::microseconds spin{50};
  std::chrono::milliseconds timeout{60000};
  static Tuning fromEnvironment();
};

class DeviceState final : private liveness::Links {
 public:
  DeviceState();
  ~DeviceState() override;
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  std::vector<Peer*> connect(const ConnectSpec& spec);
  int rank() const { return rank_; }
  const Tuning& tuning() const { return tuning_; }
  liveness::Monitor& monitor() { return *monitor_; }
  const std::shared_ptr<liveness::Monitor>& sharedMonitor() const { return monitor_.shared(); }
  Stats& counters() { return stats_; }
  const Stats& stats() const { return stats_; }
  std::string describe() const { return describe_; }
  void shareMonitor(std::shared_ptr<liveness::Monitor> monitor);

  // Drains every ring, bounces, flushes; never blocks. Returns how many slots moved.
  unsigned progress();
  // Every peer reads a message parked for a lazy receive into that receive's memory instead
  // (peer.h); true if any was parked. Waits call it once polling finds nothing to do, so a
  // parked message never holds a peer up for longer than a spin.
  bool unpark();
  void wait(RequestState& request, std::chrono::milliseconds timeout);
  // A producer that filled `doorbell`'s ring or a consumer that freed space: wakes that side.
  static void ring(int doorbell);

  bool poisoned() const { return poison_ != nullptr; }
  const std::exception_ptr& poisonError() const { return poison_; }
  void setWaitHook(std::function<void()> hook) { hook_ = std::move(hook); }
  bool aborted() const { return monitor_->aborted(*this); }
  void poison(std::exception_ptr error) noexcept;
  void poisonIo(int peer, const std::string& what) noexcept;
  [[noreturn]] void throwPoison();
  void abandon(RequestState& request) noexcept;
  void abort(ErrorKind kind, const std::string& message);
  void onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept;
  void shutdown() noexcept;

 private:
  // Sleeps on the doorbell (and, with few peers, their sockets) for up to `slice`; returns at
  // once if a ring moved.
  void block(std::chrono::steady_clock::duration slice);
  // Waits up to `timeout` (zero: looks without waiting) on the doorbell and, with `sockets`, on
  // every peer's socket (a hang-up: that peer's process ended).
  void checkSockets(std::chrono::steady_clock::duration timeout, bool sockets = true);
  bool abortsSent() const;
  void sendNotice(int peer, const liveness::Notice& notice) override;
  void sendAbort(int peer, ErrorKind kind, const std::string& text) override;
  liveness::Unacknowledged unacknowledged(int peer) const override { (void)peer; return {}; }
  int pid(int peer) const override;

  Tuning tuning_;
  int rank_ = -1;
  int doorbell_ = -1;  // this rank's eventfd: peers write it to wake this rank
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<Peer*> active_;  // the connected peers, for the loops
  std::chrono::steady_clock::time_point nextSocketCheck_{};
  std::string describe_;
  bool connected_ = false;
  bool closed_ = false;
  std::exception_ptr poison_;
  std::function<void()> hook_;
  Stats stats_;
  uint64_t probeWord_ = 0;  // read by peers to learn whether cross-memory attach works
  liveness::MonitorSlot monitor_;
};

}  // namespace ringfold::transport::shm
