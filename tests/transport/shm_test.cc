// The shm Device, ranks as threads of one process (each its own Device, rings and doorbell;
// cross-memory attach reads this process's own memory), rendezvous through a HashStore: every
// size around the slot and CMA limits with CMA on and off, FIFO matching per tag, messages before
// their receives (eager, and requests to send that bounce), mismatches on both sides, aborts,
// timeouts, a peer that goes away, subsets, lazy receives (deliver to a sink), and the copy counts.
// ShmHandPeer: rank 1 played by hand through the real mesh and mappings, writing slots a correct
// peer never writes (the defects tests/fuzz/shm_slots_fuzz found).
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "rendezvous/hash_store.h"
#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/shm/device.h"
#include "transport/shm/protocol.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/tcp_uring/mesh.h"

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
      if (early && !cma) {
        EXPECT_GE(after.ringSinkBytes - before.ringSinkBytes, sizes.back());
      }
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

// ---- a peer played by hand ---------------------------------------------------------------------

// Rank 0 is a real shm Device; rank 1 joins its mesh and sends its hello and descriptors by hand,
// then writes rank 0's inbox through its own mapping of it (8 slots of 1 KiB, SHM_ENV).
struct HandPeer {
  rendezvous::HashStore store;
  std::unique_ptr<transport::Device> device = shm::createDevice();
  std::vector<std::unique_ptr<transport::Connection>> connections;
  transport::tcp_uring::Socket socket;
  shm::Segment inbox, outbox;  // rank 1's ring; rank 0's (which rank 1 writes)
  int doorbell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), peerDoorbell = -1;
  uint64_t tail = 0;

  HandPeer() {
    std::exception_ptr error;
    std::thread rank0([&] {
      try {
        connections = device->connectAll(store, "hand", 0, 2, 10s);
      } catch (...) {
        error = std::current_exception();
      }
    });
    transport::tcp_uring::MeshOptions mesh;
    mesh.prefix = "hand";
    mesh.rank = 1;
    mesh.size = 2;
    mesh.family = transport::tcp_uring::Family::kUnix;
    mesh.timeout = 10s;
    socket = std::move(transport::tcp_uring::connectMesh(store, mesh)[0][0]);
    inbox = shm::Segment::create("hand-inbox", shm::ringBytes(8, 1024));
    shm::Ring::format(inbox.data(), 8, 1024);
    shm::Hello hello;
    hello.rank = 1;
    hello.slots = 8;
    hello.slotBytes = 1024;
    shm::sendFds(socket.fd(), &hello, sizeof hello, {inbox.fd(), doorbell}, "hello");
    shm::Hello theirs;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    auto fds = shm::recvFds(socket.fd(), &theirs, sizeof theirs, 2, deadline, "rank 0's hello");
    outbox = shm::Segment::adopt(fds.at(0), shm::ringBytes(theirs.slots, theirs.slotBytes), "rank 0's ring");
    peerDoorbell = fds.at(1);
    const char answer = 0;
    shm::sendFds(socket.fd(), &answer, 1, {}, "answer");
    char theirAnswer = 0;
    shm::recvFds(socket.fd(), &theirAnswer, 1, 0, deadline, "rank 0's answer");
    rank0.join();
    if (error) std::rethrow_exception(error);
  }
  ~HandPeer() {
    connections.clear();
    device.reset();
    ::close(doorbell);
    if (peerDoorbell >= 0) ::close(peerDoorbell);
  }
  transport::Connection& to1() { return *connections[1]; }
  shm::RingHeader& ring() { return *static_cast<shm::RingHeader*>(outbox.data()); }
  // Writes one slot into rank 0's inbox and publishes it.
  void publish(shm::SlotHeader h, const void* payload = nullptr) {
    shm::Ring view(outbox.data(), 8, 1024);
    shm::SlotHeader* s = view.slot(tail);
    if (payload != nullptr) std::memcpy(shm::Ring::payload(s), payload, h.bytes);
    *s = h;
    ring().tail.store(++tail, std::memory_order_release);
  }
  static shm::SlotHeader eager(uint64_t tag, uint64_t length, uint32_t bytes) {
    shm::SlotHeader h;
    h.type = shm::kEager;
    h.tag = tag;
    h.length = length;
    h.bytes = bytes;
    return h;
  }
};

// The IoError a receive fails with; its text must contain `words`.
void expectFailure(transport::Request& r, const std::string& words) {
  try {
    r.wait(5s);
    ADD_FAILURE() << "the receive completed";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 1);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// The geometry of a ring is read once: a peer that rewrites the header of the ring it writes
// (slots 0, huge slots) cannot make this rank divide by zero or reach outside the mapping.
TEST(ShmHandPeer, RingGeometryIsReadOnce) {
  SHM_ENV("off");
  HandPeer peer;
  peer.ring().slots = 0;
  peer.ring().slotBytes = 1u << 30;
  Buffer b(3);
  auto r = peer.to1().irecv(b.region, 0, 3, 1);
  peer.publish(HandPeer::eager(1, 3, 3), "abc");
  r->wait(5s);
  EXPECT_EQ(std::memcmp(b.bytes.data(), "abc", 3), 0);
  shm::Ring view(peer.outbox.data(), 8, 1024);
  EXPECT_EQ(shm::Ring(peer.outbox.data()).slots(), 0u);  // a fresh view reads what is there now
  EXPECT_EQ(view.slots(), 8u);
}

// A tail far past the ring (or behind what was read) fails the pair at once instead of reading
// stale slots as new ones (2^62 of them).
TEST(ShmHandPeer, TailPastTheRingFailsThePair) {
  SHM_ENV("off");
  HandPeer peer;
  Buffer b(3);
  auto r = peer.to1().irecv(b.region, 0, 3, 1);
  shm::SlotHeader notice;
  notice.type = shm::kNotice;
  for (int i = 0; i < 8; ++i) peer.publish(notice);
  peer.ring().tail.store(uint64_t{1} << 62, std::memory_order_release);
  expectFailure(*r, "published ring position 4611686018427387904");
}

// Data messages never interleave: a message that starts before the last slot of the one before
// fails the pair; the cut-off message never reaches a receive (it used to, with 36 bytes its
// sender never wrote).
TEST(ShmHandPeer, MessageCutOffByAnotherFailsThePair) {
  SHM_ENV("off");
  HandPeer peer;
  std::vector<uint8_t> msg(2000, 7);
  peer.publish(HandPeer::eager(1, 2000, 960), msg.data());
  peer.publish(HandPeer::eager(2, 1, 1), "z");
  peer.device->progress();
  Buffer b(2000);
  std::unique_ptr<transport::Request> r;
  try {
    r = peer.to1().irecv(b.region, 0, 2000, 1);
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("started a message (tag 2, 1 bytes) before the last slot"),
              std::string::npos) << e.what();
    return;
  }
  expectFailure(*r, "started a message (tag 2, 1 bytes) before the last slot");
}

// An unexpected message larger than this host's memory fails the pair, with its size, instead
// of the process (an eager message, and a request to send once it would bounce).
TEST(ShmHandPeer, UnexpectedMessageLargerThanMemoryFailsThePair) {
  SHM_ENV("off");
  for (uint8_t type : {shm::kEager, shm::kRts}) {
    HandPeer peer;
    Buffer b(1);
    auto r = peer.to1().irecv(b.region, 0, 1, 3);
    shm::SlotHeader h = HandPeer::eager(0, uint64_t{1} << 50, 0);
    h.type = type;
    h.address = 0x1000;
    peer.publish(h);
    expectFailure(*r, "sent a message of 1125899906842624 bytes before this rank posted its receive, and there is "
                      "no memory to hold it");
  }
}

// A zero-length receive may have no memory at all (UBSan: memcpy to null, before the fix).
TEST(ShmHandPeer, ZeroLengthReceiveWithoutMemory) {
  SHM_ENV("off");
  HandPeer peer;
  transport::PlainMemoryRegion none(nullptr, 0);
  auto r = peer.to1().irecv(none, 0, 0, 1);
  peer.publish(HandPeer::eager(1, 0, 0));
  r->wait(5s);
}

}  // namespace
}  // namespace ringfold::test
