// The store over a job's life: what a process set leaves in the store once it is removed (the
// soak's launcher memory, docs/reliability.md "Load and soak"), and what the rendezvous says when
// the other ranks never reach the store (fault matrix: store-unreach).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "common/error.h"
#include "engine/engine.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/job_store.h"
#include "rendezvous/tcp_store.h"
#include "transport/device.h"
#include "transport/per_peer/selector.h"
#include "child_process.h"

namespace ringfold::rendezvous {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("no free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// The text exchangeHostIds throws (it must throw TimeoutError).
std::string hostExchangeError(Store& store, const std::string& prefix, int rank, int size) {
  try {
    transport::per_peer::exchangeHostIds(store, prefix, rank, size, "host-a", 300ms);
  } catch (const TimeoutError& e) {
    return e.what();
  }
  ADD_FAILURE() << "exchangeHostIds did not throw TimeoutError";
  return "";
}

// ---- store-unreach: the rendezvous names the store when nobody else reached it ---------------

TEST(RendezvousCulprit, TheStoresHostSaysWhenNoOtherRankReachedIt) {
  const int port = freePort();
  BootstrapInfo info;
  info.rank = 0;
  info.size = 2;
  info.localSize = 2;
  info.storeAddr = "127.0.0.1";
  info.storePort = port;
  info.secret = "culprit-test-" + std::to_string(port);
  info.hostStore = true;
  info.source = "ringfold";
  JobStore job = openJobStore(info, 2s);
  ASSERT_NE(job.server, nullptr);
  const std::string where = "127.0.0.1:" + std::to_string(port);

  // Nobody else ever connected: the store is named, and the missing key too.
  std::string text = hostExchangeError(*job.store, "rf", 0, 2);
  EXPECT_TRUE(contains(text, "no other rank reached the rendezvous store at " + where +
                                 " (hosted by this rank) within 300 ms")) << text;
  EXPECT_TRUE(contains(text, "rank 1 did not publish its host identity (rf/host/1)")) << text;

  // Another process reached the store but published nothing: the rank is the culprit, as before.
  TcpStore other("127.0.0.1", port, info.secret, 2s);
  text = hostExchangeError(*job.store, "rf2", 0, 2);
  EXPECT_TRUE(text.starts_with("rank 1 did not publish its host identity (rf2/host/1) within 300 ms")) << text;
  EXPECT_FALSE(contains(text, "no other rank")) << text;
}

TEST(RendezvousCulprit, AClientSaysWhenNoOtherRankPublishedAndKeepsTheRankOtherwise) {
  TcpStoreServer server("127.0.0.1", 0, "culprit-secret");
  TcpStore store("127.0.0.1", server.port(), "culprit-secret", 2s);
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  // Under a launcher's store nobody else published: the store is named (it cannot tell who
  // connected, so it says what it saw).
  std::string text = hostExchangeError(store, "rf", 0, 3);
  EXPECT_TRUE(contains(text, "no other rank published its host identity to the rendezvous store at " + where))
      << text;
  EXPECT_TRUE(contains(text, "rank 1 did not publish its host identity (rf/host/1) within 300 ms")) << text;
  // Rank 2 published, rank 1 did not: rank 1 is named alone, as before.
  store.setString("rf3/host/2", "host-b");
  text = hostExchangeError(store, "rf3", 0, 3);
  EXPECT_TRUE(text.starts_with("rank 1 did not publish its host identity (rf3/host/1) within 300 ms")) << text;
  // Rank 2 waiting after rank 0 published: rank 1 is named alone too.
  store.setString("rf4/host/0", "host-a");
  text = hostExchangeError(store, "rf4", 2, 3);
  EXPECT_TRUE(text.starts_with("rank 1 did not publish its host identity (rf4/host/1)")) << text;
}

// ---- process sets give their keys back -------------------------------------------------------

// `size` engines as threads, each with its own TcpStore client of one TcpStoreServer (as the
// ranks of a job under ringfoldrun): dynamic process sets added, used and removed N times leave
// the server's keys and bytes as they were.
TEST(StoreLifecycle, RemovedProcessSetsGiveTheirKeysBack) {
  constexpr int kSize = 3, kSets = 6;
  TcpStoreServer server("127.0.0.1", 0, "lifecycle-secret");
  std::vector<std::string> errors(kSize, "ok");
  std::atomic<int64_t> baseCount{-1}, baseBytes{-1}, peakCount{0}, endCount{-1}, endBytes{-1};
  std::latch finished(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<engine::Engine> eng;
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), "lifecycle-secret", 10s);
        auto device = transport::createDevice("loopback");
        auto peers = device->connectAll(*store, "rf", r, kSize, 20s);
        auto comm = std::make_unique<Communicator>(r, kSize, std::move(device), std::move(peers), makeCpuReducer());
        comm->setStore(store, "rf");
        comm->setTimeout(20s);
        engine::EngineOptions options;
        options.cycleTimeMs = 0.5;
        options.stallWarning = 0ms;
        options.dynamicProcessSets = true;
        eng = std::make_unique<engine::Engine>(std::move(comm), options);
        auto allreduce = [&](const std::string& name, int set, float expect) {
          std::vector<float> in(4, 1.0f), out(4, 0.0f);
          engine::TensorArgs a;
          a.op = engine::OpType::kAllreduce;
          a.name = name;
          a.dtype = DataType::kFloat32;
          a.shape = {4};
          a.input = in.data();
          a.output = out.data();
          a.processSet = set;
          const engine::Handle h = eng->enqueue(a);
          const engine::Result* res = eng->handles().wait(h, 30000ms);
          if (res == nullptr) throw std::runtime_error(name + ": timed out");
          const engine::Status status = res->status;
          eng->handles().release(h);
          if (!status.ok()) throw std::runtime_error(name + ": " + status.message);
          if (out[0] != expect) throw std::runtime_error(name + ": wrong sum " + std::to_string(out[0]));
        };
        allreduce("start", 0, kSize);  // every rank has met: the global keys are all there
        if (r == 0) {
          baseCount = server.keyCount();
          baseBytes = server.keyBytes();
        }
        for (int i = 0; i < kSets; ++i) {
          // Sets with and without global rank 0 (whose rank 0 deletes), of 2 and 3 ranks.
          std::vector<int> ranks = i % 3 == 0 ? std::vector<int>{0, 1, 2}
                                   : i % 3 == 1 ? std::vector<int>{1, 2} : std::vector<int>{0, 2};
          const int id = eng->addProcessSet(ranks);
          if (std::find(ranks.begin(), ranks.end(), r) != ranks.end()) {
            allreduce("in-set-" + std::to_string(i), id, static_cast<float>(ranks.size()));
          }
          if (r == 0) peakCount = std::max<int64_t>(peakCount, server.keyCount());
          eng->removeProcessSet(id);
        }
        allreduce("end", 0, kSize);  // every rank has removed every set
        if (r == 0) {
          endCount = server.keyCount();
          endBytes = server.keyBytes();
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      finished.arrive_and_wait();
      try {
        eng.reset();
      } catch (const std::exception& e) {
        if (errors[r] == "ok") errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) EXPECT_EQ(errors[r], "ok") << "rank " << r;
  EXPECT_GT(peakCount.load(), baseCount.load()) << "the sets wrote no keys: the test shows nothing";
  EXPECT_EQ(endCount.load(), baseCount.load());
  EXPECT_EQ(endBytes.load(), baseBytes.load());
}

// Two ranks as forked processes meet three times (a re-init, or an elastic job's incarnations
// 1, 2 and 3) through one TcpStoreServer: once incarnation N has met, the keys of the ones
// before it are gone and those of N are there.
TEST(StoreLifecycle, ANewIncarnationDeletesTheKeysOfTheOnesBefore) {
  const std::string secret = "incarnation-secret";
  TcpStoreServer server("127.0.0.1", 0, secret);
  const int port = server.port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(testing::forkChild([&] {
      const std::map<std::string, std::string> env = {
          {"RINGFOLD_RANK", std::to_string(r)}, {"RINGFOLD_SIZE", "2"},
          {"RINGFOLD_LOCAL_RANK", std::to_string(r)}, {"RINGFOLD_LOCAL_SIZE", "2"},
          {"RINGFOLD_STORE_ADDR", "127.0.0.1"}, {"RINGFOLD_STORE_PORT", std::to_string(port)},
          {"RINGFOLD_SECRET", secret}, {"RINGFOLD_STORE_SERVER", "external"}, {"RINGFOLD_LOG_LEVEL", "error"}};
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      try {
        for (int incarnation = 1; incarnation <= 3; ++incarnation) Communicator::fromEnvironment(incarnation).reset();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        return 3;
      }
      return 0;
    }));
  }
  for (pid_t pid : pids) EXPECT_EQ(testing::waitChild(pid, 60s), 0);
  TcpStore store("127.0.0.1", port, secret, 5s);
  EXPECT_FALSE(store.check({"rf/inc1/host/0"}));
  EXPECT_FALSE(store.check({"rf/inc1/host/1"}));
  EXPECT_FALSE(store.check({"rf/inc2/host/0"}));
  EXPECT_TRUE(store.check({"rf/inc3/host/0", "rf/inc3/host/1"}));
  EXPECT_EQ(store.getString("rf/incarnations/deleted", 1s), "2");
}

}  // namespace
}  // namespace ringfold::rendezvous
