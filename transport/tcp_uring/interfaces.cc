#include "transport/tcp_uring/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sstream>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"

namespace ringfold::transport::tcp_uring {

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

std::string listenAddressFor(const std::string& host) {
  uint32_t store = 0;
  if (!host.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
      store = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
      freeaddrinfo(res);
    } else {
      RF_LOG(kWarning) << "the store address '" << host
                       << "' does not resolve to IPv4; choosing the first interface that is up";
      store = 0xffffffffu;  // not loopback, matches no subnet
    }
  }
  return chooseListenAddress(params::kSocketIfname.str(), store, listInterfaces());
}

}  // namespace ringfold::transport::tcp_uring
