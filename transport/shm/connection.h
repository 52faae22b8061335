// ShmConnection and ShmRequest: the shm Connection and Request (transport/connection.h).
//
// Contract: isend/irecv check the range, fail at once on a poisoned device, and hand the request
// to its Peer (peer.h), which owns the protocol. ShmRequest::test drives progress without
// blocking; wait() blocks in DeviceState::wait; deliver() (a lazy receive) hands what is already
// in the receive's memory to the sink, then lets the peer stream the rest of the message from
// the ring into it while it waits. A request destroyed while pending poisons the
// device (a peer may still read its buffer), after aborting it if it was a send under way.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/connection.h"
#include "transport/shm/peer.h"

namespace ringfold::transport::shm {

class DeviceState;

class ShmRequest final : public Request {
 public:
  explicit ShmRequest(std::shared_ptr<DeviceState> device) : device_(std::move(device)) {}
  ~ShmRequest() override;
  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  bool deliver(Sink& sink, std::chrono::milliseconds timeout) override;
  RequestState& state() { return state_; }

 private:
  std::shared_ptr<DeviceState> device_;
  RequestState state_;
};

class ShmConnection final : public Connection {
 public:
  ShmConnection(std::shared_ptr<DeviceState> device, Peer* peer)
      : device_(std::move(device)), peer_(peer) {}
  int peerRank() const override { return peer_->rank(); }
  std::unique_ptr<Request> isend(const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;
  std::unique_ptr<Request> irecv(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;
  std::unique_ptr<Request> irecvLazy(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                     uint64_t check) override;

 private:
  std::unique_ptr<ShmRequest> start(const transport::MemoryRegion& region, size_t offset, size_t length,
                                    uint64_t tag, uint64_t check, bool isSend);
  std::unique_ptr<Request> receive(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                   uint64_t check, bool lazy);
  std::shared_ptr<DeviceState> device_;
  Peer* peer_;
};

}  // namespace ringfold::transport::shm
