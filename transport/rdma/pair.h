// PairLink: one rdma link to one peer, set up over a socket the caller connected itself instead
// of the store: the rdma counterpart of tcp_uring's PairLink (transport/tcp_uring/pair.h), for
// the NCCL net plugin (bindings/nccl_net), whose connections come from NCCL's listen/connect.
//
// Contract
//   * The constructor takes a connected stream socket to the peer, already checked to be the
//     right peer (the caller's handshake), with nothing of this link read from it yet, and this
//     end's rank in the pair (0 or 1). It opens a fabric for (rank, 2) (Options, else
//     RINGFOLD_RDMA_FABRIC) and never blocks: poll() carries the start-up (protocol.h: each
//     end's blob, then "ready", then the hellos over the fabric) and returns true once the link
//     is up. It throws Error when the fabric cannot run here, IoError when the peer closes the
//     socket or does not finish within `timeout`, Error on a blob it cannot use.
//   * Once up: the data path of the rdma backend, unchanged (eager slots, rendezvous, bounces,
//     matching FIFO per tag). Receives may be larger than their message (irecv: `capacity`;
//     the request's state().length is the message's size once it completes); a message larger
//     than its receive fails with CheckMismatch, as over TCP.
//   * The socket stays open for the link's life and is its peer's heartbeat: when the peer
//     closes it (exit, crash, kill), the link fails with IoError naming the peer kClosedGrace
//     later (writes that landed before the close are still delivered meanwhile). A peer that
//     is alive but frozen is not detected here (the caller's timeout is: NCCL's own).
//   * Requests are RdmaRequests: test() drives progress without blocking and throws the link's
//     error. Not thread-safe: one thread at a time, as a Device.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "transport/rdma/connection.h"
#include "transport/rdma/device.h"

namespace ringfold::transport::rdma {

class DeviceState;
class Peer;

class PairLink {
 public:
  // How long the link waits, after the peer closed its socket, for what the peer wrote before.
  static constexpr std::chrono::milliseconds kClosedGrace{500};

  // `fd` stays the caller's (it closes it after this link is destroyed).
  PairLink(int fd, int rank, std::chrono::milliseconds timeout, const Options& options = {});
  // Shuts the link down without waiting on the peer: pending requests fail.
  ~PairLink();
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  // Drives the start-up; true once the link is up (then a no-op). Throws as the contract says.
  bool poll();
  bool up() const { return stage_ == Stage::kUp; }

  // `length` bytes at `data`, which must stay valid until the request completes or fails.
  std::unique_ptr<RdmaRequest> isend(const void* data, size_t length, uint64_t tag);
  // A message with `tag` of at most `capacity` bytes into `data`.
  std::unique_ptr<RdmaRequest> irecv(void* data, size_t capacity, uint64_t tag);
  // One round of progress, and the heartbeat; never blocks or throws.
  void progress();
  // The heartbeat alone (for a caller whose requests' test() drives progress).
  void heartbeat();
  bool failed() const;
  std::exception_ptr error() const;
  // "ofi tcp;ofi_rxm on lo" (the fabric in use).
  std::string describe() const;
  Stats stats() const;

 private:
  enum class Stage { kAddress, kReady, kHello, kUp };
  std::unique_ptr<RdmaRequest> start(void* data, size_t length, uint64_t tag, bool isSend);
  void queue(const std::string& frame);
  bool pump();                 // sends what is queued, reads what arrived; false: the peer closed
  bool nextFrame(std::string& frame);

  std::shared_ptr<DeviceState> state_;
  int fd_;
  int rank_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  Stage stage_ = Stage::kAddress;
  std::string out_, in_;
  std::chrono::steady_clock::time_point closedAt_{}, lastWatch_{};
  bool closed_ = false;
};

}  // namespace ringfold::transport::rdma
