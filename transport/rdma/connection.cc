// RdmaConnection and RdmaRequest of the rdma backend (connection.h).
#include "transport/rdma/connection.h"

#include "common/error.h"
#include "transport/liveness/wait.h"
#include "transport/rdma/device_state.h"
#include "transport/rdma/memory_region.h"
#include "transport/rdma/peer.h"

namespace ringfold::transport::rdma {

RdmaRequest::~RdmaRequest() {
  if (!state_.done && state_.posted) device_->abandon(state_);
  if (state_.owned != nullptr && device_->cache() != nullptr) device_->cache()->release(state_.owned);
}

bool RdmaRequest::test() { return liveness::testFor(*device_, state_.done); }

void RdmaRequest::wait(std::chrono::milliseconds timeout) { device_->wait(state_, timeout); }

void prepareRequest(DeviceState& device, Peer* peer, RequestState& r, bool isSend, std::byte* data, size_t length,
                    uint64_t tag, uint64_t check, RegistrationCache::Entry* own) {
  r.isSend = isSend;
  r.peer = peer;
  r.data = data;
  r.length = length;
  r.tag = tag;
  r.check = check;
  const bool needed = isSend ? peer->sendNeedsRegistration(length) : peer->recvNeedsRegistration(length);
  if (!needed || length == 0) return;
  if (own != nullptr) {
    r.entry = own;
    r.reg = &own->registration();
  }
  device.registerFor(r);
}

std::unique_ptr<RdmaRequest> RdmaConnection::start(const transport::MemoryRegion& region, size_t offset, size_t length,
                                                   uint64_t tag, uint64_t check, bool isSend) {
  checkRange(region, offset, length, isSend ? "isend" : "irecv");
  if (device_->poisoned()) device_->throwPoison();
  auto req = std::make_unique<RdmaRequest>(device_);
  // The region's own registration when it is one of this device's, else one for these bytes.
  RegistrationCache::Entry* own = nullptr;
  auto* mine = dynamic_cast<const rdma::MemoryRegion*>(&region);
  if (mine != nullptr && mine->belongsTo(*device_)) own = mine->entry();
  prepareRequest(*device_, peer_, req->state(), isSend, static_cast<std::byte*>(region.data()) + offset, length, tag,
                 check, own);
  return req;
}

std::unique_ptr<Request> RdmaConnection::isend(const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                               uint64_t check) {
  auto req = start(region, offset, length, tag, check, true);
  peer_->postSend(req->state());
  if (device_->poisoned()) device_->throwPoison();
  return req;
}

std::unique_ptr<Request> RdmaConnection::irecv(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                               uint64_t check) {
  auto req = start(region, offset, length, tag, check, false);
  peer_->postRecv(req->state());
  if (device_->poisoned()) device_->throwPoison();
  return req;
}

}  // namespace ringfold::transport::rdma
