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

bool ShmRequest::deliver(Sink& sink, std::chrono::milliseconds timeout) {
  RequestState& r = state_;
  if (r.isSend) return false;
  // What an unpark, an unexpected buffer or a cross-memory read already stored goes first.
  const size_t stored = r.offset;
  if (stored > 0) sink.take(0, r.data, stored);
  if (r.done) return true;
  r.sink = &sink;
  r.sunk = 0;
  try {
    device_->wait(r, timeout);
  } catch (...) {
    r.sink = nullptr;
    throw;
  }
  r.sink = nullptr;
  // The rest came through the ring into the sink, or (a request to send read by cross-memory
  // attach) into the receive's memory.
  const size_t given = stored + r.sunk;
  if (given < r.length) sink.take(given, r.data + given, r.length - given);
  return true;
}

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
  return receive(region, offset, length, tag, check, false);
}

std::unique_ptr<Request> ShmConnection::irecvLazy(transport::MemoryRegion& region, size_t offset, size_t length,
                                                  uint64_t tag, uint64_t check) {
  return receive(region, offset, length, tag, check, true);
}

std::unique_ptr<Request> ShmConnection::receive(transport::MemoryRegion& region, size_t offset, size_t length,
                                                uint64_t tag, uint64_t check, bool lazy) {
  auto req = start(region, offset, length, tag, check, false);
  req->state().lazy = lazy;
  peer_->postRecv(req->state());
  if (device_->poisoned() && !req->state().done) device_->throwPoison();
  return req;
}

}  // namespace ringfold::transport::shm
