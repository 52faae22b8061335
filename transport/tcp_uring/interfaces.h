// Interface selection of the tcp_uring backend: which IPv4 address a TCP device listens on.
//
// Rules (RINGFOLD_SOCKET_IFNAME, NCCL syntax): a comma-separated list of names; each matches
// interfaces whose name starts with it, or equals it exactly when the list starts with '=';
// a list starting with '^' excludes those instead. The first IPv4 interface that is up and
// matches wins. When the variable is unset: 127.0.0.1 if the store address the caller passes is
// empty or a loopback address; otherwise the interface whose subnet holds the store's address,
// else the first non-loopback interface that is up, else 127.0.0.1. The store address comes
// from the device's creator (transport::DeviceConfig::storeAddress): the transport does not read
// the launcher's environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringfold::transport::tcp_uring {

struct Interface {
  std::string name;
  uint32_t address = 0;  // IPv4, host byte order
  uint32_t netmask = 0;  // host byte order
  bool up = false;
  bool loopback = false;
};

// The IPv4 interfaces of this host, in getifaddrs order.
std::vector<Interface> listInterfaces();

// Whether `name` is selected by an NCCL-style spec ("eth", "=eth0", "^docker,lo", "ib0,eth1").
bool ifnameSelected(const std::string& spec, const std::string& name);

// The address to listen on (dotted quad), by the rules above. `storeAddress` is the store's
// resolved IPv4 address in host order, 0 when there is no store address. Throws
// InvalidArgument when a spec selects nothing. Pure, so tests can feed it made-up interfaces.
std::string chooseListenAddress(const std::string& ifnameSpec, uint32_t storeAddress,
                                const std::vector<Interface>& interfaces);

// chooseListenAddress() from RINGFOLD_SOCKET_IFNAME, `storeAddress` (a host name or IPv4
// address; empty: none) and this host's interfaces. A store address that does not resolve to
// IPv4 is logged, and the first interface that is up is chosen.
std::string listenAddressFor(const std::string& storeAddress);

// RINGFOLD_SOCKETS_PER_PEER=auto: 1 when listening on a loopback address (every peer is on this
// host, where a TCP flow is a kernel memcpy and a second flow only adds per-socket overhead on
// the same cores; figures in docs/performance.md), else 2 so that one flow does not cap a fast
// link. All ranks of a job decide alike: they listen on
// loopback only when the store address is loopback (or the interface spec says so).
int autoSocketsPerPeer(const std::string& listenAddress);

}  // namespace ringfold::transport::tcp_uring
