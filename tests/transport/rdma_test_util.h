// Shared by the rdma suites over the fake fabric (rdma_test.cc, rdma_fault_test.cc): small rings
// and chunks, faults for one test, buffers with a pattern, and ranks as threads, each an rdma
// Device over its own fake endpoint, rendezvous through a HashStore.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/hash_store.h"
#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/rdma/device.h"
#include "transport/rdma/fabric_fake.h"

namespace ringfold::test {

// Small rings and chunks, so that credits run out and transfers cut into many chunks.
constexpr size_t kRdmaSlotBytes = 4096;
#define RDMA_ENV                                                                                 \
  EnvGuard env {                                                                                 \
    {"RINGFOLD_RDMA_SLOT_BYTES", "4096"}, {"RINGFOLD_RDMA_SLOTS", "8"}, {"RINGFOLD_RDMA_CHUNK_BYTES", "64K"} \
  }

// Faults for one test (network-wide), cleared at its end.
struct FaultGuard {
  explicit FaultGuard(const transport::rdma::fake::Faults& f = {}) { transport::rdma::fake::setFaults(f); }
  ~FaultGuard() { transport::rdma::fake::clearFaults(); }
};

struct Buffer {
  std::vector<uint8_t> bytes;
  transport::PlainMemoryRegion region;
  explicit Buffer(size_t n) : bytes(n), region(bytes.data(), n) {}
  Buffer(uint64_t seed, size_t n) : bytes(patterned(seed, n)), region(bytes.data(), n) {}
};

struct RunOptions {
  std::chrono::milliseconds connectTimeout{20000};
  // On an error a rank aborts, as a communicator does, so its peers fail at once.
  bool abortOnError = false;
};

// Runs `body` on `size` threads, each with an rdma Device over its own fake endpoint.
inline std::vector<std::exception_ptr> runRdmaRanks(int size, const std::function<void(Rank&)>& body,
                                                    const RunOptions& o) {
  RankThreads how;
  how.device = [size](int r) {
    transport::rdma::Options options;
    options.opened = transport::rdma::fake::open(r, size);
    return transport::rdma::createDevice(options);
  };
  how.connectTimeout = o.connectTimeout;
  how.abortOnError = o.abortOnError;
  return runRanks(size, body, how);
}

}  // namespace ringfold::test
