// RankLayout: which rank runs on which host, and the rank numbers each one is told.
//
// Ranks fill the hosts in -H order, each host up to its slots (horovodrun's placement):
// `-np 5 -H a:2,b:2,c:4` puts ranks 0-1 on a, 2-3 on b, 4 on c. Each rank's local and cross
// rank/size follow from that as common/topology.h defines them. Hosts that receive no rank are
// left out of the layout.
//
// Locality: ranks on a local host are forked here; the others start over ssh. isLocalHost()
// accepts "localhost", any 127.x.x.x address, "::1", this machine's hostname (short or full),
// and any address of one of its interfaces (so `-H 10.0.0.1:2,...` run from 10.0.0.1 needs no
// ssh to itself). Names are not resolved (no DNS on the launch path): a name that only
// resolves to this machine counts as remote. localHostFlags() throws UsageError when hosts
// list this machine under two names (the local ranks would get wrong local ranks).
#pragma once

#include <string>
#include <vector>

#include "common/topology.h"
#include "launcher/launch_options.h"

namespace ringfold::launcher {

// One rank's place (common/topology.h) and where it runs.
struct RankSlot : Topology {
  std::string host;  // as written in -H (HOROVOD_HOSTNAME)
  bool local = true;  // runs on this machine (else over ssh)
};

// Places `numProc` ranks on `hosts`. Throws UsageError if the slots are too few.
std::vector<RankSlot> computeRankLayout(const std::vector<HostSlots>& hosts, int numProc);

// The rank numbers of ranks 0..n-1 that run on hostOfRank[0..n-1] (a host's ranks need not be
// contiguous: an elastic job keeps its survivors first). Local rank: order among the ranks of
// its host; cross rank for local rank l: the host's index among the hosts with more than l
// ranks, hosts ordered by their lowest rank (common/topology.h). computeRankLayout's numbers.
std::vector<RankSlot> assignTopology(const std::vector<std::string>& hostOfRank);

// This machine's hostname (gethostname), empty if it cannot be read.
std::string thisHostname();
// The addresses of this machine's interfaces that are up, as text ("10.0.0.1", "fe80::1").
std::vector<std::string> localAddresses();
bool isLocalHost(const std::string& host, const std::string& hostname,
                 const std::vector<std::string>& addresses = {});
// For each host, whether it is this machine. Throws UsageError if two of them are.
std::vector<bool> localHostFlags(const std::vector<HostSlots>& hosts, const std::string& hostname,
                                 const std::vector<std::string>& addresses);
// Sets each slot's `local` from its host.
void markLocalSlots(std::vector<RankSlot>& slots, const std::vector<HostSlots>& hosts,
                    const std::vector<bool>& localFlags);

}  // namespace ringfold::launcher
