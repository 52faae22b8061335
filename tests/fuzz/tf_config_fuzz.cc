// Fuzz target: the TF_CONFIG JSON reader (rendezvous/tf_config.h): the bootstrap reads it from
// the environment Azure ML and tf.distribute set, a hand-written JSON document in practice.
//
// Checks: it returns or throws InvalidArgument; what it returns has a rank within its task
// list, every task "host:port" with a non-empty host, and a cluster text that parses the same
// way twice (the derived secret depends on it being canonical).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "rendezvous/tf_config.h"

namespace rd = ringfold::rendezvous::detail;
namespace fz = ringfold::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr const char* kTarget = "tf_config_fuzz";
  const std::string json(reinterpret_cast<const char*>(data), size);
  rd::TfConfig config;
  if (!fz::acceptsOrRejects(kTarget, [&] { config = rd::parseTfConfig(json); })) return 0;
  if (config.tasks.empty() || config.rank < 0 || config.rank >= static_cast<int>(config.tasks.size())) {
    fz::fail(kTarget, "an accepted config whose rank is not one of its tasks");
  }
  for (const std::string& task : config.tasks) {
    const size_t colon = task.rfind(':');
    if (colon == std::string::npos || colon == 0) fz::fail(kTarget, "a task that is not host:port");
  }
  if (rd::parseTfConfig(json).cluster != config.cluster) fz::fail(kTarget, "the cluster text is not stable");
  return 0;
}
