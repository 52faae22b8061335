// EngineOptions: what an Engine is built with. EngineOptions::fromParams() reads every
// RINGFOLD_* (and HOROVOD_*) engine variable (params.def) and throws InvalidArgument naming a
// bad one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/autotune.h"

namespace ringfold::engine {

struct EngineOptions {
  uint64_t fusionThresholdBytes = 128ull << 20;
  uint64_t fusionTensorMaxBytes = 256u << 10;  // larger tensors are never fused (fusion.h)
  double cycleTimeMs = 1.0;
  // A tensor enqueued, or still waiting for other ranks, starts a cycle this long after (capped
  // by the regular schedule); negative: only regular cycles.
  double wakeDelayUs = 0.0;
  size_t cacheCapacity = 1024;
  bool disableGroupFusion = false;
  bool dynamicProcessSets = false;
  std::vector<std::vector<int>> processSets;  // static sets (global ranks), ids 1, 2, ...
  std::chrono::milliseconds stallWarning{60000};  // 0: off
  std::chrono::milliseconds stallShutdown{0};     // 0: off
  std::string timelinePath;  // "" off; "DYNAMIC": enabled, started later
  bool timelineMarkCycles = false;
  bool autotune = false;
  AutotuneOptions autotuneOptions;

  // Every RINGFOLD_* (and HOROVOD_*) engine variable; InvalidArgument names a bad one.
  static EngineOptions fromParams();
};

}  // namespace ringfold::engine
