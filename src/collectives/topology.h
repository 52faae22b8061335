// Topology: which ranks share a host, and communicators along that split, for hierarchical
// algorithms (reduce inside each host, then across hosts) and for Horovod's local/cross
// rank queries.
//
// Vocabulary (Horovod's)
//   host       : ranks that gave the same host id (e.g. the hostname); hosts are numbered in
//                order of their lowest rank.
//   local      : the ranks of one host, in rank order; local rank = index among them.
//   cross      : the ranks with the same local rank, one per host that has it, in host order;
//                cross rank = index among them (the host's index when every host has as many
//                ranks: a homogeneous job).
//
// Contract: describeHosts() and splitByHost() are collective over `comm` (every rank calls them
// with its own host id) and give every rank a consistent picture. splitByHost() builds the two
// communicators with Communicator::split (so `comm` needs its store).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace ringfold {

struct HostLayout {
  std::vector<int> hostOf;              // rank -> host index
  std::vector<std::vector<int>> hosts;  // host index -> its ranks, ascending
  int localRank = 0, localSize = 1, crossRank = 0, crossSize = 1;
  bool homogeneous = true;              // every host runs as many ranks

  std::vector<int> localRanks(int rank) const;  // ranks on `rank`'s host
  std::vector<int> crossRanks(int rank) const;  // ranks with `rank`'s local rank
};

// Allgathers a 64-bit hash of each rank's host id.
HostLayout describeHosts(Communicator& comm, const std::string& hostId);

struct HostSplit {
  HostLayout layout;
  std::unique_ptr<Communicator> local;  // this host's ranks
  std::unique_ptr<Communicator> cross;  // one rank per host: those with this local rank
};
HostSplit splitByHost(Communicator& comm, const std::string& hostId, const std::string& name = "host");

// This machine's host name (for the default host id).
std::string thisHostName();

}  // namespace ringfold
