// Topology: which ranks share a host, and communicators along that split, for hierarchical
// algorithms (reduce inside each host, then across hosts) and for Horovod's local/cross
// rank queries.
//
// Vocabulary: common/topology.h's (local, cross), where a host is the ranks that gave the same
// host id (e.g. the hostname), hosts numbered in order of their lowest rank.
//
// Contract: describeHosts() and splitByHost() are collective over `comm` (every rank calls them
// with its own host id) and give every rank a consistent picture. splitByHost() builds the two
// communicators with Communicator::split (so `comm` needs its store).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/topology.h"

namespace ringfold {

// This rank's Topology within the communicator, and the host of every rank.
struct HostLayout : Topology {
  std::vector<int> hostOf;              // rank -> host index
  std::vector<std::vector<int>> hosts;  // host index -> its ranks, ascending
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

// The host id of a rank whose launcher said where it runs (`launched`: the bootstrap's
// Topology). Launchers that place ranks host by host (ringfoldrun, horovodrun, torchrun) give
// every host consecutive ranks, so a host is named by its first rank, rank - localRank (the
// cross rank is not a host's name when hosts run different numbers of ranks). When the
// launcher's layout is not known (crossRank or localRank < 0), this machine's host name.
std::string hostIdFromLaunch(const Topology& launched);

}  // namespace ringfold
