// TcpConnection and TcpRequest: the tcp_uring Connection and Request (transport/connection.h).
//
// Contract: isend/irecv check the range, fail at once on a poisoned device, and hand the request
// to the peer's PeerLink (peer_link.h), which owns the protocol; TcpRequest::test drives a few
// rounds of progress without blocking, wait() blocks in DeviceState::wait. A request destroyed
// while pending poisons the device (its memory may still be in use by the kernel) and settles.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/connection.h"

namespace ringfold::transport::tcp_uring {

class DeviceState;
class PeerLink;

// The state of one isend/irecv, owned by its TcpRequest; the device state keeps raw pointers to it
// only while it is pending (poisoning drops them all).
struct RequestState {
  bool isSend = false;
  PeerLink* peer = nullptr;
  std::byte* data = nullptr;
  size_t length = 0;
  uint64_t tag = 0, check = 0;
  size_t pendingFrames = 0;   // send: frames not yet released
  bool done = false;
  // Receive only: accept any message of at most `length` bytes (same tag and check); once
  // matched, `length` is the message's size. Off: the sizes must be equal (CheckMismatch).
  bool upTo = false;
};

class TcpRequest final : public Request {
 public:
  TcpRequest(std::shared_ptr<DeviceState> device) : device_(std::move(device)) {}
  ~TcpRequest() override;
  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  RequestState& state() { return state_; }

 private:
  std::shared_ptr<DeviceState> device_;
  RequestState state_;
};

class TcpConnection final : public Connection {
 public:
  TcpConnection(std::shared_ptr<DeviceState> device, PeerLink* link, int peerRank)
      : device_(std::move(device)), link_(link), peerRank_(peerRank) {}
  int peerRank() const override { return peerRank_; }
  std::unique_ptr<Request> isend(const MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;
  std::unique_ptr<Request> irecv(MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;

 private:
  // A request for `length` bytes at `offset` of `region`, checked and filled in, not yet posted.
  std::unique_ptr<TcpRequest> start(const MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                    uint64_t check, bool isSend);

  std::shared_ptr<DeviceState> device_;
  PeerLink* link_;
  int peerRank_;
};

}  // namespace ringfold::transport::tcp_uring
