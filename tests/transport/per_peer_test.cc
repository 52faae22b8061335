// per_peer without processes: the selector's decisions, and the composite device over two
// loopback children ("near" for ranks of one pretend host, "far" for the others) under a
// Communicator: collectives, one error on every rank, and a peer's abort on one backend that
// must reach ranks which share only the other backend with it.
#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <thread>

#include "collectives/collectives.h"
#include "per_peer_test_util.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/hash_store.h"
#include "support/rank_threads.h"
#include "tcp_test_util.h"
#include "transport/host_identity.h"
#include "transport/loopback/device.h"
#include "transport/per_peer/device.h"

namespace ringfold::test {
namespace {

using transport::per_peer::Policy;
using Clock = std::chrono::steady_clock;

const Policy kNearFar{"near", "far", "", "", ""};

// rdma with a tcp_uring fallback: a pair uses rdma only when both ends can run it.
TEST(PerPeerSelector, RemoteBackendOnlyWhereBothEndsCanRunIt) {
  const Policy rdma{"unix_uring", "rdma", "tcp_uring", "", ""};
  const std::vector<std::string> hosts = {"A", "A", "B", "C"};
  const std::vector<std::string> words = {"rdma", "rdma", "-no RDMA devices found", "rdma"};
  auto backends = transport::per_peer::assignBackends(hosts, 0, rdma);
  const Policy used = transport::per_peer::applyFallback(backends, words, 0, rdma);
  EXPECT_EQ(backends, (std::vector<std::string>{"", "unix_uring", "tcp_uring", "rdma"}));
  EXPECT_EQ(used.remote, "rdma");
  // Rank 2 itself cannot: every remote peer goes through tcp_uring, which becomes its remote.
  Policy mine = rdma;
  mine.remoteUnusable = "no RDMA devices found";
  backends = transport::per_peer::assignBackends(hosts, 2, mine);
  const Policy used2 = transport::per_peer::applyFallback(backends, words, 2, mine);
  EXPECT_EQ(backends, (std::vector<std::string>{"tcp_uring", "tcp_uring", "", "tcp_uring"}));
  EXPECT_EQ(used2.remote, "tcp_uring");
  // Without a fallback nothing moves.
  backends = transport::per_peer::assignBackends(hosts, 0, kNearFar);
  transport::per_peer::applyFallback(backends, words, 0, kNearFar);
  EXPECT_EQ(backends, (std::vector<std::string>{"", "near", "far", "far"}));
}

TEST(PerPeerSelector, SameHostLocalOthersRemote) {
  const std::vector<std::string> hosts = {"A", "A", "B", "B", "-"};
  EXPECT_EQ(transport::per_peer::assignBackends(hosts, 0, kNearFar),
            (std::vector<std::string>{"", "near", "far", "far", "far"}));
  EXPECT_EQ(transport::per_peer::assignBackends(hosts, 3, kNearFar),
            (std::vector<std::string>{"far", "far", "near", "", "far"}));
}

TEST(PerPeerSelector, UnknownHostIsRemoteEvenToAnotherUnknown) {
  const std::vector<std::string> hosts = {"-", "-", "A"};
  EXPECT_EQ(transport::per_peer::assignBackends(hosts, 0, kNearFar), (std::vector<std::string>{"", "far", "far"}));
}

TEST(PerPeerSelector, LocalBackendFromParams) {
  {
    EnvGuard env{{"RINGFOLD_LOCAL_TRANSPORT", ""}};  // unset
    EXPECT_EQ(Policy::fromParams().local, "shm");  // the default, falling back to Unix sockets
    EXPECT_EQ(Policy::fromParams().localFallback, "unix_uring");
  }
  {
    EnvGuard env{{"RINGFOLD_LOCAL_TRANSPORT", "unix"}};
    EXPECT_EQ(Policy::fromParams().local, "unix_uring");
    EXPECT_EQ(Policy::fromParams().localFallback, "");
    EXPECT_EQ(Policy::fromParams().remote, "tcp_uring");
  }
  {
    EnvGuard env{{"RINGFOLD_LOCAL_TRANSPORT", "tcp"}};
    EXPECT_EQ(Policy::fromParams().local, "tcp_uring");
  }
  EnvGuard env{{"RINGFOLD_LOCAL_TRANSPORT", "carrier-pigeon"}};
  try {
    Policy::fromParams();
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RINGFOLD_LOCAL_TRANSPORT='carrier-pigeon' is not shm, unix, tcp or rdma"),
              std::string::npos)
        << e.what();
  }
}

TEST(PerPeerSelector, TestHostIdReplacesTheHostIdentity) {
  {
    EnvGuard env{{"RINGFOLD_TEST_HOST_ID", "h7"}};
    EXPECT_EQ(transport::per_peer::selectionHostId(), "test:h7");
  }
  EnvGuard env;
  const std::string real = transport::hostIdentity();
  EXPECT_EQ(transport::per_peer::selectionHostId(), real.empty() ? "-" : real);
}

TEST(PerPeerSelector, ExchangeThroughTheStore) {
  rendezvous::HashStore store;
  std::vector<std::vector<std::string>> seen(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      seen[r] = transport::per_peer::exchangeHostIds(store, "x", r, 3, "h" + std::to_string(r % 2), 5s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(seen[r], (std::vector<std::string>{"h0", "h1", "h0"}));
  try {
    transport::per_peer::exchangeHostIds(store, "y", 0, 2, "h0", 50ms);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not publish its host identity"), std::string::npos) << e.what();
  }
}

// A loopback device that leaves out the pair {0, 1} (as unix_uring leaves out a peer whose Unix
// connect was refused: both ends return null for it).
class RefusingDevice final : public transport::Device {
 public:
  const char* name() const override { return inner_->name(); }
  using transport::Device::connectAll;
  std::vector<std::unique_ptr<transport::Connection>> connectAll(const transport::ConnectSpec& spec) override {
    auto out = inner_->connectAll(spec);
    if (spec.rank <= 1 && out.size() > 1) out[1 - spec.rank].reset();
    return out;
  }
  std::unique_ptr<transport::MemoryRegion> registerMemory(void* d, size_t n) override {
    return inner_->registerMemory(d, n);
  }
  void abort(transport::ErrorKind k, const std::string& m) override { inner_->abort(k, m); }
  bool aborted() const override { return inner_->aborted(); }
  std::exception_ptr abortReason() const override { return inner_->abortReason(); }
  void progress() override { inner_->progress(); }
  void setWaitHook(std::function<void()> hook) override { inner_->setWaitHook(std::move(hook)); }

 private:
  std::unique_ptr<transport::Device> inner_ = transport::loopback::createDevice();
};

// Ranks as threads; rank r's pretend host is hosts[r]; each backend is a loopback device (the
// near one a RefusingDevice when `refuse`).
std::vector<std::exception_ptr> runHosts(const std::vector<std::string>& hosts,
                                         const std::function<void(Communicator&)>& body, bool refuse = false) {
  rendezvous::HashStore store;
  const int n = static_cast<int>(hosts.size());
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  std::latch done(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        transport::ConnectSpec spec{&store, "pp", r, n, 10s, {}};
        auto c = transport::per_peer::connect(
            spec, kNearFar,
            [refuse](const std::string& backend) -> std::unique_ptr<transport::Device> {
              if (refuse && backend == "near") return std::make_unique<RefusingDevice>();
              return transport::loopback::createDevice();
            },
            hosts[r]);
        comms[r] = std::make_unique<Communicator>(r, n, std::move(c.device), std::move(c.peers), makeCpuReducer());
        comms[r]->setTimeout(10s);
        comms[r]->setSegmentBytes(4096);
        body(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      done.arrive_and_wait();
      comms[r].reset();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(PerPeerDevice, CollectivesOverTwoBackends) {
  std::vector<std::string> names(5);
  auto errors = runHosts({"A", "A", "B", "B", "A"}, [&](Communicator& comm) {
    names[comm.rank()] = comm.device().name();
    EXPECT_EQ(checkCollectives(comm), 0) << "rank " << comm.rank();
  });
  expectAllOk(errors);
  for (const auto& name : names) EXPECT_EQ(name, "per_peer(near+far)");
}

TEST(PerPeerDevice, OneBackendIsNotWrapped) {
  std::vector<std::string> names(3);
  auto errors = runHosts({"A", "A", "A"}, [&](Communicator& comm) {
    names[comm.rank()] = comm.device().name();
    EXPECT_EQ(dynamic_cast<transport::per_peer::Device*>(&comm.device()), nullptr);
    EXPECT_EQ(checkCollectives(comm, 999), 0);
  });
  expectAllOk(errors);
  for (const auto& name : names) EXPECT_EQ(name, "loopback");
}

// Ranks 0 and 1 share a host but near leaves their pair out: both join it through far instead,
// and every collective still works. Rank 0 and 1 now reach each other only through far.
TEST(PerPeerDevice, PeerLeftOutByTheLocalBackendGoesRemote) {
  std::vector<std::string> names(4);
  auto errors = runHosts(
      {"A", "A", "A", "B"},
      [&](Communicator& comm) {
        names[comm.rank()] = comm.device().name();
        EXPECT_EQ(checkCollectives(comm, 4099), 0) << "rank " << comm.rank();
      },
      true);
  expectAllOk(errors);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(names[r], r == 3 ? "loopback" : "per_peer(near+far)") << "rank " << r;
}

// All on one host, near leaving {0, 1} out: ranks 0 and 1 use both backends, rank 2 only near.
TEST(PerPeerDevice, LeftOutPeersOnOneHost) {
  std::vector<std::string> names(3);
  auto errors = runHosts(
      {"A", "A", "A"},
      [&](Communicator& comm) {
        names[comm.rank()] = comm.device().name();
        EXPECT_EQ(checkCollectives(comm, 999), 0) << "rank " << comm.rank();
      },
      true);
  expectAllOk(errors);
  EXPECT_EQ(names[0], "per_peer(near+far)");
  EXPECT_EQ(names[1], "per_peer(near+far)");
  EXPECT_EQ(names[2], "loopback");
}

TEST(PerPeerDevice, OneErrorOnEveryRank) {
  auto errors = runHosts({"A", "A", "B", "B"}, [&](Communicator& comm) {
    std::vector<float> buf(1000, 1.0f);
    AllreduceOptions o;
    o.sendbuf = comm.rank() == 1 ? nullptr : buf.data();
    o.recvbuf = buf.data();
    o.count = buf.size();
    allreduce(comm, o);
  });
  EXPECT_NE(describe(errors[1]).find("allreduce on rank 1: sendbuf is null"), std::string::npos);
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(describe(errors[r]), describe(errors[1])) << "rank " << r;
    EXPECT_TRUE(rftest::holds<InvalidArgument>(errors[r])) << "rank " << r;
  }
}

// Rank 1 aborts its near backend only, then stops driving anything. Ranks 2 and 3 share only
// the far backend with rank 1 and wait on each other over near: they learn of the abort only
// because rank 0's composite spreads it to far and theirs spread it from far to near.
TEST(PerPeerDevice, AbortOnOneBackendReachesRanksOnTheOther) {
  std::vector<double> seconds(4, -1);
  auto errors = runHosts({"A", "A", "B", "B"}, [&](Communicator& comm) {
    auto& device = dynamic_cast<transport::per_peer::Device&>(comm.device());
    const int r = comm.rank();
    const auto start = Clock::now();
    try {
      if (r == 1) {
        for (size_t i = 0; i < device.childCount(); ++i) {
          if (device.label(i) == "near") device.child(i).abort(transport::ErrorKind::kIo, "rank 1 gave up");
        }
        return;
      }
      std::vector<uint8_t> in(64), out(64);
      auto region = device.registerMemory(in.data(), in.size());
      auto outRegion = device.registerMemory(out.data(), out.size());
      const int from = r == 0 ? 1 : 5 - r;  // 0 waits on 1; 2 and 3 on each other (all over near)
      auto recv = comm.peer(from).irecv(*region, 0, 64, 7, 0);
      recv->wait(8s);
    } catch (const Error&) {
      seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
      (void)device.aborted();  // what Communicator::fail asks first: spreads the reason
      throw;
    }
  });
  EXPECT_FALSE(errors[1]);
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(describe(errors[r]), "rank 1 gave up") << "rank " << r;
    EXPECT_LT(seconds[r], 4.0) << "rank " << r;
  }
}

}  // namespace
}  // namespace ringfold::test
