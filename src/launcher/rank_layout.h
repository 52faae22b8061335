// RankLayout: which rank runs on which host, and the rank numbers each one is told.
//
// Ranks fill the hosts in -H order, each host up to its slots (horovodrun's placement):
// `-np 5 -H a:2,b:2,c:4` puts ranks 0-1 on a, 2-3 on b, 4 on c. Then, as in Horovod:
//   localRank / localSize : index among, and number of, the ranks on the same host;
//   crossRank / crossSize : index of this host among, and number of, the hosts that run a rank
//                           with this same localRank (hosts with fewer ranks drop out).
// Hosts that receive no rank are left out of the layout.
//
// Locality: a single-host launcher only runs ranks on this machine. isLocalHost() accepts
// "localhost", any 127.x.x.x address, "::1" and this machine's hostname (short or full).
// requireLocalHosts() throws UsageError naming the first remote host ("multi-host launch is
// not supported yet"), or a -H that lists this machine under two names.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_options.h"

namespace ringfold::launcher {

struct RankSlot {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
  std::string host;  // as written in -H (HOROVOD_HOSTNAME)
};

// Places `numProc` ranks on `hosts`. Throws UsageError if the slots are too few.
std::vector<RankSlot> computeRankLayout(const std::vector<HostSlots>& hosts, int numProc);

// This machine's hostname (gethostname), empty if it cannot be read.
std::string thisHostname();
bool isLocalHost(const std::string& host, const std::string& hostname);
void requireLocalHosts(const std::vector<HostSlots>& hosts, const std::string& hostname);

}  // namespace ringfold::launcher
