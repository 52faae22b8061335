// TcpConnection and TcpRequest of the tcp_uring backend (connection.h).
#include "transport/tcp_uring/connection.h"

#include "common/error.h"
#include "transport/liveness/wait.h"
#include "transport/tcp_uring/device_state.h"
#include "transport/tcp_uring/peer_link.h"
#include "transport/tcp_uring/uring_loop.h"

namespace ringfold::transport::tcp_uring {


TcpRequest::~TcpRequest() {
  if (!state_.done && state_.peer != nullptr) device_->abandon(state_);
}

bool TcpRequest::test() { return liveness::testFor(*device_, state_.done); }

void TcpRequest::wait(std::chrono::milliseconds timeout) { device_->wait(state_, timeout); }

std::unique_ptr<TcpRequest> TcpConnection::start(const MemoryRegion& region, size_t offset, size_t length,
                                                 uint64_t tag, uint64_t check, bool isSend) {
  checkRange(region, offset, length, isSend ? "isend" : "irecv");
  if (device_->poisoned()) device_->throwPoison();
  auto req = std::make_unique<TcpRequest>(device_);
  RequestState& r = req->state();
  r.isSend = isSend;
  r.peer = link_;
  r.data = static_cast<std::byte*>(region.data()) + offset;
  r.length = length;
  r.tag = tag;
  r.check = check;
  return req;
}

std::unique_ptr<Request> TcpConnection::isend(const MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                              uint64_t check) {
  auto req = start(region, offset, length, tag, check, true);
  link_->postSend(req->state());
  if (device_->poisoned()) device_->throwPoison();
  device_->uring().submit();
  return req;
}

std::unique_ptr<Request> TcpConnection::irecv(MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                              uint64_t check) {
  auto req = start(region, offset, length, tag, check, false);
  link_->postRecv(req->state());
  if (device_->poisoned()) device_->throwPoison();
  return req;
}

}  // namespace ringfold::transport::tcp_uring
