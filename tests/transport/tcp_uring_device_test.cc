// The Device interface's seams for composite devices, on tcp_uring with ranks as threads:
// connecting a subset of peers, abortReason(), progress() and the wait hook.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tcp_test_util.h"
#include "rendezvous/hash_store.h"
#include "transport/liveness/monitor.h"
#include "transport/memory_region.h"

namespace ringfold::test {
namespace {

using transport::PlainMemoryRegion;
using Clock = std::chrono::steady_clock;

// Ranks 0..3 where each connects only the peers of its own parity: one device per parity class,
// as a composite device connects one backend's subset.
TEST(TcpUringDevice, ConnectsOnlyTheSelectedPeers) {
  EnvGuard env;
  rendezvous::HashStore store;
  constexpr int kSize = 4;
  std::vector<std::exception_ptr> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto device = transport::createDevice("tcp_uring");
        transport::ConnectSpec spec;
        spec.store = &store;
        spec.prefix = "subset";
        spec.rank = r;
        spec.size = kSize;
        spec.timeout = 20s;
        spec.peers.assign(kSize, false);
        for (int p = 0; p < kSize; ++p) spec.peers[p] = p % 2 == r % 2;
        auto peers = device->connectAll(spec);
        ASSERT_EQ(peers.size(), static_cast<size_t>(kSize));
        for (int p = 0; p < kSize; ++p) {
          EXPECT_EQ(peers[p] != nullptr, p != r && p % 2 == r % 2) << "rank " << r << " peer " << p;
        }
        const int partner = r ^ 2;
        std::vector<uint8_t> out = patterned(r, 5000), in(5000);
        PlainMemoryRegion outRegion(out.data(), out.size()), inRegion(in.data(), in.size());
        auto send = peers[partner]->isend(outRegion, 0, out.size(), 7);
        auto recv = peers[partner]->irecv(inRegion, 0, in.size(), 7);
        send->wait(20s);
        recv->wait(20s);
        EXPECT_EQ(firstWrong(in, partner, in.size()), -1);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  expectAllOk(errors);
}

// Two devices per rank, as a composite device holds them: unix_uring between ranks 0 and 1,
// tcp_uring to and from rank 2, sharing one liveness monitor that then reaches every peer.
TEST(TcpUringDevice, DevicesShareOneLivenessMonitor) {
  EnvGuard env;
  rendezvous::HashStore store;
  constexpr int kSize = 3;
  std::vector<std::exception_ptr> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto monitor = std::make_shared<transport::liveness::Monitor>();
        auto local = transport::createDevice("unix_uring");
        auto remote = transport::createDevice("tcp_uring");
        local->shareLiveness(monitor);
        remote->shareLiveness(monitor);
        transport::ConnectSpec spec;
        spec.store = &store;
        spec.rank = r;
        spec.size = kSize;
        spec.timeout = 20s;
        spec.prefix = "shared/unix";
        for (int p = 0; p < kSize; ++p) spec.peers.push_back(p < 2 && r < 2);
        auto viaLocal = local->connectAll(spec);
        spec.prefix = "shared/tcp";
        for (int p = 0; p < kSize; ++p) spec.peers[p] = p == 2 || r == 2;
        auto viaRemote = remote->connectAll(spec);
        for (int p = 0; p < kSize; ++p) EXPECT_EQ(monitor->connected(p), p != r) << "rank " << r << " peer " << p;
        EXPECT_EQ(viaLocal[1 - r % 2] != nullptr, r < 2);
        EXPECT_THROW(remote->shareLiveness(monitor), Error);  // after connectAll: too late
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  expectAllOk(errors);
}

TEST(TcpUringDevice, PeerFlagsMustCoverEveryRank) {
  EnvGuard env;
  rendezvous::HashStore store;
  auto device = transport::createDevice("tcp_uring");
  transport::ConnectSpec spec;
  spec.store = &store;
  spec.size = 3;
  spec.peers = {false, true};
  EXPECT_THROW(device->connectAll(spec), Error);
}

// abortReason() is null while the device works, then the error requests fail with: on the rank
// that aborted, and on its peer once progress() has read the ABORT.
TEST(TcpUringDevice, AbortReasonIsTheErrorRequestsFailWith) {
  EnvGuard env;
  auto errors = runRanks(2, [&](Rank& me) {
    EXPECT_EQ(me.device.abortReason(), nullptr);
    if (me.rank == 0) {
      me.device.abort(transport::ErrorKind::kMismatch, "the ranks disagree (test)");
    } else {
      const auto until = Clock::now() + 20s;
      while (me.device.abortReason() == nullptr && Clock::now() < until) {
        me.device.progress();
        std::this_thread::sleep_for(1ms);
      }
    }
    std::exception_ptr reason = me.device.abortReason();
    ASSERT_NE(reason, nullptr) << "rank " << me.rank;
    EXPECT_TRUE(me.device.aborted());
    EXPECT_EQ(describe(reason), "the ranks disagree (test)");
    EXPECT_THROW(std::rethrow_exception(reason), MismatchError);
    std::vector<uint8_t> buf(8);
    PlainMemoryRegion region(buf.data(), buf.size());
    try {
      me.to(1 - me.rank).irecv(region, 0, buf.size(), 1)->wait(5s);
      ADD_FAILURE() << "a request on an aborted device completed";
    } catch (const MismatchError& e) {
      EXPECT_STREQ(e.what(), "the ranks disagree (test)");
    }
  });
  expectAllOk(errors);
}

// A wait that blocks calls the hook often (a composite device drives its other backends there).
TEST(TcpUringDevice, WaitHookRunsWhileAWaitBlocks) {
  EnvGuard env;
  auto errors = runRanks(2, [&](Rank& me) {
    std::vector<uint8_t> buf(64);
    PlainMemoryRegion region(buf.data(), buf.size());
    if (me.rank == 1) {
      std::this_thread::sleep_for(300ms);
      me.to(0).isend(region, 0, buf.size(), 3)->wait(20s);
      return;
    }
    int calls = 0;
    Clock::duration longestGap{};
    Clock::time_point last = Clock::now();
    me.device.setWaitHook([&] {
      const Clock::time_point now = Clock::now();
      longestGap = std::max(longestGap, now - last);
      last = now;
      ++calls;
    });
    const Clock::time_point start = Clock::now();
    me.to(1).irecv(region, 0, buf.size(), 3)->wait(20s);
    const auto waited = Clock::now() - start;
    me.device.setWaitHook(nullptr);
    EXPECT_GE(waited, 200ms);
    EXPECT_GE(calls, 100) << "over " << std::chrono::duration<double>(waited).count() << " s";
    EXPECT_LT(longestGap, 20ms) << "the hook was not called for "
                                << std::chrono::duration<double>(longestGap).count() << " s";
  });
  expectAllOk(errors);
}

}  // namespace
}  // namespace ringfold::test
