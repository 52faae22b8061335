#include "transport/tcp_uring/kernel_view.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace ringfold::transport::tcp_uring {

bool hostUnreachable(int res) {
  return res == -ETIMEDOUT || res == -EHOSTUNREACH || res == -ENETUNREACH || res == -ENETDOWN || res == -EHOSTDOWN;
}

std::string connectionDownText(int rank, int res, bool midFrame, uint32_t socket, size_t sockets, int pid,
                               bool ownLinkDown) {
  const char* what = res == 0 ? "closed" : (res == -ECONNRESET ? "reset" : "failed");
  std::string text = detail::concat("connection to rank ", rank, " ", what,
                                    res < 0 ? detail::concat(" (", std::strerror(-res), ")") : std::string(),
                                    midFrame ? " in the middle of a message" : "", " (socket ", socket, " of ",
                                    sockets, ")");
  const std::string process = pid > 0 ? detail::concat("the process of rank ", rank, " (pid ", pid, ")")
                                      : detail::concat("the process of rank ", rank);
  if (hostUnreachable(res)) {
    // The kernel gave up on the connection itself: nothing came back from the peer's host.
    const ProcessState s = processState(pid);
    return text + detail::concat(": rank ", rank, "'s host stopped acknowledging this rank's data: ",
                                 ownLinkDown ? "no other rank's host acknowledges it either, so this rank's own "
                                               "network link is likely down"
                                             : "the network between them failed, or that host is down",
                                 s == ProcessState::kRunning || s == ProcessState::kStopped
                                     ? detail::concat(" (", process, " is still running)")
                                     : std::string());
  }
  switch (processState(pid, std::chrono::milliseconds(500))) {
    case ProcessState::kExited:
      return text + ": " + process + " exited";
    case ProcessState::kRunning:
    case ProcessState::kStopped:
      return text + ": " + process + " is still running, so " +
             (res == 0 ? "it closed its connections (shut ringfold down), or something between them closed this one"
                       : "something between them cut the connection (a firewall, a proxy, a network failure)");
    case ProcessState::kUnknown:
      break;
  }
  return text + ": " + process + " exited, or the link to it failed";
}

TcpSilence tcpSilence(int fd) {
  TcpSilence out;
  tcp_info info{};
  socklen_t len = sizeof(info);
  int domain = 0;
  socklen_t dlen = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0 || domain == AF_UNIX) return out;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return out;
  out.tracked = true;
  // Sent and being retransmitted: the peer's host (or the way to it) does not answer.
  const bool inFlight = info.tcpi_unacked > 0 && (info.tcpi_retransmits > 0 || info.tcpi_backoff > 0);
  // Never sent: with this host's own link down (no route) the kernel keeps the bytes queued,
  // nothing in flight, and retries them with window probes that fail here. A live peer's kernel
  // answers every probe (a zero window: a stopped process), which resets the count, so two
  // probes without an answer mean that nothing answers. (Found by the fault matrix's link-down
  // cells: a cut-off rank that only waited had only such bytes, its WAITING notices.)
  int queued = 0;
  const bool unsent =
      info.tcpi_unacked == 0 && info.tcpi_probes >= 2 && ioctl(fd, TIOCOUTQ, &queued) == 0 && queued > 0;
  out.unacknowledged = inFlight || unsent;
  out.unsent = unsent;
  out.retransmits = inFlight ? info.tcpi_retransmits : (unsent ? info.tcpi_probes : 0);
  out.sinceAckMs = info.tcpi_last_ack_recv;
  return out;
}

}  // namespace ringfold::transport::tcp_uring
