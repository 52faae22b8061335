#include "launcher/store_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/usage_error.h"

namespace ringfold::launcher {

std::optional<std::string> interfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name ||
        (a->ifa_flags & IFF_UP) == 0) {
      continue;
    }
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
  }
  freeifaddrs(list);
  return found;
}

std::string resolveIPv4(const std::string& host) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error("cannot resolve host '" + host + "' to an IPv4 address: " + gai_strerror(rc));
  }
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

std::string routeSourceAddress(const std::string& ipv4) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // any port: connect() on UDP only picks the route
  if (inet_pton(AF_INET, ipv4.c_str(), &to.sin_addr) != 1) throw Error("'" + ipv4 + "' is not an IPv4 address");
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  RF_CHECK_ERRNO(fd, "socket");
  sockaddr_in from{};
  socklen_t len = sizeof from;
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
  int err = errno;
  if (rc == 0) rc = getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len);
  close(fd);
  if (rc != 0) throw Error("no route from this machine to " + ipv4 + ": " + std::strerror(err));
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &from.sin_addr, buf, sizeof buf);
  return buf;
}

std::string chooseStoreAddress(const std::string& networkInterfaces,
                               const std::optional<std::string>& firstRemoteHost) {
  if (!networkInterfaces.empty()) {
    size_t start = 0;
    while (start <= networkInterfaces.size()) {
      size_t comma = networkInterfaces.find(',', start);
      if (comma == std::string::npos) comma = networkInterfaces.size();
      if (auto a = interfaceAddress(networkInterfaces.substr(start, comma - start))) return *a;
      start = comma + 1;
    }
    throw UsageError("--network-interface " + networkInterfaces +
                     ": no such interface is up with an IPv4 address on this machine");
  }
  if (firstRemoteHost) {
    std::string ip = resolveIPv4(*firstRemoteHost);
    try {
      return routeSourceAddress(ip);
    } catch (const Error& e) {
      throw Error("host '" + *firstRemoteHost + "': " + e.what());
    }
  }
  return "127.0.0.1";
}

}  // namespace ringfold::launcher
