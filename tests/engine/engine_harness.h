// Test harness for the engine: `size` ranks as threads of this process, each with its own
// Engine over its own loopback (or tcp_uring) communicator, meeting through one HashStore.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ringfold::rftest {

struct EngineGroupOptions {
  std::string transport = "loopback";
  engine::EngineOptions engine = defaultEngineOptions();
  std::chrono::milliseconds timeout{20000};

  static engine::EngineOptions defaultEngineOptions() {
    engine::EngineOptions o;
    o.cycleTimeMs = 0.5;
    o.stallWarning = std::chrono::milliseconds(0);
    return o;
  }
};

// Runs body(engine, rank) on every rank; returns each rank's error text ("ok" when it returned
// normally). Every engine is shut down after every body has returned.
std::vector<std::string> runEngines(int size, const std::function<void(engine::Engine&, int)>& body,
                                    const EngineGroupOptions& options = {});

// Waits for `handle`, releases it, and returns its status (text "ok" or the message).
engine::Status waitStatus(engine::Engine& e, engine::Handle handle);

}  // namespace ringfold::rftest
