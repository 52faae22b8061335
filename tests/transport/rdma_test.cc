// The rdma Device over the fake fabric, ranks as threads (each its own Device and fake endpoint),
// rendezvous through a HashStore: sizes around the eager limit, matching, lanes and ordering,
// mismatches, aborts, timeouts, subsets, the Device seams, copy counts and the registration cache.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>
#include <tuple>

#include "rdma_test_util.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/secret.h"
#include "tcp_test_util.h"
#include "transport/liveness/monitor.h"
#include "transport/memory_region.h"
#include "transport/rdma/device.h"
#include "transport/rdma/fabric_fake.h"
#include "transport/rdma/kept_signals.h"
#include "transport/rdma/registration_cache.h"
#include "transport/rdma/wire.h"

namespace ringfold::test {
namespace {

namespace rdma = transport::rdma;
namespace fake = transport::rdma::fake;
using transport::CheckMismatch;
using transport::ErrorKind;
using transport::PlainMemoryRegion;
using transport::Request;
using Clock = std::chrono::steady_clock;

constexpr size_t kSlotBytes = kRdmaSlotBytes;
constexpr size_t kCap = kSlotBytes - 64;  // the largest eager message

struct Flag {
  std::atomic<bool> up{false};
  void raise() { up = true; }
  bool waitUp(std::chrono::milliseconds t = 10s) {
    auto until = Clock::now() + t;
    while (!up && Clock::now() < until) std::this_thread::sleep_for(1ms);
    return up;
  }
};

rdma::Device& rdmaOf(Rank& me) { return dynamic_cast<rdma::Device&>(me.device); }

std::vector<std::exception_ptr> runRdma(int size, const std::function<void(Rank&)>& body) {
  return runRdmaRanks(size, body, RunOptions{});
}

void waitAll(std::vector<std::unique_ptr<Request>>& reqs, std::chrono::milliseconds timeout = 20s) {
  for (auto& r : reqs) r->wait(timeout);
}

// ---- sizes, lanes, ordering -----------------------------------------------------------------

struct FabricCase {
  int lanes;
  bool ordered;
  bool reorder;
};
void PrintTo(const FabricCase& c, std::ostream* os) { *os << c.lanes << " lanes"; }

class Fabrics : public ::testing::TestWithParam<FabricCase> {};

// Every size around the eager limit and several MiB, both ways at once.
TEST_P(Fabrics, EverySizeArrivesIntactBothWays) {
  RDMA_ENV;
  fake::Faults f;
  f.lanes = GetParam().lanes;
  f.ordered = GetParam().ordered;
  f.reorder = GetParam().reorder;
  FaultGuard faults(f);
  const std::vector<size_t> sizes = {0, 1, kCap - 1, kCap, kCap + 1, kSlotBytes, 100000, (3u << 20) + 7};
  auto errors = runRdma(2, [&](Rank& me) {
    const int peer = 1 - me.rank;
    EXPECT_EQ(rdmaOf(me).fabric()->lanes(), GetParam().lanes);
    std::vector<std::unique_ptr<Buffer>> out, in;
    std::vector<std::unique_ptr<Request>> reqs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(std::make_unique<Buffer>(me.rank * 100 + i, sizes[i]));
      in.push_back(std::make_unique<Buffer>(sizes[i]));
      reqs.push_back(me.to(peer).irecv(in.back()->region, 0, sizes[i], i, sizes[i]));
      reqs.push_back(me.to(peer).isend(out.back()->region, 0, sizes[i], i, sizes[i]));
    }
    waitAll(reqs);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(firstWrong(in[i]->bytes, peer * 100 + i, sizes[i]), -1) << "size " << sizes[i];
    }
    const rdma::Stats s = rdmaOf(me).stats();
    EXPECT_EQ(s.eagerMessages, 4u);
    EXPECT_EQ(s.rendezvousMessages, 4u);
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(Rdma, Fabrics,
                         ::testing::Values(FabricCase{1, true, false}, FabricCase{3, true, false},
                                           FabricCase{3, false, false}, FabricCase{1, true, true},
                                           FabricCase{3, false, true}),
                         [](const auto& info) {
                           const FabricCase& c = info.param;
                           return std::to_string(c.lanes) + "Lanes_" + (c.ordered ? "Ordered" : "Unordered") +
                                  (c.reorder ? "_Reordered" : "");
                         });

// KeptSignals (the guard around loading libfabric and libibverbs): what changed is put back and
// named; what did not is left alone.
void firstHandler(int) {}
void secondHandler(int) {}

TEST(RdmaKeptSignals, PutsBackWhatALibraryChanged) {
  struct sigaction first {}, before {}, second {}, after {};
  first.sa_handler = firstHandler;
  second.sa_handler = secondHandler;
  sigaction(SIGUSR2, &first, &before);
  {
    rdma::KeptSignals kept("the test");
    EXPECT_EQ(kept.restore(), "") << "nothing changed yet";
  }
  rdma::KeptSignals kept("the test");
  sigaction(SIGUSR2, &second, nullptr);
  EXPECT_EQ(kept.restore(), "SIGUSR2");
  sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, firstHandler);
  sigaction(SIGUSR2, &before, nullptr);
}

TEST(Rdma, OffsetsWithinARegionAndRegisteredRegions) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    for (size_t n : {size_t{500}, size_t{200000}}) {
      std::vector<uint8_t> bytes = me.rank == 0 ? patterned(n, 300000) : std::vector<uint8_t>(300000);
      auto region = me.device.registerMemory(bytes.data(), bytes.size());  // an rdma region this time
      if (me.rank == 0) {
        me.to(1).isend(*region, 1234, n, 1)->wait(10s);
      } else {
        me.to(0).irecv(*region, 17, n, 1)->wait(10s);
        auto want = patterned(n, 300000);
        EXPECT_EQ(std::memcmp(bytes.data() + 17, want.data() + 1234, n), 0);
        EXPECT_EQ(bytes[16], 0);
        EXPECT_EQ(bytes[17 + n], 0);
      }
    }
    Buffer b(10);
    EXPECT_THROW(me.to(1 - me.rank).isend(b.region, 5, 6, 2), InvalidArgument);
  });
  expectAllOk(errors);
}

// ---- matching -------------------------------------------------------------------------------

// Messages of 7 tags, eager and rendezvous, received tag by tag in another order than sent.
TEST(Rdma, ManyTagsInterleavedFifoPerTag) {
  RDMA_ENV;
  FaultGuard faults;
  const int kMessages = 140;
  auto sizeOf = [](int i) -> size_t { return (i % 5 == 0) ? 70000 + i : (i % 3 == 0 ? 0 : 37 * i); };
  auto errors = runRdma(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs(kMessages);
    std::vector<std::unique_ptr<Request>> reqs;
    if (me.rank == 0) {
      for (int i = 0; i < kMessages; ++i) {
        bufs[i] = std::make_unique<Buffer>(i, sizeOf(i));
        reqs.push_back(me.to(1).isend(bufs[i]->region, 0, sizeOf(i), i % 7, sizeOf(i)));
      }
    } else {
      for (int tag = 6; tag >= 0; --tag) {
        for (int i = tag; i < kMessages; i += 7) {
          bufs[i] = std::make_unique<Buffer>(sizeOf(i));
          reqs.push_back(me.to(0).irecv(bufs[i]->region, 0, sizeOf(i), tag, sizeOf(i)));
        }
      }
    }
    waitAll(reqs);
    if (me.rank == 1) {
      for (int i = 0; i < kMessages; ++i) EXPECT_EQ(firstWrong(bufs[i]->bytes, i, sizeOf(i)), -1) << "message " << i;
    }
  });
  expectAllOk(errors);
}

// One tag, many messages over 3 unordered, reordering lanes: they pair up in sending order.
TEST(Rdma, EqualTagsPairUpInOrderWhateverTheDeliveryOrder) {
  RDMA_ENV;
  fake::Faults f;
  f.lanes = 3;
  f.ordered = false;
  f.reorder = true;
  FaultGuard faults(f);
  const int kMessages = 200;
  auto sizeOf = [](int i) -> size_t { return (i * 7919) % 5 == 0 ? 20000 + i : (i * 31) % 3000; };
  auto errors = runRdma(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs(kMessages);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int i = 0; i < kMessages; ++i) {
      if (me.rank == 0) {
        bufs[i] = std::make_unique<Buffer>(i, sizeOf(i));
        reqs.push_back(me.to(1).isend(bufs[i]->region, 0, sizeOf(i), 5, sizeOf(i)));
      } else {
        bufs[i] = std::make_unique<Buffer>(sizeOf(i));
        reqs.push_back(me.to(0).irecv(bufs[i]->region, 0, sizeOf(i), 5, sizeOf(i)));
      }
    }
    waitAll(reqs);
    if (me.rank == 1) {
      for (int i = 0; i < kMessages; ++i) EXPECT_EQ(firstWrong(bufs[i]->bytes, i, sizeOf(i)), -1) << "message " << i;
    }
  });
  expectAllOk(errors);
}

// Tags 1 (rendezvous) and 2 (eager) arrive before their receives: the receiver first waits for
// tag 3, sent after them. The eager one is then already complete; the other needs its transfer.
TEST(Rdma, MessagesArriveBeforeTheirReceives) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    const size_t big = (1u << 20) + 1, small = 333;
    if (me.rank == 0) {
      Buffer a(1, big), b(2, small), c(3, 10);
      std::vector<std::unique_ptr<Request>> reqs;
      reqs.push_back(me.to(1).isend(a.region, 0, big, 1));
      reqs.push_back(me.to(1).isend(b.region, 0, small, 2));
      reqs.push_back(me.to(1).isend(c.region, 0, 10, 3));
      waitAll(reqs);
      return;
    }
    Buffer a(big), b(small), c(10);
    me.to(0).irecv(c.region, 0, 10, 3)->wait(10s);
    const rdma::Stats before = rdmaOf(me).stats();
    auto rb = me.to(0).irecv(b.region, 0, small, 2);
    EXPECT_TRUE(rb->test());  // already here: completes without waiting
    auto ra = me.to(0).irecv(a.region, 0, big, 1);
    ra->wait(10s);
    EXPECT_EQ(firstWrong(a.bytes, 1, big), -1);
    EXPECT_EQ(firstWrong(b.bytes, 2, small), -1);
    EXPECT_EQ(firstWrong(c.bytes, 3, 10), -1);
    const rdma::Stats after = rdmaOf(me).stats();
    // The big one comes straight into its receive, unless this rank blocked long enough, waiting
    // for c, to take it into a bounce buffer (then it is copied out of there once).
    const uint64_t bounced = rdmaOf(me).stats().bouncedMessages > 0 ? big : 0;
    EXPECT_EQ(after.unexpectedCopyBytes - before.unexpectedCopyBytes, small + bounced);  // out of its buffer
    EXPECT_EQ(after.bytesCopied - before.bytesCopied, small + bounced);
  });
  expectAllOk(errors);
}

// Every rank waits for its rendezvous send to the next rank to complete before it posts the
// receive from the previous one. Over TCP a send completes without its receive (the kernel
// buffers it); here the receiver must take an unmatched request to send into a bounce buffer of
// its own when it blocks, or the ring waits on itself forever.
TEST(Rdma, SendsCompleteBeforeTheirReceivesArePosted) {
  RDMA_ENV;
  FaultGuard faults;
  constexpr int kN = 3;
  const size_t big = (1u << 20) + 3;
  std::atomic<uint64_t> bounced{0};
  auto errors = runRdma(kN, [&](Rank& me) {
    const int next = (me.rank + 1) % kN, prev = (me.rank + kN - 1) % kN;
    Buffer out(10 + me.rank, big), in(big);
    me.to(next).isend(out.region, 0, big, 5)->wait(10s);
    me.to(prev).irecv(in.region, 0, big, 5)->wait(10s);
    EXPECT_EQ(firstWrong(in.bytes, 10 + prev, big), -1);
    const rdma::Stats s = rdmaOf(me).stats();
    EXPECT_LE(s.bouncedMessages, 1u);
    EXPECT_EQ(s.unexpectedCopyBytes, big * s.bouncedMessages);  // one copy out of a bounce buffer
    bounced += s.bouncedMessages;
  });
  expectAllOk(errors);
  EXPECT_GE(bounced.load(), 1u);  // at least one rank had to, to break the cycle
}

TEST(Rdma, ReceivePostedBeforeTheMessage) {
  RDMA_ENV;
  FaultGuard faults;
  Flag posted;
  auto errors = runRdma(2, [&](Rank& me) {
    for (size_t n : {size_t{1000}, size_t{(2u << 20) + 5}}) {
      if (me.rank == 1) {
        Buffer in(n);
        auto r = me.to(0).irecv(in.region, 0, n, 4);
        EXPECT_FALSE(r->test());
        posted.raise();
        r->wait(10s);
        EXPECT_EQ(firstWrong(in.bytes, 4, n), -1);
        posted.up = false;
        me.to(0).isend(in.region, 0, 0, 5)->wait(10s);  // next round
      } else {
        posted.waitUp();
        Buffer out(4, n);
        me.to(1).isend(out.region, 0, n, 4)->wait(10s);
        me.to(1).irecv(out.region, 0, 0, 5)->wait(10s);
      }
    }
  });
  expectAllOk(errors);
}

// Many rounds both ways with more messages in flight than slots: credits run out and come back.
TEST(Rdma, FullDuplexManyRoundsThroughFewSlots) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    const int peer = 1 - me.rank;
    const size_t sizes[] = {(1u << 20) + 3, 100, 30000, 0, 4000};
    for (int round = 0; round < 6; ++round) {
      std::vector<std::unique_ptr<Buffer>> out, in;
      std::vector<std::unique_ptr<Request>> reqs;
      for (int k = 0; k < 4; ++k) {
        for (size_t i = 0; i < 5; ++i) {
          uint64_t tag = k * 10 + i;
          out.push_back(std::make_unique<Buffer>(me.rank * 1000 + round * 100 + tag, sizes[i]));
          in.push_back(std::make_unique<Buffer>(sizes[i]));
          reqs.push_back(me.to(peer).isend(out.back()->region, 0, sizes[i], tag));
          reqs.push_back(me.to(peer).irecv(in.back()->region, 0, sizes[i], tag));
        }
      }
      waitAll(reqs);
      for (size_t j = 0; j < in.size(); ++j) {
        uint64_t tag = (j / 5) * 10 + j % 5;
        EXPECT_EQ(firstWrong(in[j]->bytes, peer * 1000 + round * 100 + tag, in[j]->bytes.size()), -1);
      }
    }
  });
  expectAllOk(errors);
}

class Mesh : public ::testing::TestWithParam<int> {};

TEST_P(Mesh, EveryPairExchanges) {
  RDMA_ENV;
  FaultGuard faults;
  const int n = GetParam();
  auto errors = runRdma(n, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> out(n), in(n);
    std::vector<std::unique_ptr<Request>> reqs;
    auto sizeOf = [](int from, int to) -> size_t { return 1000 + 150001 * ((from + 2 * to) % 3); };
    for (int p = 0; p < n; ++p) {
      if (p == me.rank) continue;
      out[p] = std::make_unique<Buffer>(me.rank * 10 + p, sizeOf(me.rank, p));
      in[p] = std::make_unique<Buffer>(sizeOf(p, me.rank));
      reqs.push_back(me.to(p).irecv(in[p]->region, 0, sizeOf(p, me.rank), 77));
      reqs.push_back(me.to(p).isend(out[p]->region, 0, sizeOf(me.rank, p), 77));
    }
    waitAll(reqs);
    for (int p = 0; p < n; ++p) {
      if (p == me.rank) continue;
      EXPECT_EQ(firstWrong(in[p]->bytes, p * 10 + me.rank, sizeOf(p, me.rank)), -1) << "from " << p;
    }
    EXPECT_EQ(me.peers[me.rank], nullptr);
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(Rdma, Mesh, ::testing::Values(3, 5));

TEST(Rdma, SingleRankHasNoPeersAndOpensNoFabric) {
  rendezvous::HashStore store;
  rdma::Options o;
  o.fabric = "fake";
  auto device = rdma::createDevice(o);
  EXPECT_STREQ(device->name(), "rdma");
  auto peers = device->connectAll(store, "one", 0, 1, 5s);
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0], nullptr);
  EXPECT_TRUE(store.check({"one/addr/0"}));
  EXPECT_EQ(dynamic_cast<rdma::Device&>(*device).fabric(), nullptr);
  EXPECT_FALSE(device->aborted());
}

TEST(Rdma, UnknownFabricNameIsRefused) {
  rdma::Options o;
  o.fabric = "carrier-pigeon";
  EXPECT_THROW(rdma::createDevice(o), InvalidArgument);
}

// ---- mismatches, aborts, timeouts -------------------------------------------------------------

// Rank 0 sends `sent` bytes with check 7; rank 1 receives (len, check), posted before the
// message arrives or after it was buffered. The receiver fails with CheckMismatch; the sender's
// device fails too, with the same error, within a bounded time.
void expectMismatch(size_t sent, size_t len, uint64_t check, bool postFirst) {
  RDMA_ENV;
  FaultGuard faults;
  Flag posted, answered;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(std::max(sent, len) + 200);
    if (me.rank == 0) {
      if (postFirst) posted.waitUp();
      auto s = me.to(1).isend(b.region, 0, sent, 3, 7);
      auto marker = me.to(1).isend(b.region, 0, 1, 4, 0);
      try {
        s->wait(10s);
        marker->wait(10s);
        // An eager send completed before the receiver compared it: the device fails soon after.
        const auto until = Clock::now() + 10s;
        while (me.device.abortReason() == nullptr && Clock::now() < until) {
          me.device.progress();
          std::this_thread::sleep_for(1ms);
        }
        ASSERT_NE(me.device.abortReason(), nullptr) << "the sender never learnt of the mismatch";
        std::rethrow_exception(me.device.abortReason());
      } catch (const CheckMismatch& e) {
        EXPECT_EQ(e.tag, 3u);
        EXPECT_EQ(e.actualLength, sent);
        EXPECT_EQ(e.expectedLength, len);
        EXPECT_EQ(e.expectedCheck, check);
        EXPECT_EQ(e.actualCheck, 7u);
      }
      EXPECT_FALSE(me.device.aborted());
      answered.raise();
      return;
    }
    std::unique_ptr<Request> r;
    if (postFirst) {
      r = me.to(0).irecv(b.region, 0, len, 3, check);
      posted.raise();
    } else {
      me.to(0).irecv(b.region, sent + 100, 1, 4, 0)->wait(10s);  // tag 3 is here by now
    }
    try {
      if (!r) r = me.to(0).irecv(b.region, 0, len, 3, check);
      r->wait(10s);
      ADD_FAILURE() << "expected CheckMismatch";
    } catch (const CheckMismatch& e) {
      EXPECT_EQ(e.peerRank, 0);
      EXPECT_EQ(e.tag, 3u);
      EXPECT_EQ(e.expectedLength, len);
      EXPECT_EQ(e.actualLength, sent);
      EXPECT_EQ(e.expectedCheck, check);
      EXPECT_EQ(e.actualCheck, 7u);
    }
    EXPECT_THROW(me.to(0).irecv(b.region, 0, 1, 99), CheckMismatch);  // poisoned
    answered.waitUp();  // the answer lands only while this rank's fabric is open
  });
  expectAllOk(errors);
}

TEST(RdmaFailure, EagerLengthMismatchPostedFirst) { expectMismatch(100, 150, 7, true); }
TEST(RdmaFailure, EagerLengthMismatchBuffered) { expectMismatch(100, 150, 7, false); }
TEST(RdmaFailure, EagerCheckMismatchPostedFirst) { expectMismatch(100, 100, 8, true); }
TEST(RdmaFailure, EagerCheckMismatchBuffered) { expectMismatch(1000, 1000, 8, false); }
TEST(RdmaFailure, RendezvousLengthMismatchPostedFirst) { expectMismatch(300000, 300001, 7, true); }
TEST(RdmaFailure, RendezvousCheckMismatchBuffered) { expectMismatch(300000, 300000, 9, false); }

TEST(RdmaFailure, AbortReachesEveryPeerWithTheSameMessage) {
  RDMA_ENV;
  FaultGuard faults;
  const std::string text = "allreduce: rank 0 was given 12 elements, rank 1 was given 13";
  Flag ready1, ready2;
  auto errors = runRdma(3, [&](Rank& me) {
    Buffer b(1 << 20);
    if (me.rank == 0) {
      ready1.waitUp();
      ready2.waitUp();
      me.device.abort(ErrorKind::kMismatch, text);
      EXPECT_TRUE(me.device.aborted());
      EXPECT_THROW(me.to(1).isend(b.region, 0, 10, 1), MismatchError);
      me.device.abort(ErrorKind::kIo, "a second abort is ignored");
      try {
        me.to(2).irecv(b.region, 0, 10, 1);
        ADD_FAILURE() << "expected MismatchError";
      } catch (const MismatchError& e) {
        EXPECT_EQ(std::string(e.what()), text);
      }
      return;
    }
    int other = 3 - me.rank;  // 1 <-> 2: never sent
    auto r = me.to(other).irecv(b.region, 0, 1 << 20, 5);
    (me.rank == 1 ? ready1 : ready2).raise();
    try {
      r->wait(20s);
      ADD_FAILURE() << "expected MismatchError";
    } catch (const MismatchError& e) {
      EXPECT_EQ(std::string(e.what()), text);
    }
    EXPECT_TRUE(me.device.aborted());
  });
  expectAllOk(errors);
}

TEST(RdmaFailure, AbortOfKindIoNamesTheAbortingRank) {
  RDMA_ENV;
  FaultGuard faults;
  Flag ready;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 1) {
      ready.waitUp();
      me.device.abort(ErrorKind::kIo, "rank 1 gives up");
      return;
    }
    auto r = me.to(1).irecv(b.region, 0, 64, 1);
    ready.raise();
    try {
      r->wait(20s);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_EQ(e.peerRank(), 1);
      EXPECT_EQ(std::string(e.what()), "rank 1 gives up");
    }
  });
  expectAllOk(errors);
}

// A wait that passes its timeout names the silent peer; the device is poisoned afterwards.
TEST(RdmaFailure, SilentPeerTimesOutNamingIt) {
  RDMA_ENV;
  FaultGuard faults;
  Flag done;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      done.waitUp(20s);
      return;
    }
    auto other = me.to(0).irecv(b.region, 0, 8, 2);
    const auto start = Clock::now();
    try {
      me.to(0).irecv(b.region, 8, 8, 1)->wait(300ms);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_EQ(e.peerRank(), 0);
      const std::string what = e.what();
      EXPECT_NE(what.find("timed out"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("(the caller's limit is 0.3 s)"), std::string::npos) << what;
    }
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_THROW(other->test(), IoError);
    EXPECT_THROW(me.to(0).isend(b.region, 0, 1, 3), IoError);
    done.raise();
  });
  expectAllOk(errors);
}

// Two ranks each wait for the other: rank 1's WAITING notice (a kNotice slot) reaches rank 0,
// whose timeout then says the ranks run different collectives.
TEST(RdmaFailure, MutualWaitIsReportedThroughNotices) {
  RDMA_ENV;
  FaultGuard faults;
  Flag done;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(64);
    try {
      me.to(1 - me.rank).irecv(b.region, 0, 8, 1)->wait(me.rank == 0 ? 2s : 1s);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peerRank(), 1 - me.rank) << what;
      if (me.rank == 0) {
        EXPECT_NE(what.find("which waits for it: the ranks are running different collectives"), std::string::npos)
            << what;
      }
    }
    if (me.rank == 0) done.raise();
    if (me.rank == 1) done.waitUp();  // rank 0 hears rank 1's notice while rank 1's fabric is open
  });
  expectAllOk(errors);
}

// A third rank that went silent is blamed by the rank stuck behind it: rank 1 waits for rank 2
// (and says so); rank 0, waiting for rank 1, follows that notice to rank 2.
TEST(RdmaFailure, BlameFollowsNoticesToTheSilentRank) {
  RDMA_ENV;
  FaultGuard faults;
  Flag done;
  auto errors = runRdma(3, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 2) {
      done.waitUp(20s);
      return;
    }
    try {
      me.to(me.rank + 1).irecv(b.region, 0, 8, 1)->wait(me.rank == 0 ? 2s : 3s);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      const std::string what = e.what();
      if (me.rank == 0) {
        EXPECT_EQ(e.peerRank(), 2) << what;
        EXPECT_NE(what.find("rank 1 is alive but said it had waited"), std::string::npos) << what;
        done.raise();
      }
    }
  });
  expectAllOk(errors);
}

double threadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Not a timing test: only that a waiting rank blocks instead of spinning.
TEST(RdmaFailure, WaitingRankSleeps) {
  RDMA_ENV;
  FaultGuard faults;
  Flag done;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      done.waitUp(20s);
      return;
    }
    const double cpu0 = threadCpuSeconds();
    const auto wall0 = Clock::now();
    EXPECT_THROW(me.to(0).irecv(b.region, 0, 8, 1)->wait(1s), IoError);
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpu = threadCpuSeconds() - cpu0;
    EXPECT_LT(cpu, 0.3 * wall) << "the waiting thread used " << cpu << " s of CPU in " << wall << " s";
    done.raise();
  });
  expectAllOk(errors);
}

TEST(RdmaFailure, APeerThatNeverPublishesIsNamed) {
  RDMA_ENV;
  FaultGuard faults;
  rendezvous::HashStore store;
  rdma::Options o;
  o.opened = fake::open(0, 2);
  auto device = rdma::createDevice(o);
  try {
    device->connectAll(store, "alone", 0, 2, 300ms);
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

// Destroying requests and devices with transfers in flight is safe (and fails the device).
TEST(RdmaFailure, DestroyingPendingRequestsAndDevicesIsSafe) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(me.rank, 2 << 20);
    {
      auto r = me.to(1 - me.rank).irecv(b.region, 0, 1 << 20, 1);
      auto s = me.to(1 - me.rank).isend(b.region, 0, 2 << 20, 2);
    }  // destroyed pending: the device fails
    EXPECT_NE(me.device.abortReason(), nullptr);
    EXPECT_THROW(me.to(1 - me.rank).isend(b.region, 0, 8, 3), IoError);
  });
  expectAllOk(errors);
}

// ---- the Device seams -----------------------------------------------------------------------

TEST(RdmaDevice, ConnectsOnlyTheSelectedPeers) {
  RDMA_ENV;
  FaultGuard faults;
  rendezvous::HashStore store;
  constexpr int kSize = 4;
  std::vector<std::exception_ptr> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        rdma::Options o;
        o.opened = fake::open(r, kSize);
        auto device = rdma::createDevice(o);
        transport::ConnectSpec spec;
        spec.store = &store;
        spec.prefix = "subset";
        spec.rank = r;
        spec.size = kSize;
        spec.timeout = 20s;
        spec.peers.assign(kSize, false);
        for (int p = 0; p < kSize; ++p) spec.peers[p] = p % 2 == r % 2;
        auto peers = device->connectAll(spec);
        for (int p = 0; p < kSize; ++p) EXPECT_EQ(peers[p] != nullptr, p != r && p % 2 == r % 2) << r << "->" << p;
        const int partner = r ^ 2;
        Buffer out(r, 50000), in(50000);
        auto send = peers[partner]->isend(out.region, 0, 50000, 7);
        auto recv = peers[partner]->irecv(in.region, 0, 50000, 7);
        send->wait(20s);
        recv->wait(20s);
        EXPECT_EQ(firstWrong(in.bytes, partner, 50000), -1);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  expectAllOk(errors);
}

// Two rdma devices per rank share one liveness monitor (as a composite's children do): each
// attaches the peers it reaches, and together they reach every peer.
TEST(RdmaDevice, DevicesShareOneLivenessMonitor) {
  RDMA_ENV;
  FaultGuard faults;
  rendezvous::HashStore store;
  constexpr int kSize = 3;
  std::vector<std::exception_ptr> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto monitor = std::make_shared<transport::liveness::Monitor>();
        rdma::Options o;
        o.opened = fake::open(r, kSize);
        auto first = rdma::createDevice(o);
        o.opened = fake::open(r, kSize);
        auto second = rdma::createDevice(o);
        first->shareLiveness(monitor);
        second->shareLiveness(monitor);
        transport::ConnectSpec spec;
        spec.store = &store;
        spec.rank = r;
        spec.size = kSize;
        spec.timeout = 20s;
        spec.prefix = "shared/a";
        for (int p = 0; p < kSize; ++p) spec.peers.push_back(p < 2 && r < 2);
        auto viaFirst = first->connectAll(spec);
        spec.prefix = "shared/b";
        for (int p = 0; p < kSize; ++p) spec.peers[p] = p == 2 || r == 2;
        auto viaSecond = second->connectAll(spec);
        for (int p = 0; p < kSize; ++p) EXPECT_EQ(monitor->connected(p), p != r) << "rank " << r << " peer " << p;
        EXPECT_THROW(second->shareLiveness(monitor), Error);  // after connectAll: too late
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  expectAllOk(errors);
}

TEST(RdmaDevice, AbortReasonIsTheErrorRequestsFailWith) {
  RDMA_ENV;
  FaultGuard faults;
  Flag checked;
  auto errors = runRdma(2, [&](Rank& me) {
    EXPECT_EQ(me.device.abortReason(), nullptr);
    if (me.rank == 0) {
      checked.waitUp();
      me.device.abort(ErrorKind::kMismatch, "the ranks disagree (test)");
    } else {
      checked.raise();
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
    Buffer b(8);
    EXPECT_THROW(me.to(1 - me.rank).irecv(b.region, 0, 8, 1)->wait(5s), MismatchError);
  });
  expectAllOk(errors);
}

TEST(RdmaDevice, WaitHookRunsWhileAWaitBlocks) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer buf(64);
    if (me.rank == 1) {
      std::this_thread::sleep_for(300ms);
      me.to(0).isend(buf.region, 0, 64, 3)->wait(20s);
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
    me.to(1).irecv(buf.region, 0, 64, 3)->wait(20s);
    const auto waited = Clock::now() - start;
    me.device.setWaitHook(nullptr);
    EXPECT_GE(waited, 200ms);
    EXPECT_GE(calls, 100);
    EXPECT_LT(longestGap, 20ms);
  });
  expectAllOk(errors);
}

// ---- copies and registrations ---------------------------------------------------------------

// Rendezvous copies nothing; an eager message into a posted receive is copied once (the receiver
// out of its slot) and not at all by the sender when the fabric orders writes.
TEST(RdmaCopies, RendezvousCopiesNothingAndEagerAtMostOnce) {
  RDMA_ENV;
  FaultGuard faults;
  Flag posted;
  auto errors = runRdma(2, [&](Rank& me) {
    const size_t big = 3 << 20, small = 3000;
    Buffer a(me.rank == 0 ? Buffer(1, big) : Buffer(big)), b(me.rank == 0 ? Buffer(2, small) : Buffer(small));
    const rdma::Stats s0 = rdmaOf(me).stats();
    if (me.rank == 0) {
      posted.waitUp();
      me.to(1).isend(a.region, 0, big, 1)->wait(10s);
      me.to(1).isend(b.region, 0, small, 2)->wait(10s);
    } else {
      auto ra = me.to(0).irecv(a.region, 0, big, 1);
      auto rb = me.to(0).irecv(b.region, 0, small, 2);
      posted.raise();
      ra->wait(10s);
      rb->wait(10s);
      EXPECT_EQ(firstWrong(a.bytes, 1, big), -1);
      EXPECT_EQ(firstWrong(b.bytes, 2, small), -1);
    }
    const rdma::Stats s = rdmaOf(me).stats();
    const uint64_t copied = s.bytesCopied - s0.bytesCopied;
    const uint64_t moved = (s.bytesSent - s0.bytesSent) + (s.bytesReceived - s0.bytesReceived);
    EXPECT_EQ(moved, big + small);
    std::printf("rank %d: %llu bytes copied for %llu bytes moved (%.4f per byte; eager %zu, rendezvous %zu)\n", me.rank,
                static_cast<unsigned long long>(copied), static_cast<unsigned long long>(moved),
                static_cast<double>(copied) / moved, small, big);
    EXPECT_EQ(copied, me.rank == 0 ? 0u : small);  // the receiver's one copy of the eager message
    EXPECT_EQ(s.stagingCopyBytes - s0.stagingCopyBytes, 0u);
  });
  expectAllOk(errors);
}

// An unordered fabric: the eager payload goes through staging (one copy each side).
TEST(RdmaCopies, UnorderedEagerCopiesOnceEachSide) {
  RDMA_ENV;
  fake::Faults f;
  f.ordered = false;
  FaultGuard faults(f);
  auto errors = runRdma(2, [&](Rank& me) {
    Buffer b(me.rank == 0 ? Buffer(9, 2000) : Buffer(2000));
    if (me.rank == 0) {
      me.to(1).isend(b.region, 0, 2000, 1)->wait(10s);
      EXPECT_EQ(rdmaOf(me).stats().stagingCopyBytes, 2000u);
    } else {
      me.to(0).irecv(b.region, 0, 2000, 1)->wait(10s);
      EXPECT_EQ(firstWrong(b.bytes, 9, 2000), -1);
      EXPECT_LE(rdmaOf(me).stats().receiveCopyBytes + rdmaOf(me).stats().unexpectedCopyBytes, 2u * 2000);
    }
  });
  expectAllOk(errors);
}

TEST(RdmaRegistrations, SecondRegistrationOfABufferHitsTheCache) {
  RDMA_ENV;
  FaultGuard faults;
  auto errors = runRdma(2, [&](Rank& me) {
    std::vector<uint8_t> bytes(1 << 20);
    const rdma::Stats s0 = rdmaOf(me).stats();
    { auto r1 = me.device.registerMemory(bytes.data(), bytes.size()); }
    { auto r2 = me.device.registerMemory(bytes.data() + 4096, 8192); }  // inside the first: a hit
    const rdma::Stats s = rdmaOf(me).stats();
    EXPECT_EQ(s.regMisses - s0.regMisses, 1u);
    EXPECT_EQ(s.regHits - s0.regHits, 1u);
    EXPECT_EQ(s.registrations - s0.registrations, 1u);
  });
  expectAllOk(errors);
}

// The cache alone over a fake fabric: hits, unions, the LRU budget and a budget of 0.
TEST(RdmaRegistrations, CacheKeepsUnusedEntriesWithinItsBudget) {
  FaultGuard faults;
  auto fabric = fake::open(0, 1);
  const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* raw = nullptr;
  ASSERT_EQ(posix_memalign(&raw, kPage, 64 * kPage), 0);
  std::unique_ptr<uint8_t, decltype(&free)> memory(static_cast<uint8_t*>(raw), &free);
  auto page = [&](size_t i) { return memory.get() + i * kPage; };
  rdma::RegistrationCache cache(*fabric, 3 * kPage);
  auto* a = cache.acquire(page(0), kPage);
  auto* a2 = cache.acquire(page(0) + 100, 50);
  EXPECT_EQ(a, a2);
  EXPECT_EQ(cache.counters().hits, 1u);
  cache.release(a2);
  cache.release(a);
  EXPECT_EQ(cache.idleBytes(), kPage);
  EXPECT_EQ(cache.counters().deregistrations, 0u);
  auto* b = cache.acquire(page(10), 2 * kPage);
  cache.release(b);  // idle: 3 pages, within the budget
  EXPECT_EQ(cache.counters().deregistrations, 0u);
  auto* c = cache.acquire(page(20), kPage);
  cache.release(c);  // 4 pages idle: the least recently used (a) goes
  EXPECT_EQ(cache.counters().deregistrations, 1u);
  EXPECT_EQ(cache.idleBytes(), 3 * kPage);
  // Overlapping b without being covered by it: the union is registered, b leaves.
  auto* d = cache.acquire(page(11), 2 * kPage);
  EXPECT_LE(d->registration().data, static_cast<void*>(page(10)));
  EXPECT_EQ(cache.counters().deregistrations, 2u);
  auto* inside = cache.acquire(page(10), 3 * kPage);
  EXPECT_EQ(inside, d);
  cache.release(inside);
  cache.release(d);
  EXPECT_EQ(cache.counters().registrations, 4u);

  rdma::RegistrationCache none(*fabric, 0);  // 0: deregistered when the last use ends
  auto* e = none.acquire(page(30), 100);
  auto* e2 = none.acquire(page(30), 200);
  EXPECT_EQ(e, e2);
  none.release(e);
  EXPECT_EQ(none.counters().deregistrations, 0u);
  none.release(e2);
  EXPECT_EQ(none.counters().deregistrations, 1u);
  EXPECT_EQ(none.cachedEntries(), 0u);
}

// A region registered before connectAll gets its registration at first use.
TEST(RdmaRegistrations, RegionMadeBeforeConnectAll) {
  RDMA_ENV;
  FaultGuard faults;
  rendezvous::HashStore store;
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        rdma::Options o;
        o.opened = fake::open(r, 2);
        auto device = rdma::createDevice(o);
        std::vector<uint8_t> bytes = r == 0 ? patterned(5, 200000) : std::vector<uint8_t>(200000);
        auto region = device->registerMemory(bytes.data(), bytes.size());
        auto peers = device->connectAll(store, "early", r, 2, 20s);
        if (r == 0) {
          peers[1]->isend(*region, 0, bytes.size(), 1)->wait(10s);
        } else {
          peers[0]->irecv(*region, 0, bytes.size(), 1)->wait(10s);
          EXPECT_EQ(firstWrong(bytes, 5, bytes.size()), -1);
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  expectAllOk(errors);
}

// ---- a peer played by hand ---------------------------------------------------------------------
// Rank 0 is a real rdma Device over the fake fabric; rank 1 drives a fake Fabric by hand: it
// publishes its address blob (`ring` bent where a test says), says hello, and writes slots into
// rank 0's ring that a correct peer never writes (the defects tests/fuzz/rdma_slots_fuzz found).
struct HandPeer {
  static constexpr uint32_t kSlots = 8;
  rendezvous::HashStore store;
  std::unique_ptr<transport::Device> device;
  std::vector<std::unique_ptr<transport::Connection>> connections;
  std::unique_ptr<rdma::Fabric> fabric = fake::open(1, 2);
  std::vector<std::byte> ring = std::vector<std::byte>(kSlots * kSlotBytes);
  std::vector<std::byte> staging = std::vector<std::byte>(64 * kSlotBytes);
  rdma::Registration ringReg, stagingReg;
  rdma::RemoteAddress remote;  // rank 0's ring for rank 1
  uint64_t position = 0;
  std::exception_ptr error;  // rank 0's connectAll

  explicit HandPeer(uint32_t announcedSlots = kSlots, uint32_t announcedSlotBytes = kSlotBytes) {
    rdma::Options o;
    o.fabric = "fake";
    device = rdma::createDevice(o);
    ringReg = fabric->registerMemory(ring.data(), ring.size(), rdma::MemoryKind::kHost);
    stagingReg = fabric->registerMemory(staging.data(), staging.size(), rdma::MemoryKind::kHost);
    std::atomic<bool> done{false};
    std::thread rank0([&] {
      try {
        connections = device->connectAll(store, "hand", 0, 2, 10s);
      } catch (...) {
        error = std::current_exception();
      }
      done = true;
    });
    const std::string address = fabric->localAddress(0);
    const std::string blob = detail::concat(
        "ringfold-rdma 1 fake 1 1 2\n0 ", announcedSlots, ' ', announcedSlotBytes, ' ', ringReg.remoteBase, ' ',
        ringReg.rkey, ' ', rendezvous::toHex(reinterpret_cast<const uint8_t*>(address.data()), address.size()), '\n');
    store.set("hand/addr/1", std::vector<uint8_t>(blob.begin(), blob.end()));
    const auto theirs = store.get("hand/addr/0", 10s);
    std::istringstream in(std::string(theirs.begin(), theirs.end()));
    std::string line, hex;
    std::getline(in, line);
    int q = -1;
    uint32_t slots = 0, slotBytes = 0;
    in >> q >> slots >> slotBytes >> remote.address >> remote.rkey >> hex;
    fabric->insertPeer(0, rendezvous::fromHex(hex));
    fabric->postImmReceives(0, 1 << 16);
    store.set("hand/ready/1", std::vector<uint8_t>{'1'});
    while (!done && !store.check({"hand/ready/0"})) std::this_thread::sleep_for(100us);
    if (!done) {
      const std::string hello = "ringfold-rdma 1 -";
      transport::rdma::wire::SlotHeader h;
      h.type = static_cast<uint16_t>(transport::rdma::wire::SlotType::kHello);
      h.payloadBytes = static_cast<uint32_t>(hello.size());
      write(h, hello.data());
    }
    const auto deadline = Clock::now() + 15s;
    while (!done && Clock::now() < deadline) poll();
    rank0.join();
  }
  ~HandPeer() {
    connections.clear();
    device.reset();
    fabric->close();
  }
  transport::Connection& to1() { return *connections.at(1); }
  // The next slot of rank 0's ring (the tests write fewer than its slots: no credits needed).
  void write(const transport::rdma::wire::SlotHeader& h, const void* payload = nullptr) {
    std::byte* st = staging.data() + position * kSlotBytes;
    std::memcpy(st, &h, sizeof h);
    if (payload != nullptr) std::memcpy(st + sizeof h, payload, h.payloadBytes);
    const uint32_t index = static_cast<uint32_t>(position % kSlots);
    ASSERT_EQ(fabric->postWriteImm(0, 0, st, sizeof h + h.payloadBytes, stagingReg,
                                   {remote.address + index * kSlotBytes, remote.rkey},
                                   transport::rdma::wire::imm(transport::rdma::wire::ImmType::kSlot, index), position),
              0);
    ++position;
  }
  void poll() {
    rdma::Completion c[16];
    fabric->poll(c, 16);
    std::this_thread::sleep_for(100us);
  }
  // A message slot: kData (with its payload) or kRts.
  static transport::rdma::wire::SlotHeader message(transport::rdma::wire::SlotType type, uint64_t number, uint64_t tag,
                                                   uint64_t length) {
    transport::rdma::wire::SlotHeader h;
    h.type = static_cast<uint16_t>(type);
    h.message = number;
    h.tag = tag;
    h.length = length;
    if (type == transport::rdma::wire::SlotType::kData) h.payloadBytes = static_cast<uint32_t>(length);
    return h;
  }
};

// The IoError a request fails with (its text must contain `words`); rank 1 polls meanwhile.
void expectLinkFailure(HandPeer& peer, Request& r, const std::string& words) {
  const auto deadline = Clock::now() + 10s;
  try {
    while (!r.test()) {
      ASSERT_LT(Clock::now(), deadline) << "the request neither completed nor failed";
      peer.poll();
    }
    ADD_FAILURE() << "the request completed";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 1);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

using transport::rdma::wire::SlotType;

// A peer's ring is mirrored by a staging area here: one larger than this host's memory is refused
// at start-up, naming the peer (it aborted the process).
TEST(RdmaHandPeer, RingLargerThanMemoryIsRefused) {
  RDMA_ENV;
  HandPeer peer((1u << 29) - 1, 4096);
  ASSERT_NE(peer.error, nullptr);
  try {
    std::rethrow_exception(peer.error);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 published a ring of 536870911 slots of 4096 bytes (this host has"),
              std::string::npos) << e.what();
  }
}

// A request to send for what fits a slot (here 0 bytes, matched by a zero-length receive) is a
// protocol error; it was a null dereference (no registration to answer with).
TEST(RdmaHandPeer, RequestToSendThatFitsASlotFailsTheLink) {
  RDMA_ENV;
  HandPeer peer;
  ASSERT_EQ(peer.error, nullptr) << describe(peer.error);
  PlainMemoryRegion none(nullptr, 0);
  auto r = peer.to1().irecv(none, 0, 0, 1);
  peer.write(HandPeer::message(SlotType::kRts, 0, 1, 0));
  expectLinkFailure(peer, *r, "a request to send 0 bytes, which fit a slot");
}

// An unmatched request to send larger than this host's memory fails the link when it would
// bounce, with its size, instead of the process.
TEST(RdmaHandPeer, RequestToSendLargerThanMemoryFailsTheLink) {
  RDMA_ENV;
  HandPeer peer;
  ASSERT_EQ(peer.error, nullptr) << describe(peer.error);
  Buffer b(8);
  auto r = peer.to1().irecv(b.region, 0, 8, 2);
  peer.write(HandPeer::message(SlotType::kRts, 0, 1, uint64_t{1} << 50));
  expectLinkFailure(peer, *r, "sent a request to send 1125899906842624 bytes before this rank posted its receive");
}

// A message numbered more than a ring ahead of the one awaited cannot come from a correct sender
// (it needs a credit per ring position): a protocol error, not one more message held.
TEST(RdmaHandPeer, MessageMoreThanARingAheadFailsTheLink) {
  RDMA_ENV;
  HandPeer peer;
  ASSERT_EQ(peer.error, nullptr) << describe(peer.error);
  Buffer b(1);
  auto r = peer.to1().irecv(b.region, 0, 1, 0);
  const char x = 'x';
  peer.write(HandPeer::message(SlotType::kData, 7, 0, 1), &x);  // 7 ahead of 0: within 8 slots
  peer.write(HandPeer::message(SlotType::kData, 8, 0, 1), &x);
  expectLinkFailure(peer, *r, "message 8 arrived while message 0 is awaited, more than a ring of 8 slots earlier");
}

}  // namespace
}  // namespace ringfold::test
