// Test helpers: run a group of ranks as threads of this process, each with its own
// Communicator (loopback or tcp_uring over 127.0.0.1), rendezvous through one HashStore.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace ringfold::rftest {

struct GroupOptions {
  std::string transport = "loopback";
  std::chrono::milliseconds timeout{20000};          // each wait of a collective
  size_t segmentBytes = 4096;                        // small, so tests cross segments cheaply
  size_t ringChunkBytes = 3 * 4096;                  // ring rounds of 3-segment chunks: both cheaply
  std::chrono::milliseconds connectTimeout{20000};
  int ranksPerHost = 0;  // > 0: ranks r / ranksPerHost share a host (Communicator::setHostIds)
  std::string algorithms = "auto";  // CollectiveTuning::allreduceAlgorithm (RINGFOLD_ALGO)
};

// Runs body(comm) on `size` threads, one rank each. Returns each rank's exception (null when
// it finished cleanly). Every rank's communicator lives until all threads have returned.
std::vector<std::exception_ptr> runRanks(int size, const std::function<void(Communicator&)>& body,
                                         const GroupOptions& options = {});

// The exception's text ("ok" for null).
std::string describe(const std::exception_ptr& error);

// True if `error` holds an exception of type E.
template <typename E>
bool holds(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace ringfold::rftest
