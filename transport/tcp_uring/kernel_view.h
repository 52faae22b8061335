// What a tcp_uring rank can find out about a peer that failed it, so that an error names what
// happened instead of guessing: a closed or reset connection is a process exit only when the
// process is gone; silence with data the peer's host never acknowledged is a network (or host)
// failure, not a stopped process, whose kernel still acknowledges.
//
// TCP's part of the kernel's view (liveness::Links::unacknowledged, the text of a connection
// that went down); the process lookup is backend-independent (liveness/process.h). Everything
// here is best effort and never throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/liveness/process.h"

namespace ringfold::transport::tcp_uring {

using liveness::ProcessState;
using liveness::processState;

// The error text for a connection to `rank` that went down: `res` is the failed receive's result
// (0: closed, -errno), `pid` the peer's (0: unknown). Names what is known: the process exited,
// is still running (then the link or something between was cut), or which of the two it may be.
// `ownLinkDown`: no other peer's host acknowledges this rank either (said when the kernel gave up).
std::string connectionDownText(int rank, int res, bool midFrame, uint32_t socket, size_t sockets, int pid,
                               bool ownLinkDown = false);
// Whether the kernel gave up on a connection with this receive result (no answer from the host).
bool hostUnreachable(int res);

// TCP_INFO of a connected TCP socket: data not acknowledged and being retransmitted, or queued
// and never sent (this host's link is down) while window probes go unanswered.
struct TcpSilence {
  bool tracked = false;  // a TCP socket whose TCP_INFO was read (false: Unix socket, error)
  bool unacknowledged = false;
  bool unsent = false;       // unacknowledged: queued, none of it ever left this host
  unsigned retransmits = 0;  // retransmissions, or probes for data never sent
  uint32_t sinceAckMs = 0;   // since the peer's host last acknowledged anything
};
TcpSilence tcpSilence(int fd);

}  // namespace ringfold::transport::tcp_uring
