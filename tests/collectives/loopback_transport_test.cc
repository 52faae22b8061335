// The loopback backend against the transport contract (device.h, connection.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rendezvous/hash_store.h"
#include "transport/device.h"
#include "transport/loopback/device.h"

namespace {

using namespace ringfold;
using namespace std::chrono_literals;

struct Pair {
  rendezvous::HashStore store;
  std::unique_ptr<transport::Device> a = transport::createDevice("loopback");
  std::unique_ptr<transport::Device> b = transport::createDevice("loopback");
  std::vector<std::unique_ptr<transport::Connection>> pa, pb;
  Pair() {
    std::thread t([&] { pb = b->connectAll(store, "p", 1, 2, 5s); });
    pa = a->connectAll(store, "p", 0, 2, 5s);
    t.join();
  }
  transport::Connection& ab() { return *pa[1]; }  // a's connection to b
  transport::Connection& ba() { return *pb[0]; }
};

TEST(Loopback, ConnectAllShape) {
  Pair p;
  ASSERT_EQ(p.pa.size(), 2u);
  EXPECT_EQ(p.pa[0], nullptr);
  EXPECT_EQ(p.pa[1]->peerRank(), 1);
  EXPECT_EQ(p.pb[0]->peerRank(), 0);
  EXPECT_STREQ(p.a->name(), "loopback");
}

TEST(Loopback, FifoPerTagWithEarlyAndLateReceives) {
  Pair p;
  std::vector<int> out = {1, 2, 3, 4}, in(4, 0);
  auto src = p.a->registerMemory(out.data(), 16);
  auto dst = p.b->registerMemory(in.data(), 16);
  auto early = p.ba().irecv(*dst, 0, 4, 7, 0);                     // posted before its message
  p.ab().isend(*src, 0, 4, 7, 0)->wait(1s);                        // -> in[0]
  p.ab().isend(*src, 4, 4, 7, 0)->wait(1s);                        // buffered, tag 7
  p.ab().isend(*src, 8, 4, 9, 0)->wait(1s);                        // buffered, tag 9
  p.ab().isend(*src, 12, 4, 7, 0)->wait(1s);                       // buffered, tag 7
  early->wait(1s);
  p.ba().irecv(*dst, 12, 4, 9, 0)->wait(1s);                       // tag 9 first: independent
  p.ba().irecv(*dst, 4, 4, 7, 0)->wait(1s);                        // tag 7, in send order
  p.ba().irecv(*dst, 8, 4, 7, 0)->wait(1s);
  EXPECT_EQ(in, (std::vector<int>{1, 2, 4, 3}));
}

TEST(Loopback, CheckAndLengthMismatch) {
  Pair p;
  std::vector<char> buf(8);
  auto r = p.a->registerMemory(buf.data(), 8);
  auto rb = p.b->registerMemory(buf.data(), 8);
  auto recv = p.ba().irecv(*rb, 0, 4, 1, 111);
  p.ab().isend(*r, 0, 4, 1, 222);
  try {
    recv->wait(1s);
    FAIL() << "no mismatch";
  } catch (const transport::CheckMismatch& m) {
    EXPECT_EQ(m.peerRank, 0);
    EXPECT_EQ(m.expectedCheck, 111u);
    EXPECT_EQ(m.actualCheck, 222u);
    EXPECT_EQ(m.tag, 1u);
  }
  Pair q;
  auto qa = q.a->registerMemory(buf.data(), 8);
  auto qb = q.b->registerMemory(buf.data(), 8);
  q.ab().isend(*qa, 0, 8, 1, 5);  // arrives first: buffered
  EXPECT_THROW(q.ba().irecv(*qb, 0, 4, 1, 5)->wait(1s), transport::CheckMismatch);
  // After a failure the device is poisoned: later requests fail at once.
  EXPECT_THROW(q.ba().irecv(*qb, 0, 4, 2, 5)->wait(1s), MismatchError);
}

TEST(Loopback, TimeoutNamesThePeer) {
  Pair p;
  char c;
  auto r = p.b->registerMemory(&c, 1);
  auto recv = p.ba().irecv(*r, 0, 1, 3, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    recv->wait(100ms);
    FAIL() << "no timeout";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 0);
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(Loopback, AbortPoisonsTheWholeGroupWithTheSameMessage) {
  Pair p;
  char c;
  auto r = p.b->registerMemory(&c, 1);
  auto pending = p.ba().irecv(*r, 0, 1, 3, 0);
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    p.a->abort(transport::ErrorKind::kMismatch, "the reason");
  });
  try {
    pending->wait(5s);
    FAIL() << "not woken";
  } catch (const MismatchError& e) {
    EXPECT_STREQ(e.what(), "the reason");
  }
  aborter.join();
  EXPECT_TRUE(p.a->aborted());
  EXPECT_TRUE(p.b->aborted());
  p.b->abort(transport::ErrorKind::kIo, "second");  // ignored: the first abort wins
  auto ra = p.a->registerMemory(&c, 1);
  EXPECT_THROW(p.ab().isend(*ra, 0, 1, 4, 0)->wait(1s), MismatchError);
  try {
    p.ba().irecv(*r, 0, 1, 4, 0)->test();
    FAIL();
  } catch (const MismatchError& e) {
    EXPECT_STREQ(e.what(), "the reason");
  }
}

TEST(Loopback, DestroyedReceiveIsWithdrawn) {
  Pair p;
  int target = 0, value = 42;
  auto t = p.b->registerMemory(&target, 4);
  auto v = p.a->registerMemory(&value, 4);
  p.ba().irecv(*t, 0, 4, 5, 0).reset();  // withdrawn
  p.ab().isend(*v, 0, 4, 5, 0)->wait(1s);
  EXPECT_EQ(target, 0);  // nobody wrote into the withdrawn region
  int later = 0;
  auto l = p.b->registerMemory(&later, 4);
  p.ba().irecv(*l, 0, 4, 5, 0)->wait(1s);
  EXPECT_EQ(later, 42);
}

TEST(Loopback, BoundsAreChecked) {
  Pair p;
  char buf[4];
  auto r = p.a->registerMemory(buf, 4);
  EXPECT_THROW(p.ab().isend(*r, 2, 3, 0, 0), InvalidArgument);
}

TEST(Loopback, MissingPeerTimesOutNamingIt) {
  rendezvous::HashStore store;
  auto d = transport::createDevice("loopback");
  try {
    d->connectAll(store, "m", 0, 3, 100ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// abortReason() is what requests fail with: null while the device works, then the abort's
// kind and text, on the aborting device and on its peer alike.
TEST(Loopback, AbortReasonIsTheErrorRequestsFailWith) {
  Pair p;
  EXPECT_EQ(p.a->abortReason(), nullptr);
  EXPECT_EQ(p.b->abortReason(), nullptr);
  p.b->abort(transport::ErrorKind::kMismatch, "ranks disagree");
  for (auto* d : {p.a.get(), p.b.get()}) {
    auto why = d->abortReason();
    ASSERT_NE(why, nullptr);
    try {
      std::rethrow_exception(why);
    } catch (const MismatchError& e) {
      EXPECT_STREQ(e.what(), "ranks disagree");
    }
  }
}

// A subset: rank 0 connects rank 2 only, rank 1 connects rank 2 only, rank 2 both; an abort
// by rank 0 still reaches rank 1, which it reaches only through rank 2 (one group).
TEST(Loopback, SubsetOfPeersAndOneGroup) {
  rendezvous::HashStore store;
  std::vector<std::unique_ptr<transport::Device>> d;
  for (int r = 0; r < 3; ++r) d.push_back(transport::createDevice("loopback"));
  std::vector<std::vector<std::unique_ptr<transport::Connection>>> c(3);
  const std::vector<std::vector<bool>> peers = {{false, false, true}, {false, false, true}, {true, true, false}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { c[r] = d[r]->connectAll({&store, "s", r, 3, 5s, peers[r]}); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c[0][1], nullptr);
  EXPECT_EQ(c[1][0], nullptr);
  ASSERT_NE(c[2][0], nullptr);
  ASSERT_NE(c[2][1], nullptr);
  EXPECT_EQ(c[0][2]->peerRank(), 2);
  d[0]->abort(transport::ErrorKind::kIo, "rank 0 stops");
  EXPECT_TRUE(d[1]->aborted());
  char byte = 0;
  auto region = d[1]->registerMemory(&byte, 1);
  EXPECT_THROW(c[1][2]->irecv(*region, 0, 1, 1, 0)->wait(1s), IoError);
}

// The wait hook runs while a receive blocks, and may abort the device it was given to.
TEST(Loopback, WaitHookRunsAndMayAbort) {
  Pair p;
  int calls = 0;
  p.b->setWaitHook([&] {
    if (++calls == 5) p.b->abort(transport::ErrorKind::kIo, "hook gave up");
  });
  char byte = 0;
  auto region = p.b->registerMemory(&byte, 1);
  const auto start = std::chrono::steady_clock::now();
  try {
    p.ba().irecv(*region, 0, 1, 3, 0)->wait(5s);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "hook gave up");
  }
  EXPECT_EQ(calls, 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

}  // namespace
