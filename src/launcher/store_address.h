// StoreAddress: the address the launcher's rendezvous store listens on, chosen so that every
// rank can dial it.
//
//   * --network-interface LIST: the IPv4 address of the first listed interface this machine
//     has (UsageError naming the list if none of them has one);
//   * else, when some rank runs on another host: the source address of this machine's route to
//     the first remote host (a UDP socket connect()ed to it, which sends nothing). The host is
//     resolved with getaddrinfo (IPv4); one that does not resolve, or that has no route, is an
//     Error naming it, before anything starts;
//   * else 127.0.0.1: nothing outside this machine can reach the store.
// The store listens on that one address, not on every interface.
#pragma once

#include <optional>
#include <string>

namespace ringfold::launcher {

std::string chooseStoreAddress(const std::string& networkInterfaces,
                               const std::optional<std::string>& firstRemoteHost);

// The IPv4 address of interface `name` if it exists, is up and has one.
std::optional<std::string> interfaceAddress(const std::string& name);

// The IPv4 address `host` resolves to (a dotted quad is returned as is). Throws Error.
std::string resolveIPv4(const std::string& host);

// The local address a packet to `ipv4` would leave from. Throws Error.
std::string routeSourceAddress(const std::string& ipv4);

}  // namespace ringfold::launcher
