// The shm Device, ranks as threads of one process (each its own Device, rings and doorbell;
// cross-memory attach reads this process's own memory), rendezvous through a HashStore: every
// size around the slot and CMA limits with CMA on and off, FIFO matching per tag, messages before
// their receives (eager, and requests to send that bounce), mismatches on both sides, aborts,
// timeouts, a peer that goes away, subsets, lazy receives (deliver to a sink), and the copy counts.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "rendezvous/hash_store.h"
#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/shm/device.h"

namespace ringfold::test {
namespace {

namespace shm = transport::shm;
using transport::CheckMismatch;
using transport::ErrorKind;
using transport::PlainMemoryRegion;
using transport::Request;

// Small rings: messages span many slots and the ring fills.
constexpr size_t kSlotBytes = 1024;
constexpr size_t kPayload = kSlotBytes - 64;
constexpr size_t kCmaMin = 16 << 10;

struct Buffer {
  std::vector<uint8_t> bytes;
  PlainMemoryRegion region;
  explicit Buffer(size_t n) : bytes(n), region(bytes.data(), n) {}
  Buffer(uint64_t seed, size_t n) : bytes(patterned(seed, n)), region(bytes.data(), n) {}
};

shm::Device& shmOf(Rank& me) { return dynamic_cast<shm::Device&>(me.device); }

// Ranks as threads, each with an shm Device; `only` (by rank), when given, joins only the pairs
// of ranks it marks.
std::vector<std::exception_ptr> runShm(int size, const std::function<void(Rank&)>& body,
                                       const std::vector<bool>& only = {}) {
  RankThreads how;
  how.device = [](int) { return shm::createDevice(); };
  if (!only.empty()) {
    how.spec = [only](transport::ConnectSpec& spec) {
      spec.peers.assign(spec.size, false);
      for (int p = 0; p < spec.size; ++p) spec.peers[p] = p != spec.rank && only[p] && only[spec.rank];
    };
  }
  return runRanks(size, body, how);
}

void waitAll(std::vector<std::unique_ptr<Request>>& reqs, std::chrono::milliseconds timeout = 20s) {
  for (auto& r : reqs) r->wait(timeout);
}

#define SHM_ENV(cma)                                                                                          \
  EnvGuard env {                                                                                              \
    {"RINGFOLD_SHM_SLOT_BYTES", "1024"}, {"RINGFOLD_SHM_SLOTS", "8"}, {"RINGFOLD_SHM_CMA_MIN_BYTES", "16K"}, \
        {"RINGFOLD_SHM_CMA", cma}                                                                             \
  }

class CmaModes : public ::testing::TestWithParam<const char*> {};

// Every size around the slot payload, the CMA limit and several MiB, both ways at once.
TEST_P(CmaModes, EverySizeArrivesIntactBothWays) {
  SHM_ENV(GetParam());
  const bool cma = std::string(GetParam()) == "on";
  const std::vector<size_t> sizes = {0,           1,          kPayload - 1, kPayload,          kPayload + 1,
                                     kSlotBytes * 8, kCmaMin - 1, kCmaMin,      (3u << 20) + 7};
  auto errors = runShm(2, [&](Rank& me) {
    const int peer = 1 - me.rank;
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
    const shm::Stats s = shmOf(me).stats();
    EXPECT_EQ(s.cmaMessages, cma ? 2u : 0u);
    EXPECT_EQ(s.eagerMessages, cma ? 7u : 9u);
    EXPECT_EQ(s.bytesReceived, s.bytesSent);
    EXPECT_NE(shmOf(me).describe().find(cma ? "cross-memory attach" : "every message through the rings"),
              std::string::npos)
        << shmOf(me).describe();
  });
  expectAllOk(errors);
}

// Sends posted long before their receives (the ring fills; the sender waits for space), and
// receives matched by tag in FIFO order whatever order the tags are received in.
TEST_P(CmaModes, UnexpectedMessagesMatchFifoPerTag) {
  SHM_ENV(GetParam());
  const std::vector<size_t> sizes = {10, 5000, 100000, 0, 40000};
  auto errors = runShm(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<std::unique_ptr<Request>> reqs;
    if (me.rank == 0) {
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < sizes.size(); ++i) {
          bufs.push_back(std::make_unique<Buffer>(round * 10 + i, sizes[i]));
          reqs.push_back(me.to(1).isend(bufs.back()->region, 0, sizes[i], i % 2, sizes[i]));
        }
      }
      waitAll(reqs);  // completes before any receive is posted (bounce, unexpected buffers)
      uint8_t go = 1;
      PlainMemoryRegion flag(&go, 1);
      me.to(1).isend(flag, 0, 1, 99)->wait(20s);
    } else {
      uint8_t go = 0;
      PlainMemoryRegion flag(&go, 1);
      me.to(0).irecv(flag, 0, 1, 99)->wait(20s);
      // Tag 1 first, then tag 0: per tag, the order they were sent in.
      for (int tag : {1, 0}) {
        for (int round = 0; round < 2; ++round) {
          for (size_t i = 0; i < sizes.size(); ++i) {
            if (static_cast<int>(i % 2) != tag) continue;
            Buffer in(sizes[i]);
            me.to(0).irecv(in.region, 0, sizes[i], tag, sizes[i])->wait(20s);
            EXPECT_EQ(firstWrong(in.bytes, round * 10 + i, sizes[i]), -1) << "size " << sizes[i];
          }
        }
      }
    }
  });
  expectAllOk(errors);
}

// A sink that checks what Request::deliver hands it: pieces in order, each byte once, every
// piece but the last a multiple of 64 bytes; it keeps the bytes.
class RecordingSink final : public transport::Sink {
 public:
  explicit RecordingSink(size_t length) : bytes(length) {}
  void take(size_t offset, const std::byte* data, size_t length) override {
    EXPECT_EQ(offset, taken) << "pieces come in order, each byte once";
    EXPECT_EQ(lastShort, false) << "only the last piece may be shorter than a multiple of 64";
    lastShort = length % 64 != 0;
    ASSERT_LE(offset + length, bytes.size());
    std::memcpy(bytes.data() + offset, data, length);
    taken += length;
    ++pieces;
  }
  std::vector<uint8_t> bytes;
  size_t taken = 0, pieces = 0;
  bool lastShort = false;
};

// Lazy receives (irecvLazy + deliver): every size, posted before the message and after it (an
// unexpected message, a request to send), hand each byte to the sink once; with receives posted
// first and CMA off, the bytes come straight from the ring (no copy out).
TEST_P(CmaModes, LazyReceivesHandEveryByteToTheSinkOnce) {
  SHM_ENV(GetParam());
  const bool cma = std::string(GetParam()) == "on";
  const std::vector<size_t> sizes = {1, kPayload - 1, kPayload, kPayload + 1, kSlotBytes * 8, kCmaMin + 1,
                                     (1u << 20) + 3};
  auto errors = runShm(2, [&](Rank& me) {
    for (bool early : {true, false}) {
      const uint64_t base = early ? 0 : 100;
      if (me.rank == 0) {
        if (early) std::this_thread::sleep_for(50ms);  // rank 1 posts its receives first
        std::vector<std::unique_ptr<Buffer>> out;
        std::vector<std::unique_ptr<Request>> reqs;
        for (size_t i = 0; i < sizes.size(); ++i) {
          out.push_back(std::make_unique<Buffer>(base + i, sizes[i]));
          reqs.push_back(me.to(1).isend(out.back()->region, 0, sizes[i], base + i, sizes[i]));
        }
        waitAll(reqs);
        continue;
      }
      std::vector<std::unique_ptr<Buffer>> in;
      std::vector<std::unique_ptr<Request>> reqs;
      // Late: the messages wait (in the ring, or as requests to send that bounce) before their
      // receives are posted.
      if (!early) std::this_thread::sleep_for(300ms);
      const shm::Stats before = shmOf(me).stats();
      for (size_t i = 0; i < sizes.size(); ++i) {
        in.push_back(std::make_unique<Buffer>(sizes[i]));
        reqs.push_back(me.to(0).irecvLazy(in.back()->region, 0, sizes[i], base + i, sizes[i]));
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        RecordingSink sink(sizes[i]);
        ASSERT_TRUE(reqs[i]->deliver(sink, 20s));
        EXPECT_EQ(sink.taken, sizes[i]);
        EXPECT_EQ(firstWrong(sink.bytes, base + i, sizes[i]), -1) << "size " << sizes[i] << (early ? " early" : " late");
      }
      const shm::Stats after = shmOf(me).stats();
      // A wait that finds nothing to do may unpark a message, but the last (1 MiB, more than the
      // ring holds) is delivered as it arrives.
      if (early && !cma) EXPECT_GE(after.ringSinkBytes - before.ringSinkBytes, sizes.back());
    }
  });
  expectAllOk(errors);
}

// A message parked at the head of the inbox for a lazy receive does not hold up the messages
// behind it: a wait on a later message reads the parked one into its receive's memory, and
// deliver() then hands that over.
TEST_P(CmaModes, ParkedMessageGivesWayToAWaitOnALaterOne) {
  SHM_ENV(GetParam());
  constexpr size_t kBig = 12 * kSlotBytes;  // more than the 8-slot ring holds
  auto errors = runShm(2, [&](Rank& me) {
    if (me.rank == 0) {
      Buffer big(7, kBig), small(8, 10);
      auto a = me.to(1).isend(big.region, 0, kBig, 1);
      auto b = me.to(1).isend(small.region, 0, 10, 2);
      a->wait(20s);
      b->wait(20s);
      return;
    }
    Buffer bigIn(kBig), smallIn(10);
    auto lazy = me.to(0).irecvLazy(bigIn.region, 0, kBig, 1);
    me.to(0).irecv(smallIn.region, 0, 10, 2)->wait(20s);
    EXPECT_EQ(firstWrong(smallIn.bytes, 8, 10), -1);
    RecordingSink sink(kBig);
    ASSERT_TRUE(lazy->deliver(sink, 20s));
    EXPECT_EQ(firstWrong(sink.bytes, 7, kBig), -1);
    EXPECT_EQ(firstWrong(bigIn.bytes, 7, kBig), -1) << "it was stored in the receive's memory";
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(Shm, CmaModes, ::testing::Values("on", "off"),
                         [](const auto& info) { return std::string(info.param) == "on" ? "Cma" : "RingsOnly"; });

// A receive whose length or check differs fails with CheckMismatch on both sides.
TEST(Shm, MismatchFailsBothSides) {
  SHM_ENV("on");
  for (size_t size : {size_t{100}, size_t{100000}}) {
    auto errors = runShm(2, [&](Rank& me) {
      Buffer b(1, size);
      if (me.rank == 0) {
        auto s = me.to(1).isend(b.region, 0, size, 7, 1234);
        s->wait(10s);
        // The send may complete first (eager); the next request sees the receiver's verdict.
        Buffer c(1);
        me.to(1).irecv(c.region, 0, 1, 8)->wait(10s);
      } else {
        me.to(0).irecv(b.region, 0, size, 7, 999)->wait(10s);
      }
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_NE(errors[r], nullptr) << "rank " << r << " size " << size;
      try {
        std::rethrow_exception(errors[r]);
      } catch (const CheckMismatch& e) {
        EXPECT_EQ(e.tag, 7u);
        EXPECT_EQ(e.expectedCheck, 999u) << "rank " << r;
        EXPECT_EQ(e.actualCheck, 1234u) << "rank " << r;
        EXPECT_EQ(e.peerRank, 1 - r);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    }
  }
}

// A rank that aborts fails its peers' pending requests with its text, naming it.
TEST(Shm, AbortReachesEveryPeer) {
  SHM_ENV("on");
  auto errors = runShm(4, [&](Rank& me) {
    if (me.rank == 2) {
      std::this_thread::sleep_for(100ms);
      me.device.abort(ErrorKind::kIo, "rank 2 gave up");
      return;
    }
    Buffer b(64);
    me.to(2).irecv(b.region, 0, 64, 1)->wait(10s);
  });
  for (int r : {0, 1, 3}) {
    ASSERT_NE(errors[r], nullptr);
    try {
      std::rethrow_exception(errors[r]);
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 gave up"), std::string::npos) << e.what();
      EXPECT_EQ(e.peerRank(), 2);
    }
  }
}

// A silent peer: the wait times out naming it.
TEST(Shm, SilentPeerTimesOutNamingIt) {
  SHM_ENV("on");
  std::atomic<bool> release{false};
  auto errors = runShm(2, [&](Rank& me) {
    if (me.rank == 1) {
      while (!release) std::this_thread::sleep_for(1ms);
      return;
    }
    Buffer b(64);
    auto r = me.to(1).irecv(b.region, 0, 64, 1);
    try {
      r->wait(300ms);
    } catch (...) {
      release = true;
      throw;
    }
  });
  ASSERT_NE(errors[0], nullptr);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 1);
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 sent nothing"), std::string::npos) << e.what();
  }
}

// A peer whose device goes away (its sockets close) fails what waits on it, naming it, after
// delivering what it had already sent.
TEST(Shm, PeerThatLeavesFailsPendingRequestsAfterItsLastMessage) {
  SHM_ENV("on");
  auto errors = runShm(2, [&](Rank& me) {
    if (me.rank == 1) {
      Buffer b(5, 300);
      me.to(0).isend(b.region, 0, 300, 1)->wait(10s);
      return;  // the device closes with the thread
    }
    std::this_thread::sleep_for(200ms);
    Buffer first(300), second(300);
    me.to(1).irecv(first.region, 0, 300, 1)->wait(10s);
    EXPECT_EQ(firstWrong(first.bytes, 5, 300), -1);
    me.to(1).irecv(second.region, 0, 300, 2)->wait(10s);
  });
  EXPECT_EQ(errors[1], nullptr);
  ASSERT_NE(errors[0], nullptr);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 1);
    EXPECT_NE(std::string(e.what()).find("shared-memory connection to rank 1 closed"), std::string::npos)
        << e.what();
  }
}

// connectAll with a subset: only those pairs are joined.
TEST(Shm, SubsetConnectsOnlySelectedPairs) {
  SHM_ENV("on");
  auto errors = runShm(
      4,
      [&](Rank& me) {
        for (int p = 0; p < 4; ++p) {
          const bool joined = p != me.rank && me.rank != 3 && p != 3;
          EXPECT_EQ(me.peers[p] != nullptr, joined) << me.rank << " -> " << p;
        }
        if (me.rank == 3) return;
        const int next = (me.rank + 1) % 3, prev = (me.rank + 2) % 3;
        Buffer out(me.rank, 50000), in(50000);
        auto r = me.to(prev).irecv(in.region, 0, 50000, 3);
        me.to(next).isend(out.region, 0, 50000, 3)->wait(10s);
        r->wait(10s);
        EXPECT_EQ(firstWrong(in.bytes, prev, 50000), -1);
      },
      {true, true, true, false});
  expectAllOk(errors);
}

// A destroyed request that was still pending poisons the device.
TEST(Shm, AbandonedRequestPoisonsTheDevice) {
  SHM_ENV("on");
  auto errors = runShm(2, [&](Rank& me) {
    if (me.rank == 1) return;
    {
      Buffer b(64);
      auto r = me.to(1).irecv(b.region, 0, 64, 1);
    }
    Buffer c(64);
    me.to(1).irecv(c.region, 0, 64, 2)->wait(1s);
  });
  ASSERT_NE(errors[0], nullptr);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("destroyed before it completed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ringfold::test
