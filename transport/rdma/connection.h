// RdmaConnection and RdmaRequest: the rdma Connection and Request (transport/connection.h).
//
// Contract: isend/irecv check the range, fail at once on a poisoned device, find the
// registration the request needs (protocol.h: rendezvous, eager sends without a copy) and hand
// the request to its Peer (peer.h), which owns the protocol. RdmaRequest::test drives progress
// without blocking; wait() blocks in DeviceState::wait. A request destroyed while pending poisons
// the device (a peer may still write into its memory) and settles.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/connection.h"
#include "transport/rdma/registration_cache.h"

namespace ringfold::transport::rdma {

class DeviceState;
class Peer;

// The state of one isend/irecv, owned by its RdmaRequest; the peer keeps raw pointers to it only
// while it is pending (poisoning drops them all).
struct RequestState {
  bool isSend = false;
  Peer* peer = nullptr;
  std::byte* data = nullptr;
  size_t length = 0;
  uint64_t tag = 0, check = 0;
  // A receive that takes a message of at most `length` bytes (PairLink's irecv); `length`
  // becomes the message's once it is matched.
  bool upTo = false;
  // A registration covering [data, data + length), when the request needs one: the region's
  // own, or `owned`, acquired for this request and released when it ends.
  const Registration* reg = nullptr;
  RegistrationCache::Entry* entry = nullptr;  // where `reg` lives
  RegistrationCache::Entry* owned = nullptr;
  uint32_t pending = 0;  // send: writes not yet completed
  bool posted = false;
  bool done = false;
};

// Fills `r` for a request of [data, data + length) with `peer`, and finds the registration the
// protocol needs for it (protocol.h: rendezvous, eager sends without a copy): `own`, a region's
// registration covering the bytes, or one from the device's cache. Throws what registering throws.
void prepareRequest(DeviceState& device, Peer* peer, RequestState& r, bool isSend, std::byte* data, size_t length,
                    uint64_t tag, uint64_t check, RegistrationCache::Entry* own);

class RdmaRequest final : public Request {
 public:
  explicit RdmaRequest(std::shared_ptr<DeviceState> device) : device_(std::move(device)) {}
  ~RdmaRequest() override;
  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  RequestState& state() { return state_; }

 private:
  std::shared_ptr<DeviceState> device_;
  RequestState state_;
};

class RdmaConnection final : public Connection {
 public:
  RdmaConnection(std::shared_ptr<DeviceState> device, Peer* peer, int peerRank)
      : device_(std::move(device)), peer_(peer), peerRank_(peerRank) {}
  int peerRank() const override { return peerRank_; }
  std::unique_ptr<Request> isend(const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;
  std::unique_ptr<Request> irecv(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override;

 private:
  std::unique_ptr<RdmaRequest> start(const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                     uint64_t check, bool isSend);

  std::shared_ptr<DeviceState> device_;
  Peer* peer_;
  int peerRank_;
};

}  // namespace ringfold::transport::rdma
