// CPU binding: which CPUs each local rank may run on (ringfoldrun --bind-to).
//
// Why: with more ranks than cores, the scheduler stacks a rank onto the core its ring
// neighbour needs, and the rank then waits for data its neighbour cannot send. With no more
// ranks than cores, binding costs over sockets, since an unbound rank can take whichever core is
// free when its peer's data arrives (figures in docs/performance.md and
// bench/results/compare_loopback.md). Over shared memory, where a waiting rank polls its rings
// in user space, an unbound pair often shares one core for a whole run: as many ranks as cores
// run 2-5x faster bound up to 256 KiB (docs/shm.md). Hence the default, auto: bind when the
// local ranks outnumber the cores, or fill them and the same-host transport is shared memory.
//
// Contract
//   * machineCores() groups the CPUs the launcher may use (its own affinity mask, so taskset,
//     cgroup cpusets and Slurm allocations are honoured) into cores: hardware threads that share
//     <sysfs>/cpuN/topology/{physical_package_id,core_id}. A CPU whose topology cannot be read
//     is a core of its own. Cores are ordered by package, then core id.
//   * cpusForRank(): with at most as many local ranks as cores, local rank i gets the
//     contiguous block of cores [i*C/n, (i+1)*C/n), with all their hardware threads, so a
//     rank's framework threads and data loaders keep a fair share of the machine; with more
//     ranks than cores, rank i gets core i % C, so ring neighbours i and i+1 run on different
//     cores. One local rank gets every core (no constraint).
//   * bindingFor(): kCore binds as cpusForRank() says; kAuto only when localSize > cores, or
//     localSize == cores > 1 and `polling` (the same-host transport polls in user space: shm);
//     kNone never. Empty means unbound.
//   * Only ranks the launcher forks are bound; ranks on remote hosts and ranks started by other
//     launchers (torchrun, srun, mpirun) run as their launcher placed them.
//   * Binding is advice to the kernel: a failed sched_setaffinity in the child leaves that rank
//     unbound and never fails the launch.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

namespace ringfold::launcher {

enum class BindPolicy { kAuto, kCore, kNone };

// Hardware threads (CPU numbers) of one core.
using Core = std::vector<int>;

// The cores among `allowed` CPUs, read from `sysfsCpuDir` (normally /sys/devices/system/cpu).
std::vector<Core> machineCores(const std::vector<int>& allowed,
                               const std::string& sysfsCpuDir = "/sys/devices/system/cpu");

// The CPUs the calling process may run on (sched_getaffinity), ascending.
std::vector<int> allowedCpus();

// The CPUs of local rank `localRank` of `localSize` (see the contract); empty if `cores` is.
std::vector<int> cpusForRank(const std::vector<Core>& cores, int localRank, int localSize);

// The CPUs of local rank `localRank` of `localSize` under `policy` (empty: unbound).
std::vector<int> bindingFor(BindPolicy policy, const std::vector<Core>& cores, int localRank, int localSize,
                            bool polling = false);

// Whether the ranks' same-host transport polls shared memory, from their environment
// (RINGFOLD_LOCAL_TRANSPORT unset or "shm", RINGFOLD_TRANSPORT not "loopback").
bool localTransportPolls(const std::vector<std::string>& rankEnvironment);

// "0-3,8" style list, as in /proc/self/status Cpus_allowed_list.
std::string cpuListText(const std::vector<int>& cpus);

// A cpu_set_t holding `cpus` (those beyond CPU_SETSIZE are left out).
cpu_set_t cpuSetOf(const std::vector<int>& cpus);

}  // namespace ringfold::launcher
