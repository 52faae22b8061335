// ShmConnection and ShmRequest of the shm backend (connection.h).
#include "transport/shm/connection.h"

#include "common/error.h"
#include "transport/liveness/wait.h"
#include "transport/shm/device_state.h"

namespace ringfold::transport::shm {

ShmRequest::~ShmRequest() {
  if (!state_.done && state_.posted) device_->abandon(state_);
}

bool ShmRequest::test() { return liveness::testFor(*device_, state_.done); }

void ShmRequest::wait(std::chrono::milliseconds timeout) { device_->wait(state_, timeout); }

std::unique_ptr<ShmRequest> ShmConnection::start(const transport::MemoryRegion& region, size_t offset, size_t length,
                                                 uint64_t tag, uint64_t check, bool isSend) {
  checkRange(region, offset, length, isSend ? "isend" : "irecv");
  if (device_->poisoned()) device_->throwPoison();
  auto req = std::make_unique<ShmRequest>(device_);
  RequestState& r = req->state();
  r.isSend = isSend;
  r.peer = peer_;
  r.data = static_cast<std::byte*>(region.data()) + offset;
  r.length = length;
  r.tag = tag;
  r.check = check;
  return req;
}

std::unique_ptr<Request> ShmConnection::isend(const transport::MemoryRegion& region, size_t offset, size_t length,
                                              uint64_t tag, uint64_t check) {
  auto req = start(region, offset, length, tag, check, true);
  peer_->postSend(req->state());
  if (device_->poisoned() && !req->state().done) device_->throwPoison();
  return req;
}

std::unique_ptr<Request> ShmConnection::irecv(transport::MemoryRegion& region, size_t offset, size_t length,
                                              uint64_t tag, uint64_t check) {
  auto req = start(region, offset, length, tag, check, false);
  peer_->postRecv(req->state());
  if (device_->poisoned() && !req->state().done) device_->throwPoison();
  return req;
}

}  // namespace ringfold::transport::shm
