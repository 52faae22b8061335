#include "collectives/topology.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "collectives/allgather.h"
#include "common/error.h"

namespace ringfold {

std::vector<int> HostLayout::localRanks(int rank) const { return hosts.at(hostOf.at(rank)); }

std::vector<int> HostLayout::crossRanks(int rank) const {
  const auto& mine = hosts.at(hostOf.at(rank));
  const size_t local = static_cast<size_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  std::vector<int> out;
  for (const auto& host : hosts) {
    if (local < host.size()) out.push_back(host[local]);
  }
  return out;
}

HostLayout describeHosts(Communicator& comm, const std::string& hostId) {
  const int n = comm.size();
  uint64_t mine = std::hash<std::string>{}(hostId);
  std::vector<uint64_t> ids(n);
  allgather(comm, {&mine, ids.data(), 1, DataType::kUint64});
  HostLayout layout;
  layout.hostOf.resize(n);
  std::unordered_map<uint64_t, int> index;
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = index.emplace(ids[r], static_cast<int>(layout.hosts.size()));
    if (fresh) layout.hosts.emplace_back();
    layout.hostOf[r] = it->second;
    layout.hosts[it->second].push_back(r);
  }
  const int me = comm.rank();
  layout.rank = me;
  layout.size = n;
  const auto local = layout.localRanks(me);
  layout.localRank = static_cast<int>(std::find(local.begin(), local.end(), me) - local.begin());
  layout.localSize = static_cast<int>(local.size());
  const auto cross = layout.crossRanks(me);
  layout.crossRank = static_cast<int>(std::find(cross.begin(), cross.end(), me) - cross.begin());
  layout.crossSize = static_cast<int>(cross.size());
  for (const auto& host : layout.hosts) layout.homogeneous = layout.homogeneous && host.size() == layout.hosts[0].size();
  return layout;
}

HostSplit splitByHost(Communicator& comm, const std::string& hostId, const std::string& name) {
  HostSplit split;
  split.layout = describeHosts(comm, hostId);
  const int me = comm.rank();
  split.local = comm.split(split.layout.localRanks(me), name + "/local" + std::to_string(split.layout.hostOf[me]));
  split.cross = comm.split(split.layout.crossRanks(me), name + "/cross" + std::to_string(split.layout.localRank));
  return split;
}

std::string hostIdFromLaunch(const Topology& launched) {
  if (launched.crossRank < 0 || launched.localRank < 0) return thisHostName();
  return "host@" + std::to_string(launched.rank - launched.localRank);
}

std::string thisHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace ringfold
