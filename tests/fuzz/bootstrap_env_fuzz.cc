// Fuzz target: the bootstrap's reading of the environment (rendezvous/bootstrap.h): the rank
// variables of ringfoldrun, horovodrun, torchrun, Open MPI, Slurm and TF_CONFIG, in any mix,
// with any values.
//
// Input: records of (variable index, value length, value bytes); every variable not named is
// unset. Checks: bootstrapFromEnvironment returns or throws InvalidArgument; what it returns
// places this rank inside its job (0 <= rank < size; local rank within a known local size;
// cross rank within a known cross size), names a source, and gives a store port in 0..65535.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdlib>
#include <string>

#include "common/logging.h"
#include "fuzz_support.h"
#include "rendezvous/bootstrap.h"

namespace rv = ringfold::rendezvous;
namespace fz = ringfold::fuzz;

namespace {

constexpr const char* kTarget = "bootstrap_env_fuzz";

const char* const kNames[] = {
    "RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL_RANK", "RINGFOLD_LOCAL_SIZE", "RINGFOLD_CROSS_RANK",
    "RINGFOLD_CROSS_SIZE", "RINGFOLD_STORE_ADDR", "RINGFOLD_STORE_PORT", "RINGFOLD_SECRET",
    "RINGFOLD_STORE_SERVER", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "TF_CONFIG",
};
constexpr size_t kCount = sizeof kNames / sizeof kNames[0];

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);  // the derived-secret warning, once per input
  ringfold::reloadLogLevel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const char* name : kNames) ::unsetenv(name);
  FuzzedDataProvider in(data, size);
  while (in.remaining_bytes() > 0) {
    const char* name = kNames[in.ConsumeIntegralInRange<size_t>(0, kCount - 1)];
    std::string value = in.ConsumeRandomLengthString(256);
    if (value.find('\0') != std::string::npos) value.resize(value.find('\0'));
    ::setenv(name, value.c_str(), 1);
  }
  rv::BootstrapInfo info;
  if (!fz::acceptsOrRejects(kTarget, [&] { info = rv::bootstrapFromEnvironment(); })) return 0;
  if (info.size < 1 || info.rank < 0 || info.rank >= info.size) fz::fail(kTarget, "a rank outside its job");
  if (info.localSize != -1 && (info.localSize < 1 || info.localRank < 0 || info.localRank >= info.localSize)) {
    fz::fail(kTarget, "a local rank outside its local size");
  }
  if (info.crossSize != -1 && info.crossRank != -1 && (info.crossRank < 0 || info.crossRank >= info.crossSize)) {
    fz::fail(kTarget, "a cross rank outside its cross size");
  }
  if (info.source.empty()) fz::fail(kTarget, "no source named");
  if (info.storePort < 0 || info.storePort > 65535) fz::fail(kTarget, "a store port out of range");
  return 0;
}
