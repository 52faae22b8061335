// Bootstrap: who am I, how many are we, and where is the store, from the environment.
//
// Name sets read, first match wins (a set counts as present when its rank variable is set):
//   ringfold : RINGFOLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE,
//              RINGFOLD_STORE_ADDR/PORT, RINGFOLD_SECRET          (set by ringfoldrun)
//   horovod  : HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE,
//              HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT
//   torchrun : RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/GROUP_RANK, MASTER_ADDR/MASTER_PORT
//              (also Azure ML, which sets the same names)
//   openmpi  : OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
//   slurm    : SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID
//   none     : a single process: rank 0 of 1, in-memory store.
// A set that is only partly present, a value that is not a number, rank >= size,
// local rank >= local size, or RINGFOLD_* and HOROVOD_* values that disagree throw
// InvalidArgument naming the variable(s) at fault.
#pragma once

#include <string>

namespace ringfold::rendezvous {

struct BootstrapInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
  std::string storeAddr;  // empty for a single process
  int storePort = 0;
  std::string secret;     // raw bytes of the job secret
  bool hostStore = false; // this process must start the store server (rank 0, no launcher)
  std::string source;     // "ringfold", "horovod", "torchrun", "openmpi", "slurm" or "none"
};

BootstrapInfo bootstrapFromEnvironment();

}  // namespace ringfold::rendezvous
