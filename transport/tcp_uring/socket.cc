#include "transport/tcp_uring/socket.h"

#include "rendezvous/bootstrap.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"

namespace ringfold::transport::tcp_uring {

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---- interface selection --------------------------------------------------------------

std::vector<Interface> listInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    Interface itf;
    itf.name = i->ifa_name;
    itf.address = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if (i->ifa_netmask != nullptr) {
      itf.netmask = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    }
    itf.up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
    itf.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

bool ifnameSelected(const std::string& specIn, const std::string& name) {
  std::string spec = specIn;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool matched = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : name.compare(0, item.size(), item) == 0) matched = true;
  }
  return exclude ? !matched : matched;
}

namespace {

std::string dotted(uint32_t hostOrder) {
  in_addr a{htonl(hostOrder)};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

bool isLoopback(uint32_t hostOrder) { return (hostOrder >> 24) == 127; }

}  // namespace

int autoSocketsPerPeer(const std::string& listenAddress) {
  in_addr a{};
  if (inet_pton(AF_INET, listenAddress.c_str(), &a) == 1 && isLoopback(ntohl(a.s_addr))) return 1;
  return 2;
}

std::string chooseListenAddress(const std::string& spec, uint32_t storeAddress,
                                const std::vector<Interface>& interfaces) {
  if (!spec.empty()) {
    for (const Interface& i : interfaces) {
      if (i.up && ifnameSelected(spec, i.name)) return dotted(i.address);
    }
    std::string names;
    for (const Interface& i : interfaces) names += (names.empty() ? "" : ", ") + i.name + (i.up ? "" : " (down)");
    RF_THROW(InvalidArgument, params::kSocketIfname.name, "='", spec,
             "' selects no IPv4 interface that is up; this host has: ", names);
  }
  if (storeAddress == 0 || isLoopback(storeAddress)) return "127.0.0.1";
  for (const Interface& i : interfaces) {
    if (i.up && !i.loopback && i.netmask != 0 && (i.address & i.netmask) == (storeAddress & i.netmask)) {
      return dotted(i.address);
    }
  }
  for (const Interface& i : interfaces) {
    if (i.up && !i.loopback) return dotted(i.address);
  }
  return "127.0.0.1";
}

std::string listenAddressFromEnvironment() {
  uint32_t store = 0;
  std::string host = params::kStoreAddr.str();
  if (host.empty()) {
    // The store host the bootstrap derives (e.g. Slurm's first node): listen on the interface
    // that reaches it, not on loopback.
    try {
      host = rendezvous::bootstrapFromEnvironment().storeAddr;
    } catch (const Error&) {
      host.clear();  // a bad environment is reported by the bootstrap itself
    }
  }
  if (!host.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
      store = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
      freeaddrinfo(res);
    } else {
      RF_LOG(kWarning) << params::kStoreAddr.name << "='" << host
                       << "' does not resolve to IPv4; choosing the first interface that is up";
      store = 0xffffffffu;  // not loopback, matches no subnet
    }
  }
  return chooseListenAddress(params::kSocketIfname.str(), store, listInterfaces());
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
