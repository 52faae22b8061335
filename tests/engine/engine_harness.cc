#include "engine/engine_harness.h"

#include <latch>
#include <memory>
#include <thread>

#include "reduce/cpu_reducer.h"
#include "rendezvous/hash_store.h"
#include "support/rank_threads.h"
#include "transport/device.h"

namespace ringfold::rftest {

std::vector<std::string> runEngines(int size, const std::function<void(engine::Engine&, int)>& body,
                                    const EngineGroupOptions& options) {
  auto store = std::make_shared<rendezvous::HashStore>();
  std::vector<std::string> errors(size, "ok");
  std::vector<std::unique_ptr<engine::Engine>> engines(size);
  std::latch finished(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto device = transport::createDevice(options.transport);
        auto peers = device->connectAll(*store, "engine-test", r, size, std::chrono::milliseconds(20000));
        auto comm = std::make_unique<Communicator>(r, size, std::move(device), std::move(peers), makeCpuReducer());
        comm->setStore(store, "engine-test");
        comm->setTimeout(options.timeout);
        comm->setSegmentBytes(4096);
        engines[r] = std::make_unique<engine::Engine>(std::move(comm), options.engine);
        body(*engines[r], r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      finished.arrive_and_wait();
      try {
        engines[r].reset();
      } catch (const std::exception& e) {
        if (errors[r] == "ok") errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

engine::Status waitStatus(engine::Engine& e, engine::Handle handle) {
  const engine::Result* r = e.handles().wait(handle, std::chrono::milliseconds(60000));
  if (!r) return {engine::StatusCode::kUnknownError, "timed out waiting for the handle"};
  engine::Status s = r->status;
  e.handles().release(handle);
  return s;
}

}  // namespace ringfold::rftest
