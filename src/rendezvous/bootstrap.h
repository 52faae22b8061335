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
//   tf_config: TF_CONFIG, TensorFlow's cluster JSON (Azure ML's TensorFlow jobs), read only when
//              none of the sets above is present: ranks are the "chief" (or "master") tasks,
//              then the "worker" tasks, in list order; this task's type and index give the
//              rank; local rank/size and cross rank/size come from the tasks' host names; the
//              store is the first task's host, at its port + 1 (TensorFlow's own server may
//              hold the listed port). "ps" and "evaluator" tasks are not ranks (an error
//              naming the task); malformed JSON is an error naming the offset.
//   none     : a single process: rank 0 of 1, in-memory store.
// A set that is only partly present, a value that is not a number, rank >= size,
// local rank >= local size, or RINGFOLD_* and HOROVOD_* values that disagree throw
// InvalidArgument naming the variable(s) at fault.
//
// Derived values (full rules and examples in bootstrap.cc's header comment):
//   * local rank/size default to 0/1 only for a single process; under slurm the local size is
//     this node's entry of SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE ("2(x3),1").
//   * cross rank/size: *_CROSS_* when set, else torchrun's GROUP_RANK (and GROUP_WORLD_SIZE or
//     WORLD_SIZE/LOCAL_WORLD_SIZE), else slurm's SLURM_NODEID and the node count of
//     SLURM_TASKS_PER_NODE, else rank/localSize and size/localSize when size is a
//     multiple of localSize (block placement assumed); otherwise -1 (unknown).
//   * store: RINGFOLD_STORE_ADDR/PORT, or the launcher's own (MASTER_ADDR/PORT, horovodrun's
//     rendezvous address), the first slurm node, 127.0.0.1 for a one-host Open MPI job; ports
//     of launchers' own servers are skipped (+1).
//   * secret: RINGFOLD_SECRET, or (not with the RINGFOLD_* names) derived from the job's
//     identity, with a warning that this only keeps other jobs out by accident, not by design.
//   * hostStore: rank 0, whichever names started it, unless RINGFOLD_STORE_SERVER=external
//     (ringfoldrun sets it: the launcher hosts the store, and every rank only connects).
#pragma once

#include <string>
#include <vector>

#include "common/topology.h"
#include "rendezvous/tf_config.h"

namespace ringfold::rendezvous {

// This rank's place in the job (common/topology.h) as the environment gives it, where
// localSize is -1 when unknown (Azure ML: torchrun's names without LOCAL_WORLD_SIZE) and
// crossRank/crossSize are -1 when they cannot be derived (uneven placement); and the store.
struct BootstrapInfo : Topology {
  std::string storeAddr;  // empty for a single process
  int storePort = 0;
  std::string secret;     // raw bytes of the job secret
  bool hostStore = false; // this process must start the store server (rank 0, unless external)
  std::string source;     // "ringfold", "horovod", "torchrun", "openmpi", "slurm", "tf_config" or "none"
};

BootstrapInfo bootstrapFromEnvironment();

namespace detail {
// First host of a slurm node list: "node[03-05,7],gpu1" -> "node03".
std::string firstSlurmHost(const std::string& nodeList);
// Tasks on node `nodeId` (or the first node when nodeId < 0) of a slurm tasks-per-node list:
// "2(x3),1" -> 2 for nodes 0..2, 1 for node 3. Throws InvalidArgument naming `what`.
int slurmTasksOnNode(const std::string& tasksPerNode, int nodeId, const std::string& what);
// The derived-secret warning is logged once per process; tests re-arm it.
void resetDerivedSecretWarning();
}  // namespace detail

}  // namespace ringfold::rendezvous
