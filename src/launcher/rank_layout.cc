#include "launcher/rank_layout.h"

#include <unistd.h>

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
                     std::to_string(numProc - left) + " slot(s) given by -H");
  }
  // crossSize[localRank] = hosts with at least localRank+1 ranks; a host's crossRank for a
  // localRank is its index among those hosts (hosts keep their -H order).
  std::vector<RankSlot> slots;
  std::map<int, int> hostsWithLocalRank;
  for (int n : perHost) {
    for (int l = 0; l < n; ++l) ++hostsWithLocalRank[l];
  }
  std::map<int, int> nextCrossRank;
  int rank = 0;
  for (size_t h = 0; h < perHost.size(); ++h) {
    for (int l = 0; l < perHost[h]; ++l) {
      RankSlot s;
      s.rank = rank++;
      s.size = numProc;
      s.localRank = l;
      s.localSize = perHost[h];
      s.crossRank = nextCrossRank[l]++;
      s.crossSize = hostsWithLocalRank[l];
      s.host = hosts[h].host;
      slots.push_back(s);
    }
  }
  return slots;
}

std::string thisHostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

bool isLocalHost(const std::string& host, const std::string& hostname) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  if (hostname.empty()) return false;
  if (host == hostname) return true;
  // Short and full forms of this machine's name: "node1" vs "node1.cluster.example".
  auto shortOf = [](const std::string& s) { return s.substr(0, s.find('.')); };
  bool eitherShort = host.find('.') == std::string::npos || hostname.find('.') == std::string::npos;
  return eitherShort && shortOf(host) == shortOf(hostname);
}

void requireLocalHosts(const std::vector<HostSlots>& hosts, const std::string& hostname) {
  for (const auto& h : hosts) {
    if (!isLocalHost(h.host, hostname)) {
      throw UsageError("-H names host '" + h.host +
                       "', which is not this machine: multi-host launch is not supported yet "
                       "(use localhost, 127.0.0.1 or " +
                       (hostname.empty() ? std::string("this hostname") : "'" + hostname + "'") + ")");
    }
  }
  if (hosts.size() > 1) {
    throw UsageError("-H lists this machine more than once ('" + hosts[0].host + "' and '" +
                     hosts[1].host + "'); give it once with all its slots, e.g. localhost:4");
  }
}

}  // namespace ringfold::launcher
