// tcp_uring failure paths with ranks as threads: check mismatches, abort propagation, timeouts,
// closed peers, abandoned requests, connect timeouts, and that a waiting rank sleeps.
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>

#include "common/params.h"
#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/tcp_uring/frame.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::test {
namespace {

using transport::CheckMismatch;
using transport::ErrorKind;
using transport::PlainMemoryRegion;

struct Buffer {
  std::vector<uint8_t> bytes;
  PlainMemoryRegion region;
  explicit Buffer(size_t n) : bytes(n), region(bytes.data(), n) {}
};

// A flag one rank raises and another waits for (bounded).
struct Flag {
  std::atomic<bool> up{false};
  void raise() { up = true; }
  bool waitUp(std::chrono::milliseconds t = 10s) {
    auto until = std::chrono::steady_clock::now() + t;
    while (!up && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    return up;
  }
};

double threadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Runs the mismatch scenario: rank 0 sends (100 bytes, check 7); rank 1 receives (len, check),
// posted before the message arrives or after it was buffered.
void expectMismatch(size_t len, uint64_t check, bool postFirst) {
  EnvGuard env;
  Flag posted, arrived, done, sent;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(200);
    if (me.rank == 0) {
      if (postFirst) posted.waitUp();
      me.to(1).isend(b.region, 0, 100, 3, 7)->wait(10s);
      me.to(1).isend(b.region, 0, 1, 4, 0)->wait(10s);  // marks that tag 3 went before it
      sent.raise();
      done.waitUp();
      return;
    }
    std::unique_ptr<transport::Request> r;
    if (postFirst) {
      r = me.to(0).irecv(b.region, 0, len, 3, check);
      posted.raise();
    } else {
      me.to(0).irecv(b.region, 100, 1, 4, 0)->wait(10s);  // tag 3 is buffered by now
    }
    try {
      if (!r) r = me.to(0).irecv(b.region, 0, len, 3, check);
      r->wait(10s);
      ADD_FAILURE() << "expected CheckMismatch";
    } catch (const CheckMismatch& e) {
      EXPECT_EQ(e.peerRank, 0);
      EXPECT_EQ(e.tag, 3u);
      EXPECT_EQ(e.expectedLength, len);
      EXPECT_EQ(e.actualLength, 100u);
      EXPECT_EQ(e.expectedCheck, check);
      EXPECT_EQ(e.actualCheck, 7u);
    }
    // The device is poisoned: later requests fail with the same error.
    EXPECT_THROW(me.to(0).irecv(b.region, 0, 1, 99), CheckMismatch);
    done.raise();
    sent.waitUp();  // rank 1's device must outlive rank 0's second send, or that send sees EOF
  });
  expectAllOk(errors);
}

TEST(TcpUringFailure, LengthMismatchPostedFirst) { expectMismatch(150, 7, true); }
TEST(TcpUringFailure, LengthMismatchBuffered) { expectMismatch(150, 7, false); }
TEST(TcpUringFailure, CheckMismatchPostedFirst) { expectMismatch(100, 8, true); }
TEST(TcpUringFailure, CheckMismatchBuffered) { expectMismatch(100, 8, false); }

// Rank 0 aborts while the others wait on each other: every rank fails with rank 0's message.
TEST(TcpUringFailure, AbortReachesEveryPeerWithTheSameMessage) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  const std::string text = "allreduce: rank 0 was given 12 elements, rank 1 was given 13";
  Flag ready1, ready2;
  auto errors = runRanks(3, [&](Rank& me) {
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
    me.device.abort(ErrorKind::kIo, "ignored: the first abort wins");
  });
  expectAllOk(errors);
}

TEST(TcpUringFailure, AbortOfKindIoNamesTheAbortingRank) {
  EnvGuard env;
  Flag ready;
  auto errors = runRanks(2, [&](Rank& me) {
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

// A wait that passes its timeout names the silent peer; the device is poisoned afterwards. The
// error names RINGFOLD_TIMEOUT only when that was the limit that ran out, else the caller's.
struct SilentPeerCase {
  const char* timeoutSetting;  // RINGFOLD_TIMEOUT ("": unset)
  std::chrono::milliseconds wait;
  const char* limitText;       // how the error names the limit
};

void PrintTo(const SilentPeerCase& c, std::ostream* os) { *os << c.limitText; }

class SilentPeer : public ::testing::TestWithParam<SilentPeerCase> {};

TEST_P(SilentPeer, TimesOutNamingIt) {
  const SilentPeerCase& c = GetParam();
  EnvGuard env{{"RINGFOLD_TIMEOUT", c.timeoutSetting}};
  Flag done;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      done.waitUp(20s);
      return;
    }
    auto other = me.to(0).irecv(b.region, 0, 8, 2);
    auto start = std::chrono::steady_clock::now();
    try {
      me.to(0).irecv(b.region, 8, 8, 1)->wait(c.wait);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_EQ(e.peerRank(), 0);
      std::string what = e.what();
      EXPECT_NE(what.find("timed out"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find(c.limitText), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_THROW(other->test(), IoError);
    EXPECT_THROW(me.to(0).isend(b.region, 0, 1, 3), IoError);
    done.raise();
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(TcpUringFailure, SilentPeer,
                         ::testing::Values(SilentPeerCase{"", 300ms, "(the caller's limit is 0.3 s)"},
                                           SilentPeerCase{"0.4", 400ms, "(RINGFOLD_TIMEOUT is 0.4 s)"}),
                         [](const auto& info) { return info.index == 0 ? "CallersLimit" : "TheSettingsLimit"; });

// ---- WAITING notices over several sockets per peer ------------------------------------------
// Rank 0 is a real device; ranks 1 and 2 are hand-driven meshes with two sockets per peer that
// write frames on chosen sockets, so the order in which rank 0 reads them is fixed.

namespace tu = transport::tcp_uring;

void writeFrame(const tu::Socket& s, tu::FrameHeader h, const std::string& payload = {}) {
  h.magic = tu::kFrameMagic;
  h.length = payload.size();
  ASSERT_EQ(::send(s.fd(), &h, sizeof h, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof h));
  if (!payload.empty()) {
    ASSERT_EQ(::send(s.fd(), payload.data(), payload.size(), MSG_NOSIGNAL), static_cast<ssize_t>(payload.size()));
  }
}

// An 8-byte DATA frame header of message `msgId` (tag 5), whole in one frame.
tu::FrameHeader dataFrame(uint64_t msgId) {
  tu::FrameHeader h{};
  h.type = static_cast<uint8_t>(tu::FrameType::kData);
  h.msgId = msgId;
  h.tag = 5;
  h.total = 8;
  return h;
}

tu::FrameHeader waitingFrame(uint32_t seq, uint64_t firstLaterMessage, int waitedOn) {
  tu::FrameHeader h{};
  h.type = static_cast<uint8_t>(tu::FrameType::kWaiting);
  h.seq = seq;
  h.msgId = firstLaterMessage;
  h.tag = waitedOn < 0 ? tu::kNoRank : static_cast<uint64_t>(waitedOn);
  h.total = 5000;  // ms waited
  return h;
}

// Rank 0 waits 1.5 s for a message from rank 1 that never comes, while `script` writes rank 1's
// frames to rank 0 (sockets[0] and sockets[1]). Returns the IoError rank 0 got.
IoError rankZeroTimesOut(const std::function<void(std::vector<tu::Socket>& toRankZero)>& script) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  rendezvous::HashStore store;
  Flag done;
  std::optional<IoError> caught;
  std::vector<std::thread> raw;
  for (int r : {1, 2}) {
    raw.emplace_back([&, r] {
      tu::MeshOptions o;
      o.prefix = "t";
      o.rank = r;
      o.size = 3;
      o.socketsPerPeer = 2;
      o.listenAddress = "127.0.0.1";
      o.timeout = 20s;
      auto mesh = tu::connectMesh(store, o);
      if (r == 1) script(mesh[0]);
      done.waitUp(20s);  // keeps the sockets open: silent, not gone
    });
  }
  try {
    auto device = transport::createDevice("tcp_uring");
    auto peers = device->connectAll(store, "t", 0, 3, 20s);
    Buffer b(8);
    peers[1]->irecv(b.region, 0, 8, 99)->wait(1500ms);
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    caught = e;
  }
  done.raise();
  for (auto& t : raw) t.join();
  if (!caught) return IoError(-1, "no error");
  return *caught;
}

// Rank 1 says it waits for rank 2 (socket 0); a chunk of a message it sent before that arrives
// afterwards on its other socket. That chunk does not withdraw the notice: rank 0 follows it and
// blames rank 2, the one that went silent.
TEST(TcpUringFailure, AnEarlierMessageOnAnotherSocketDoesNotWithdrawANotice) {
  const IoError e = rankZeroTimesOut([](std::vector<tu::Socket>& s) {
    writeFrame(s[0], waitingFrame(1, 1, 2));
    std::this_thread::sleep_for(300ms);
    writeFrame(s[1], dataFrame(0), "12345678");  // message 0: sent before the notice
  });
  const std::string what = e.what();
  EXPECT_EQ(e.peerRank(), 2) << what;
  EXPECT_NE(what.find("rank 1 is alive but said it had waited 5.0 s for rank 2"), std::string::npos) << what;
}

// The same with a message rank 1 started after its notice: it got past that wait, and rank 0
// blames rank 1 itself.
TEST(TcpUringFailure, ALaterMessageWithdrawsANotice) {
  const IoError e = rankZeroTimesOut([](std::vector<tu::Socket>& s) {
    writeFrame(s[0], waitingFrame(1, 1, 2));
    std::this_thread::sleep_for(300ms);
    writeFrame(s[1], dataFrame(0), "12345678");
    writeFrame(s[1], dataFrame(1), "12345678");  // the first message after the notice
  });
  EXPECT_EQ(e.peerRank(), 1) << e.what();
}

// Rank 1's withdrawal (socket 0) overtakes the notice it sent before it (socket 1): the stale
// notice is ignored, and rank 0 blames rank 1.
TEST(TcpUringFailure, ANoticeOvertakenByItsWithdrawalIsIgnored) {
  const IoError e = rankZeroTimesOut([](std::vector<tu::Socket>& s) {
    writeFrame(s[0], waitingFrame(2, 0, -1));
    std::this_thread::sleep_for(300ms);
    writeFrame(s[1], waitingFrame(1, 0, 2));
  });
  const std::string what = e.what();
  EXPECT_EQ(e.peerRank(), 1) << what;
  EXPECT_EQ(what.find("is alive"), std::string::npos) << what;
}

// Rank 1 goes silent; rank 2 waits for it, and rank 0 waits for rank 2 with a shorter timeout,
// so rank 0 times out first. Rank 2's WAITING notice tells rank 0 that rank 2 is alive, and rank
// 0 blames rank 1, not rank 2.
TEST(TcpUringFailure, TimeoutBlamesTheRankAtTheEndOfAWaitChain) {
  EnvGuard env;
  Flag waiting, done;
  auto errors = runRanks(3, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 1) {
      done.waitUp(20s);
      return;
    }
    if (me.rank == 2) {
      waiting.raise();
      try {
        me.to(1).irecv(b.region, 0, 8, 1)->wait(4s);
        ADD_FAILURE() << "expected IoError";
      } catch (const IoError& e) {
        EXPECT_EQ(e.peerRank(), 1) << e.what();
      }
      return;
    }
    ASSERT_TRUE(waiting.waitUp());
    try {
      me.to(2).irecv(b.region, 0, 8, 1)->wait(3s);  // rank 2's notice comes at 2 s
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peerRank(), 1) << what;
      EXPECT_NE(what.find("from rank 2: rank 2 is alive but said it had waited"), std::string::npos) << what;
      EXPECT_NE(what.find("for rank 1; rank 1 sent nothing for"), std::string::npos) << what;
      EXPECT_NE(what.find("s (the time since rank 2 last received anything from rank 1)"), std::string::npos) << what;
    }
    done.raise();
  });
  expectAllOk(errors);
}

// The seconds in "... sent nothing for <X> s" of `what`; -1 when absent.
double silentSeconds(const std::string& what) {
  const auto at = what.find("sent nothing");
  if (at == std::string::npos) return -1;
  const auto forAt = what.find(" for ", at);
  return forAt == std::string::npos ? -1 : std::atof(what.c_str() + forAt + 5);
}

// The silence a chain of notices ends at is measured from the last bytes the silent rank sent:
// rank 1 sends rank 2 one message 1.5 s after start-up and then nothing; rank 2 waits for a
// second one; rank 0, which never hears from rank 1 at all, times out on rank 2 3 s later. Rank
// 1 has been silent for about 3 s, not since the connection was set up (about 4.5 s).
TEST(TcpUringFailure, ChainSilenceIsMeasuredFromTheLastBytesTheSilentRankSent) {
  EnvGuard env;
  Flag waiting, done, done2;
  auto errors = runRanks(3, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 1) {
      std::this_thread::sleep_for(1500ms);
      me.to(2).isend(b.region, 0, 8, 1)->wait(10s);
      done.waitUp(20s);
      done2.waitUp(20s);  // silent, not gone, until both have timed out
      return;
    }
    if (me.rank == 2) {
      me.to(1).irecv(b.region, 0, 8, 1)->wait(10s);
      waiting.raise();
      try {
        me.to(1).irecv(b.region, 0, 8, 2)->wait(4s);
        ADD_FAILURE() << "expected IoError";
      } catch (const IoError& e) {
        EXPECT_EQ(e.peerRank(), 1) << e.what();
        const double x = silentSeconds(e.what());
        EXPECT_GT(x, 3.5) << e.what();
        EXPECT_LT(x, 4.6) << e.what();  // the 4 s it waited
      }
      done2.raise();
      return;
    }
    ASSERT_TRUE(waiting.waitUp());
    try {
      me.to(2).irecv(b.region, 0, 8, 1)->wait(3s);  // rank 2's notice comes at 2 s
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peerRank(), 1) << what;
      EXPECT_NE(what.find("rank 1 sent nothing for"), std::string::npos) << what;
      EXPECT_NE(what.find("(the time since rank 2 last received anything from rank 1)"), std::string::npos) << what;
      const double x = silentSeconds(what);
      EXPECT_GT(x, 2.5) << what;
      EXPECT_LT(x, 3.8) << what;
    }
    done.raise();
  });
  expectAllOk(errors);
}

// Rank 1 waits long enough for rank 0 to send its notice, then gets its message and goes quiet.
// Its notice is withdrawn when the wait ends, so rank 2, timing out on rank 1 later, blames rank
// 1 and not rank 0.
TEST(TcpUringFailure, NoticeIsWithdrawnWhenTheWaitEnds) {
  EnvGuard env;
  Flag done;
  auto errors = runRanks(3, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      std::this_thread::sleep_for(1300ms);
      me.to(1).isend(b.region, 0, 8, 1)->wait(10s);
    } else if (me.rank == 1) {
      me.to(0).irecv(b.region, 0, 8, 1)->wait(2s);  // its notice goes out at 1 s
    } else {
      try {
        me.to(1).irecv(b.region, 0, 8, 1)->wait(3s);
        ADD_FAILURE() << "expected IoError";
      } catch (const IoError& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.peerRank(), 1) << what;
        EXPECT_NE(what.find("from rank 1: rank 1 sent nothing for"), std::string::npos) << what;
      }
      done.raise();
    }
    done.waitUp();
  });
  expectAllOk(errors);
}

// Two ranks each wait for the other (different collectives): the one that times out says so.
TEST(TcpUringFailure, MutualWaitIsReportedAsMismatchedCalls) {
  EnvGuard env;
  Flag done;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(64);
    try {
      me.to(1 - me.rank).irecv(b.region, 0, 8, 1)->wait(me.rank == 0 ? 2s : 1s);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peerRank(), 1 - me.rank) << what;
      if (me.rank == 0) {  // rank 1 told rank 0 at 0.5 s that it waits for rank 0
        EXPECT_NE(what.find("which waits for it: the ranks are running different collectives"), std::string::npos)
            << what;
      }
    }
    if (me.rank == 0) done.raise();
    if (me.rank == 1) done.waitUp();  // closing its sockets first would fail rank 0 differently
  });
  expectAllOk(errors);
}

// Not a timing test: only that a waiting rank blocks in the kernel instead of spinning.
TEST(TcpUringFailure, WaitingRankSleeps) {
  EnvGuard env;
  Flag done;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      done.waitUp(20s);
      return;
    }
    double cpu0 = threadCpuSeconds();
    auto wall0 = std::chrono::steady_clock::now();
    EXPECT_THROW(me.to(0).irecv(b.region, 0, 8, 1)->wait(1s), IoError);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    double cpu = threadCpuSeconds() - cpu0;
    EXPECT_GE(wall, 0.9);
    EXPECT_LT(cpu, 0.3 * wall) << "the waiting thread used " << cpu << " s of CPU in " << wall << " s";
    done.raise();
  });
  expectAllOk(errors);
}

// A peer whose device goes away (closing its sockets) fails requests that still need it, and
// only those: requests satisfied by what it sent before closing still complete.
TEST(TcpUringFailure, ClosedPeerFailsPendingRequestsNamingIt) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(4096);
    if (me.rank == 0) {
      me.to(1).isend(b.region, 0, 4096, 1)->wait(10s);
      return;  // the device is destroyed: its sockets close
    }
    auto pending = me.to(0).irecv(b.region, 0, 16, 2);
    try {
      pending->wait(10s);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_EQ(e.peerRank(), 0);
      EXPECT_NE(std::string(e.what()).find("connection to rank 0 closed"), std::string::npos) << e.what();
    }
  });
  expectAllOk(errors);
}

TEST(TcpUringFailure, PeerThatFinishedIsNoFailure) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "3"}};
  Flag closed;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(3 << 20);
    if (me.rank == 0) {
      me.to(1).isend(b.region, 0, 3 << 20, 1)->wait(10s);
      me.to(1).isend(b.region, 0, 10, 2)->wait(10s);
      return;
    }
    me.to(0).irecv(b.region, 0, 3 << 20, 1)->wait(10s);
    std::this_thread::sleep_for(100ms);  // rank 0 has closed by now
    auto r = me.to(0).irecv(b.region, 0, 10, 2);  // buffered before the close
    EXPECT_TRUE(r->test());
    // Nothing left to match this one: it fails (at once, or when the closes are seen).
    EXPECT_THROW(me.to(0).irecv(b.region, 0, 10, 3)->wait(5s), IoError);
  });
  expectAllOk(errors);
}

TEST(TcpUringFailure, DestroyingAPendingRequestPoisonsTheDevice) {
  EnvGuard env;
  Flag done;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b(64);
    if (me.rank == 0) {
      done.waitUp(20s);
      return;
    }
    { auto r = me.to(0).irecv(b.region, 0, 8, 1); }
    try {
      me.to(0).irecv(b.region, 0, 8, 2);
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("destroyed before it completed"), std::string::npos) << e.what();
    }
    done.raise();
  });
  expectAllOk(errors);
}

TEST(TcpUringFailure, ConnectionsOutliveTheirDevice) {
  EnvGuard env;
  rendezvous::HashStore store;
  std::unique_ptr<transport::Connection> survivor;
  std::vector<std::unique_ptr<transport::Connection>> keep;
  std::thread t([&] {
    auto d = transport::createDevice("tcp_uring");
    keep = d->connectAll(store, "s", 1, 2, 10s);
  });
  {
    auto d = transport::createDevice("tcp_uring");
    auto peers = d->connectAll(store, "s", 0, 2, 10s);
    survivor = std::move(peers[1]);
  }
  t.join();
  Buffer b(8);
  EXPECT_EQ(survivor->peerRank(), 1);
  EXPECT_THROW(survivor->isend(b.region, 0, 8, 1), Error);
}

TEST(TcpUringFailure, ConnectTimesOutNamingTheMissingRank) {
  EnvGuard env;
  rendezvous::HashStore store;
  auto device = transport::createDevice("tcp_uring");
  try {
    device->connectAll(store, "c", 0, 3, 300ms);  // ranks 1 and 2 never come
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  auto device2 = transport::createDevice("tcp_uring");
  try {
    device2->connectAll(store, "d", 1, 2, 300ms);  // rank 0 never connects to rank 1
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 0 never connected"), std::string::npos) << e.what();
  }
}

TEST(TcpUringFailure, SocketsPerPeerMustAgree) {
  rendezvous::HashStore store;
  std::exception_ptr err0, err1;
  std::unique_ptr<transport::Device> d0, d1;
  {
    EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
    d0 = transport::createDevice("tcp_uring");
  }
  {
    EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "3"}};
    d1 = transport::createDevice("tcp_uring");
  }
  std::thread t([&] {
    try {
      d0->connectAll(store, "m", 0, 2, 2s);
    } catch (...) {
      err0 = std::current_exception();
    }
  });
  try {
    d1->connectAll(store, "m", 1, 2, 2s);
  } catch (...) {
    err1 = std::current_exception();
  }
  t.join();
  ASSERT_TRUE(err1);
  EXPECT_NE(describe(err1).find("RINGFOLD_SOCKETS_PER_PEER"), std::string::npos) << describe(err1);
  EXPECT_TRUE(err0);  // rank 0 is never acknowledged
}

TEST(TcpUringFailure, BadSettingsNameTheVariable) {
  {
    EnvGuard env{{"RINGFOLD_ZEROCOPY", "sometimes"}};
    EXPECT_THROW(transport::createDevice("tcp_uring"), InvalidArgument);
  }
  {
    EnvGuard env{{"RINGFOLD_URING_SETUP", "turbo"}};
    EXPECT_THROW(transport::createDevice("tcp_uring"), InvalidArgument);
  }
  {
    EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "0"}};
    EXPECT_THROW(transport::createDevice("tcp_uring"), InvalidArgument);
  }
}

}  // namespace
}  // namespace ringfold::test
