// DeviceState of the tcp_uring backend (see device.h for the files).
//
// DeviceState: the state behind a Device, shared (shared_ptr) by the Device, its Connections and
// their Requests, so any of them may outlive the others safely. Progress happens only in the
// thread calling test()/wait(): wait() spins on the completion queue for RINGFOLD_SPIN_US, then
// blocks in io_uring_submit_and_wait_timeout, so an idle rank uses no CPU.
//
// Failure: the first error poisons the device state (poison()); every pending and later request
// throws that same error, after settle() has cancelled and drained the in-flight ops. abort()
// first sends an ABORT frame (kind + text) to every peer, waiting at most 2 s for them to leave,
// then poisons; an ABORT received from rank P poisons with throwError(kind, P, text). The
// destructor cancels everything and closes the sockets without waiting on dead peers.
//
// Liveness (transport/liveness/monitor.h): DeviceState implements liveness::Links (WAITING and
// ABORT frames, TCP_INFO, pids) for its Monitor. A wait that has lasted half its timeout
// announces whom it waits for, and withdraws that when it ends; a wait that times out blames the
// rank the monitor finds. A closed or reset connection is called a process exit only when the
// process is seen gone (kernel_view.h).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/tcp_uring/device.h"
#include "transport/tcp_uring/frame.h"

namespace ringfold::transport::tcp_uring {

class UringLoop;
class PeerLink;
struct RequestState;

enum class ZeroCopyMode { kOff, kOn, kAuto };

// Settings read once from the environment when the device is created.
struct Tuning {
  ZeroCopyMode zeroCopy = ZeroCopyMode::kAuto;
  size_t zeroCopyMinBytes = 64 << 10;
  size_t stripeMinBytes = 256 << 10;
  size_t stripeChunkBytes = 1 << 20;
  std::chrono::microseconds spin{50};
  std::chrono::milliseconds timeout{300000};
  uint64_t socketBufferBytes = 0;
  int socketsPerPeer = 0;  // 0: auto (autoSocketsPerPeer)
  static Tuning fromEnvironment();
};

class DeviceState final : private liveness::Links {
 public:
  explicit DeviceState(const Options& options);  // creates the ring; throws Error if io_uring is unavailable
  ~DeviceState() override;
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  // Connects to the peers spec.peers selects (all when empty; see mesh.h); returns links
  // indexed by rank (null at `rank`, at peers not selected, and at Unix peers unreachable).
  std::vector<PeerLink*> connect(const ConnectSpec& spec);
  // connect() without the store and mesh: `sockets[p]` are already connected (and checked) to
  // rank p of a `sockets.size()`-rank group; defined in pair.cc (pair.h).
  std::vector<PeerLink*> adopt(int rank, std::vector<std::vector<Socket>> sockets);

  int rank() const { return rank_; }
  const Options& options() const { return options_; }
  const Tuning& tuning() const { return tuning_; }
  UringLoop& uring() { return *uring_; }
  BufferPool& buffers() { return buffers_; }
  ObjectPool<OutFrame>& frames() { return frames_; }
  ObjectPool<Inbound>& inbounds() { return inbounds_; }
  liveness::Monitor& monitor() { return *monitor_; }
  const std::shared_ptr<liveness::Monitor>& sharedMonitor() const { return monitor_.shared(); }
  // Use `monitor` (shared with the other backend devices of a composite) instead of this
  // device's own; before connect().
  void shareMonitor(std::shared_ptr<liveness::Monitor> monitor);

  // Submits queued ops, handles every ready completion, and submits again what the handlers
  // queued if any of it is urgent (see markUrgent); never blocks. Returns how many completions.
  unsigned progress();
  // The ops queued now must reach the kernel before progress() returns (sends, receives of a
  // stream in the middle of a message). Others wait for the next submit.
  void markUrgent() { urgent_ = true; }
  // Drives progress until `request` completes; throws IoError naming its peer after `timeout`.
  void wait(RequestState& request, std::chrono::milliseconds timeout);

  bool poisoned() const { return poison_ != nullptr; }
  const std::exception_ptr& poisonError() const { return poison_; }
  // Called from wait() between blocking slices of at most 200 us while set.
  void setWaitHook(std::function<void()> hook) { hook_ = std::move(hook); }
  bool aborted() const { return monitor_->aborted(*this); }
  // Records the first failure; callable from inside completion handlers (it only queues
  // cancellations). Later calls are ignored.
  void poison(std::exception_ptr error) noexcept;
  void poisonIo(int peer, const std::string& what) noexcept;
  // Cancels and drains in-flight ops (bounded), then drops every pointer to a request.
  void settle() noexcept;
  // settle() and rethrow the poison error.
  [[noreturn]] void throwPoison();
  // A pending request is being destroyed: poison (unless already) and settle.
  void abandon(RequestState& request) noexcept;

  void abort(ErrorKind kind, const std::string& message);
  void onPeerAbort(int peer, ErrorKind kind, const std::string& message) noexcept;
  // Closes everything; later calls throw "device was destroyed".
  void shutdown() noexcept;

 private:
  void dispatch(uint64_t userData, int res, uint32_t flags);
  bool anyBusy() const;
  bool drainUntilIdle(std::chrono::milliseconds budget, bool (DeviceState::*idle)() const);
  bool abortsSent() const;
  bool idle() const { return !anyBusy(); }
  bool idleWithNotifications() const;
  void withdrawNotice();
  // liveness::Links, for monitor_.
  void sendNotice(int peer, const liveness::Notice& notice) override;
  void sendAbort(int peer, ErrorKind kind, const std::string& text) override;
  liveness::Unacknowledged unacknowledged(int peer) const override;
  int pid(int peer) const override;

  Options options_;
  Tuning tuning_;
  std::unique_ptr<UringLoop> uring_;
  BufferPool buffers_;
  ObjectPool<OutFrame> frames_;
  ObjectPool<Inbound> inbounds_;
  std::vector<std::unique_ptr<PeerLink>> peers_;
  struct SocketRef {
    PeerLink* peer;
    uint32_t index;
  };
  std::vector<SocketRef> sockets_;  // by device-wide socket id
  int rank_ = -1;
  bool connected_ = false;
  std::exception_ptr poison_;
  bool settled_ = false;
  bool closed_ = false;
  bool urgent_ = false;
  std::function<void()> hook_;
  liveness::MonitorSlot monitor_;
};

}  // namespace ringfold::transport::tcp_uring
