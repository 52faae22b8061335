#include "support/rank_threads.h"

#include <latch>
#include <memory>
#include <thread>

#include "collectives/allreduce_model.h"
#include "collectives/communicator.h"
#include "rendezvous/hash_store.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/store.h"
#include "transport/device.h"

namespace ringfold::rftest {

std::vector<std::exception_ptr> runRanks(int size, const std::function<void(Communicator&)>& body,
                                         const GroupOptions& options) {
  rendezvous::HashStore store;
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  // Each rank destroys its own communicator (the thread that drove a device tears it down), but
  // only once every rank has finished, so no rank loses a peer mid-collective.
  std::latch finished(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto device = transport::createDevice(options.transport);
        auto peers = device->connectAll(store, "test", r, size, options.connectTimeout);
        comms[r] = std::make_unique<Communicator>(r, size, std::move(device), std::move(peers),
                                                  makeCpuReducer());
        comms[r]->setStore(std::shared_ptr<rendezvous::Store>(&store, [](rendezvous::Store*) {}), "test");
        comms[r]->setTimeout(options.timeout);
        comms[r]->setSegmentBytes(options.segmentBytes);
        CollectiveTuning tuning = comms[r]->tuning();
        tuning.ringChunkBytes = options.ringChunkBytes;
        tuning.allreduceAlgorithm = options.algorithms;
        comms[r]->setTuning(tuning);
        // Links fast enough that the model keeps the small test chunks (several ring rounds).
        coll::ModelConstants model;
        model.local.alpha = model.remote.alpha = 1e-7;
        comms[r]->setModel(model);
        if (options.ranksPerHost > 0) {
          std::vector<std::string> ids;
          for (int p = 0; p < size; ++p) ids.push_back("host" + std::to_string(p / options.ranksPerHost));
          comms[r]->setHostIds(ids);
        }
        body(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      finished.arrive_and_wait();
      try {
        comms[r].reset();
      } catch (...) {
        if (!errors[r]) errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();
  return errors;
}

std::string describe(const std::exception_ptr& error) {
  if (!error) return "ok";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace ringfold::rftest
