// Topology: a rank's place in the job, in Horovod's vocabulary. The one description of it that
// the launcher, the bootstrap, the collectives and the engine share; each keeps what is truly
// its own beside it (the launcher's host name, the bootstrap's store, the collectives' host map).
//
// Contract
//   rank / size           : this process's index in the job (0-based), and how many there are.
//   localRank / localSize : index among, and number of, the ranks on this rank's host, in rank
//                           order.
//   crossRank / crossSize : index among, and number of, the ranks that have this same localRank:
//                           one per host that runs at least localRank + 1 ranks, in host order
//                           (hosts in the order of their lowest rank; hosts with fewer ranks drop
//                           out). When every host runs as many ranks (a homogeneous job),
//                           crossRank is the host's index and crossSize the number of hosts.
//   A single process is the default: rank 0 of 1, alone on its host.
//
// Where it comes from, in the order a job sees it:
//   1. launcher::computeRankLayout (launcher/rank_layout.h) places ranks host by host (-H order)
//      and computes every field; ringfoldrun passes them as RINGFOLD_/HOROVOD_{RANK, SIZE,
//      LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE}.
//   2. rendezvous::bootstrapFromEnvironment (rendezvous/bootstrap.h) reads them back, or derives
//      them from another launcher's names; there a local or cross field may be -1: unknown.
//   3. describeHosts (collectives/topology.h) computes the local and cross fields from every
//      rank's host id (one allgather), so they are consistent across ranks whatever the launcher
//      said; the engine answers horovod_local_rank() etc. from that.
#pragma once

namespace ringfold {

struct Topology {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
};

}  // namespace ringfold
