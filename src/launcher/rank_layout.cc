#include "launcher/rank_layout.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cctype>
#include <map>

namespace ringfold::launcher {

std::vector<RankSlot> computeRankLayout(const std::vector<HostSlots>& hosts, int numProc) {
  if (numProc < 1) throw UsageError("-np must be at least 1, got " + std::to_string(numProc));
  // Ranks per host, filling hosts in order.
  std::vector<int> perHost;
  int left = numProc;
  for (const auto& h : hosts) {
    if (left == 0) break;
    int n = std::min(left, h.slots);
    perHost.push_back(n);
    left -= n;
  }
  if (left > 0) {
    throw UsageError("-np " + std::to_string(numProc) + " is more than the " +
                     std::to_string(numProc - left) + " slot(s) the hosts give");
  }
  std::vector<std::string> hostOfRank;
  for (size_t h = 0; h < perHost.size(); ++h) hostOfRank.insert(hostOfRank.end(), perHost[h], hosts[h].host);
  return assignTopology(hostOfRank);
}

std::vector<RankSlot> assignTopology(const std::vector<std::string>& hostOfRank) {
  // Hosts in order of their lowest rank, and how many ranks each has.
  std::vector<std::string> order;
  std::map<std::string, int> count;
  for (const auto& h : hostOfRank) {
    if (count[h]++ == 0) order.push_back(h);
  }
  // crossSize[localRank] = hosts with at least localRank+1 ranks; a host's crossRank for a
  // localRank is its index among those hosts (in `order`).
  std::map<int, int> hostsWithLocalRank;
  std::map<std::pair<std::string, int>, int> crossRankOf;
  for (const auto& h : order) {
    for (int l = 0; l < count[h]; ++l) crossRankOf[{h, l}] = hostsWithLocalRank[l]++;
  }
  std::vector<RankSlot> slots;
  std::map<std::string, int> nextLocal;
  const int size = static_cast<int>(hostOfRank.size());
  for (int rank = 0; rank < size; ++rank) {
    const std::string& h = hostOfRank[static_cast<size_t>(rank)];
    RankSlot s;
    s.rank = rank;
    s.size = size;
    s.localRank = nextLocal[h]++;
    s.localSize = count[h];
    s.crossRank = crossRankOf[{h, s.localRank}];
    s.crossSize = hostsWithLocalRank[s.localRank];
    s.host = h;
    slots.push_back(s);
  }
  return slots;
}

std::string thisHostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

std::vector<std::string> localAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    out.emplace_back(buf);
  }
  freeifaddrs(list);
  return out;
}

bool isLocalHost(const std::string& host, const std::string& hostname,
                 const std::vector<std::string>& addresses) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  for (const auto& a : addresses) {
    if (host == a) return true;
  }
  if (hostname.empty()) return false;
  if (host == hostname) return true;
  // Short and full forms of this machine's name: "node1" vs "node1.cluster.example".
  auto shortOf = [](const std::string& s) { return s.substr(0, s.find('.')); };
  bool eitherShort = host.find('.') == std::string::npos || hostname.find('.') == std::string::npos;
  bool isAddress = !host.empty() && (std::isdigit(static_cast<unsigned char>(host[0])) != 0);
  return eitherShort && !isAddress && shortOf(host) == shortOf(hostname);
}

std::vector<bool> localHostFlags(const std::vector<HostSlots>& hosts, const std::string& hostname,
                                 const std::vector<std::string>& addresses) {
  std::vector<bool> flags;
  const HostSlots* firstLocal = nullptr;
  for (const auto& h : hosts) {
    bool local = isLocalHost(h.host, hostname, addresses);
    if (local && firstLocal != nullptr) {
      throw UsageError("the hosts list this machine more than once ('" + firstLocal->host +
                       "' and '" + h.host + "'); give it once with all its slots, e.g. localhost:4");
    }
    if (local) firstLocal = &h;
    flags.push_back(local);
  }
  return flags;
}

void markLocalSlots(std::vector<RankSlot>& slots, const std::vector<HostSlots>& hosts,
                    const std::vector<bool>& localFlags) {
  for (auto& s : slots) {
    for (size_t h = 0; h < hosts.size(); ++h) {
      if (hosts[h].host == s.host) s.local = localFlags[h];
    }
  }
}

}  // namespace ringfold::launcher
