// PairLink: one tcp_uring link to one peer over sockets the caller connected itself, without the
// store and the start-up mesh (mesh.h). For callers that set connections up their own way, such
// as the NCCL net plugin (bindings/nccl_net), whose listen handles carry an address and a secret.
//
// Contract: the constructor takes sockets already connected to the peer and already checked to
// be the right peer (the caller's handshake), in blocking mode with no bytes of tcp_uring's
// stream read yet, and this end's rank in the pair (0 or 1; the peer is the other). Everything
// after that is tcp_uring's own data path, unchanged: frames striped over the sockets, one
// io_uring, zero-copy sends where they pay, unexpected messages buffered, matching in message
// order by tag (FIFO per tag), and the first failure poisoning the link (device_state.h).
// Receives may be larger than their message (irecv: `capacity`); the request's state().length
// is the message's size once it completes. Requests are TcpRequests: test() drives progress
// without blocking and throws the link's error (IoError naming the peer, CheckMismatch when a
// message is larger than its receive). Not thread-safe, like a Device: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/tcp_uring/connection.h"
#include "transport/tcp_uring/socket.h"

namespace ringfold::transport::tcp_uring {

class DeviceState;
class PeerLink;

class PairLink {
 public:
  // Throws Error if io_uring cannot be used here, InvalidArgument on bad sockets or rank.
  PairLink(std::vector<Socket> sockets, int rank);
  // Shuts the link down: pending requests fail with "device was destroyed"; sockets close.
  ~PairLink();
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  // `length` bytes at `data`, which must stay valid until the request completes or fails.
  std::unique_ptr<TcpRequest> isend(const void* data, size_t length, uint64_t tag);
  // A message with `tag` of at most `capacity` bytes into `data`.
  std::unique_ptr<TcpRequest> irecv(void* data, size_t capacity, uint64_t tag);
  // One round of progress (submits queued ops, handles completions); never blocks or throws.
  void progress();
  // Whether the link has failed, and its error (null if not).
  bool failed() const;
  std::exception_ptr error() const;
  size_t socketCount() const;

 private:
  std::unique_ptr<TcpRequest> start(void* data, size_t length, uint64_t tag, bool isSend, bool upTo);
  std::shared_ptr<DeviceState> state_;
  PeerLink* link_ = nullptr;
};

}  // namespace ringfold::transport::tcp_uring
