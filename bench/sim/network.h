// Network: the links of the simulated job and when a message's bytes leave and arrive.
//
// Ranks sit on hosts of `perHost` consecutive ranks (the last host may hold fewer).
//   * Same host: each rank has one outgoing local link; its messages are serialized on it in
//     the order they are posted (bytes x beta_local), then take alpha_local to arrive. (A copy
//     into shared memory, or a Unix socket: the sender's work, independent of the receiver's.)
//   * Other host: each host has one NIC, an egress and an ingress queue, each shared by the
//     host's ranks and serving whole messages in FIFO order at 1/beta_remote bytes/s. A message
//     is serialized on the sender host's egress (start: when it is posted or the egress frees),
//     its first byte reaches the receiving host alpha_remote after it started, and the ingress
//     serves it from then (or once it frees), finishing no earlier than the last byte arrives
//     (egress end + alpha_remote): cut through. Why cut through rather than store and forward:
//     a NIC and a switch forward packets, not messages, so one message of S bytes takes
//     alpha + S beta end to end (not alpha + 2 S beta), and a stream of segments keeps both
//     queues busy at once: each hop of a ring pipelines. Why FIFO per message rather than fair
//     sharing: schedules send segments of at most a few hundred KiB, so whole-message FIFO is
//     close to packet interleaving over a few segments and keeps one number per queue; its error
//     is the latency of a small message queued behind a large one (over-stated here). The
//     switch has no limit on buffering, so an ingress that falls behind never slows an egress
//     (no congestion control, no incast loss).
//   * A send is complete (Flight's retire, gates, the send window) when its last byte has left
//     the sender: the local link's copy, or the NIC egress. As with TCP's socket buffers, the
//     sender does not wait for the receiver to take the data.
//
// Contract: post() is called in non-decreasing simulated time (the event loop's order), so
// each queue sees its messages in time order; ingress() is called at the time post() returned
// as the first byte's arrival, again in time order.
#pragma once

#include <cstddef>
#include <vector>

#include "bench/sim/link_model.h"

namespace ringfold::sim {

class Network {
 public:
  Network(const LinkModel& model, int ranks, int perHost);

  int host(int rank) const { return rank / perHost_; }
  bool sameHost(int a, int b) const { return host(a) == host(b); }

  struct Posted {
    double sendDone = 0;   // last byte left the sender (the send is complete)
    double arrival = -1;   // same host: the message has arrived; -1: remote, see firstByte
    double firstByte = 0;  // remote: when the first byte reaches the receiving host's ingress
    double lastByte = 0;   // remote: when the last byte reaches it
  };
  // A message of `bytes` from rank `from` to rank `to`, posted at time `now`.
  Posted post(double now, int from, int to, size_t bytes);
  // The remote message whose first byte reaches host(to)'s ingress now (Posted::firstByte):
  // returns when it has fully arrived.
  double ingress(double now, int to, size_t bytes, double lastByte);

 private:
  LinkModel m_;
  int perHost_;
  std::vector<double> localFree_;    // per rank: its local link is free from then
  std::vector<double> egressFree_;   // per host
  std::vector<double> ingressFree_;  // per host
};

}  // namespace ringfold::sim
