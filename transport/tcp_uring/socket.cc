#include "transport/tcp_uring/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/error.h"

namespace ringfold::transport::tcp_uring {

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool isUnixSocket(int fd) {
  int domain = 0;
  socklen_t len = sizeof(domain);
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

// ---- socket options ---------------------------------------------------------------------

uint64_t loopbackTcpBufferBytes(uint64_t rmemMax, uint64_t wmemMax) {
  return rmemMax >= kLoopbackTcpBufferBytes && wmemMax >= kLoopbackTcpBufferBytes ? kLoopbackTcpBufferBytes : 0;
}

namespace {

uint64_t sysctlBytes(const char* path) {
  uint64_t v = 0;
  std::ifstream in(path);
  in >> v;
  return v;
}

bool peerIsLoopback(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

void setDataSocketOptions(int fd, std::chrono::milliseconds timeout, uint64_t bufferBytes) {
  // A Unix stream's send buffer bounds what is queued at the receiver (its receive buffer is not
  // used), and the default (net.core.wmem_default, 208 KiB) makes the sender wait several times
  // per 512 KiB segment. TCP autotunes both unless told a size, except over loopback (see
  // loopbackTcpBufferBytes).
  const bool unixSocket = isUnixSocket(fd);
  uint64_t want = bufferBytes;
  if (want == 0 && unixSocket) want = kUnixSendBufferBytes;
  if (want == 0 && peerIsLoopback(fd)) {
    want = loopbackTcpBufferBytes(sysctlBytes("/proc/sys/net/core/rmem_max"), sysctlBytes("/proc/sys/net/core/wmem_max"));
  }
  if (want > 0) {
    int b = static_cast<int>(std::min<uint64_t>(want, 1u << 30));
    RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b)), "SO_SNDBUF");
    if (!unixSocket) RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b)), "SO_RCVBUF");
  }
  if (unixSocket) return;
  int one = 1;
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "TCP_NODELAY");
  long long ms = std::max<long long>(timeout.count(), 1000);
  unsigned userTimeout = static_cast<unsigned>(std::min<long long>(ms, 0x7fffffff));
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, sizeof(userTimeout)),
                 "TCP_USER_TIMEOUT");
  int idle = static_cast<int>(std::clamp<long long>(ms / 2000, 1, 32767));
  int interval = static_cast<int>(std::clamp<long long>(ms / 6000, 1, 32767));
  int count = 3;
  RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), "SO_KEEPALIVE");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)), "TCP_KEEPIDLE");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)), "TCP_KEEPINTVL");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)), "TCP_KEEPCNT");
}

}  // namespace ringfold::transport::tcp_uring
