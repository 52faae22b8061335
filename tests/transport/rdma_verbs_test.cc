// transport_rdma_verbs_test: ringfold's verbs fabric (transport/rdma/fabric_verbs.h) between two
// forked processes, over the libibverbs.so.1 test double (tests/transport/verbs_double). CTest
// runs it with LD_LIBRARY_PATH=<the double's directory>, so the fabric's unchanged
// dlopen("libibverbs.so.1") finds the double, as it finds rdma-core on a cluster. Each test forks
// two ranks that exchange localAddress() and registrations through a socketpair; every wait in a
// child is bounded and the parent SIGKILLs children past the test's deadline.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "fabric_pair.h"
#include "transport/rdma/fabric_verbs.h"
#include "verbs_double/hook.h"

namespace ringfold::transport::rdma {
namespace {

using namespace pairtest;

// Where the process's libibverbs.so.1 comes from; the test is meaningless on another library.
std::string loadedVerbsLibrary() {
  void* handle = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) handle = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return "(none)";
  Dl_info info{};
  void* sym = dlsym(handle, "ibv_open_device");
  if (!sym || !dladdr(sym, &info) || !info.dli_fname) return "(unknown)";
  return info.dli_fname;
}

#define REQUIRE_THE_DOUBLE()                                                                              \
  do {                                                                                                    \
    std::string lib_ = loadedVerbsLibrary();                                                              \
    if (lib_.find(VERBS_DOUBLE_DIR) != 0)                                                                 \
      FAIL() << "libibverbs.so.1 resolves to " << lib_ << ", not the double: run through ctest, or with " \
             << "LD_LIBRARY_PATH=" << VERBS_DOUBLE_DIR;                                                   \
  } while (0)

struct Buffer {
  std::vector<uint8_t> bytes;
  Registration reg;
  Buffer(Fabric& f, size_t n) : bytes(n, 0) { reg = f.registerMemory(bytes.data(), n, MemoryKind::kHost); }
  std::string publish() const { return detail::concat(reg.rkey, " ", reg.remoteBase); }
  void fill(uint32_t seed) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 7);
  }
  bool holds(size_t off, size_t len, uint32_t seed, size_t srcOff) const {
    for (size_t i = 0; i < len; ++i)
      if (bytes[off + i] != static_cast<uint8_t>(((srcOff + i) * 2654435761u + seed) >> 7)) return false;
    return true;
  }
};
RemoteAddress remoteAt(const std::string& published, uint64_t offset) {
  uint64_t rkey = 0, base = 0;
  std::istringstream(published) >> rkey >> base;
  return {base + offset, rkey};
}

// Opens rank `me.rank` of 2 and connects it to the other rank.
void connect(Rank& me, int receives = 64) {
  me.fabric = verbs::open(me.rank, 2);
  me.send(me.fabric->localAddress(me.peer));
  me.fabric->insertPeer(me.peer, me.recv());
  me.fabric->postImmReceives(me.peer, receives);
}

bool exitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

#define EXPECT_RANK_PASSED(o, r)                                                                                      \
  EXPECT_TRUE(exitedOk((o).status[r])) << "rank " << r << " status " << (o).status[r]                                 \
                                       << ((o).timedOut ? " (killed at the test deadline)" : "") << ": " << (o).report[r]

void idle(Rank&) {}

TEST(VerbsFabric, OpenNamesWhyItCannotRun) {
  REQUIRE_THE_DOUBLE();
  auto expectThrow = [](const char* fragment) {
    return [fragment](Rank& me) {
      try {
        verbs::open(me.rank, 2);
        CHILD_CHECK(false, "open() succeeded");
      } catch (const Error& e) {
        CHILD_CHECK(std::string(e.what()).find(fragment) != std::string::npos, e.what());
      }
    };
  };
  Outcome none = runPair({{"VERBS_DOUBLE_DEVICES", ""}}, expectThrow("no RDMA devices"), idle);
  EXPECT_RANK_PASSED(none, 0);
  Outcome down = runPair({{"VERBS_DOUBLE_PORT_STATE", "down"}}, expectThrow("mock0:1 is DOWN"), idle);
  EXPECT_RANK_PASSED(down, 0);
  Outcome hca = runPair({{"RINGFOLD_IB_HCA", "mlx5_0"}}, expectThrow("mlx5_0"), idle);
  EXPECT_RANK_PASSED(hca, 0);
}

TEST(VerbsFabric, OpensOnTheDoubleAndDescribesItself) {
  REQUIRE_THE_DOUBLE();
  Outcome o = runPair(
      {{"VERBS_DOUBLE_DEVICES", "mock0,mock1:ib"}, {"RINGFOLD_IB_QPS_PER_CONNECTION", "3"}},
      [](Rank& me) {
        std::string why;
        CHILD_CHECK(verbs::usable(why), why);
        CHILD_CHECK(why.find("mock0:1") != std::string::npos, why);
        me.fabric = verbs::open(0, 2);
        CHILD_CHECK(std::string(me.fabric->kind()) == "verbs");
        CHILD_CHECK(me.fabric->lanes() == 3);
        CHILD_CHECK(me.fabric->writesOrdered());
        std::string d = me.fabric->describe();
        CHILD_CHECK(d.find("mock0:1") != std::string::npos && d.find("RoCE v2") != std::string::npos, d);
        me.fabric->close();
        setenv("RINGFOLD_IB_HCA", "mock1", 1);
        me.fabric = verbs::open(0, 2);
        d = me.fabric->describe();
        CHILD_CHECK(d.find("mock1:1 InfiniBand LID") != std::string::npos, d);
      },
      idle);
  EXPECT_RANK_PASSED(o, 0);
}

// Rank 0 writes a large block, then an immediate, on each lane; rank 1 sees them in order.
void writesLand(const char* linkLayer) {
  constexpr size_t kBytes = 3u << 20;
  Body writer = [](Rank& me) {
    connect(me);
    Buffer src(*me.fabric, kBytes);
    src.fill(5);
    std::string target = me.recv();
    for (int lane = 0; lane < me.fabric->lanes(); ++lane) {
      size_t off = lane * (kBytes / 2) + 3;
      size_t len = kBytes / 2 - 7;
      me.post([&] {
        return me.fabric->postWrite(1, lane, src.bytes.data() + off, len, src.reg, remoteAt(target, off), 10 + lane);
      });
      me.post([&] {
        return me.fabric->postWriteImm(1, lane, src.bytes.data(), 0, src.reg, remoteAt(target, 0), 0xabc00 + lane,
                                       20 + lane);
      });
    }
    for (int lane = 0; lane < me.fabric->lanes(); ++lane) {
      CHILD_CHECK(me.awaitDone(10 + lane).type == Type::kWriteDone);
      CHILD_CHECK(me.awaitDone(20 + lane).type == Type::kWriteDone);
    }
    me.recv();  // the target checked
  };
  Body target = [](Rank& me) {
    connect(me);
    Buffer dst(*me.fabric, kBytes);
    me.send(dst.publish());
    for (int lane = 0; lane < me.fabric->lanes(); ++lane) {
      Completion c = me.awaitImm();
      CHILD_CHECK(c.type == Type::kImmediate && c.peer == 0, show(c));
      int from = static_cast<int>(c.imm - 0xabc00);
      CHILD_CHECK(from >= 0 && from < me.fabric->lanes(), show(c));
      size_t off = from * (kBytes / 2) + 3;
      CHILD_CHECK(dst.holds(off, kBytes / 2 - 7, 5, off), "bytes of lane ", from, " did not land before its imm");
      me.fabric->postImmReceives(0, 1);
    }
    me.send("checked");
  };
  Outcome o = runPair({{"VERBS_DOUBLE_LINK_LAYER", linkLayer}, {"RINGFOLD_IB_QPS_PER_CONNECTION", "2"}}, writer,
                      target);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

TEST(VerbsFabric, WritesAndImmediatesLandOverRoce) {
  REQUIRE_THE_DOUBLE();
  writesLand("eth");
}

TEST(VerbsFabric, WritesAndImmediatesLandOverInfiniBand) {
  REQUIRE_THE_DOUBLE();
  writesLand("ib");
}

TEST(VerbsFabric, WaitFdWakesASleepingRank) {
  REQUIRE_THE_DOUBLE();
  Outcome o = runPair(
      {},
      [](Rank& me) {
        connect(me);
        Buffer src(*me.fabric, 64);
        std::string target = me.recv();
        std::this_thread::sleep_for(100ms);  // rank 1 is asleep on waitFd() by now
        me.post([&] { return me.fabric->postWriteImm(1, 0, src.bytes.data(), 64, src.reg, remoteAt(target, 0), 7, 1); });
        CHILD_CHECK(me.awaitDone(1).type == Type::kWriteDone);
        me.recv();
      },
      [](Rank& me) {
        connect(me);
        Buffer dst(*me.fabric, 64);
        CHILD_CHECK(me.fabric->waitFd() >= 0);
        const auto until = Clock::now() + kWait;
        while (!me.fabric->armWait()) {  // completions may be pending: poll, then arm again
          me.pump();
          CHILD_CHECK(me.got.empty() && Clock::now() < until, "unexpected completions before the write");
        }
        me.send(dst.publish());
        pollfd p{me.fabric->waitFd(), POLLIN, 0};
        CHILD_CHECK(::poll(&p, 1, 10000) == 1, "waitFd() did not wake");
        Completion c = me.awaitImm();
        CHILD_CHECK(c.type == Type::kImmediate && c.imm == 7 && c.peer == 0, show(c));
        me.send("done");
      });
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

TEST(VerbsFabric, BadKeyFailsAtThePosterNamingThePeer) {
  REQUIRE_THE_DOUBLE();
  Outcome o = runPair(
      {},
      [](Rank& me) {
        connect(me);
        Buffer src(*me.fabric, 256);
        RemoteAddress at = remoteAt(me.recv(), 0);
        at.rkey ^= 0x4000;
        me.post([&] { return me.fabric->postWrite(1, 0, src.bytes.data(), 256, src.reg, at, 5); });
        Completion c = me.awaitDone(5);
        CHILD_CHECK(c.type == Type::kError && c.peer == 1, show(c));
        CHILD_CHECK(c.error.find("remote access") != std::string::npos && c.error.find("rank 1") != std::string::npos,
                    c.error);
        me.send("done");
      },
      [](Rank& me) {
        connect(me);
        Buffer dst(*me.fabric, 256);
        me.send(dst.publish());
        Completion c = me.awaitError();  // the responder's QP failed too (access violation)
        CHILD_CHECK(c.peer == 0, show(c));
        me.recv();
        for (uint8_t b : dst.bytes) CHILD_CHECK(b == 0);
      });
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

// Rank 1 tells its pid and parks; rank 0 SIGKILLs it and writes: kError naming rank 1.
TEST(VerbsFabric, KilledPeerEndsInAnErrorNamingIt) {
  REQUIRE_THE_DOUBLE();
  Outcome o = runPair(
      {{"RINGFOLD_IB_TIMEOUT", "12"}, {"RINGFOLD_IB_RETRY_CNT", "3"}},
      [](Rank& me) {
        connect(me);
        Buffer src(*me.fabric, 4096);
        std::string target = me.recv();
        pid_t victim = static_cast<pid_t>(std::stol(me.recv()));
        me.post([&] { return me.fabric->postWrite(1, 0, src.bytes.data(), 4096, src.reg, remoteAt(target, 0), 1); });
        CHILD_CHECK(me.awaitDone(1).type == Type::kWriteDone);
        CHILD_CHECK(kill(victim, SIGKILL) == 0);
        std::this_thread::sleep_for(20ms);
        me.post([&] { return me.fabric->postWrite(1, 0, src.bytes.data(), 4096, src.reg, remoteAt(target, 0), 2); });
        Completion c = me.awaitDone(2);
        CHILD_CHECK(c.type == Type::kError && c.peer == 1, show(c));
        CHILD_CHECK(c.error.find("rank 1") != std::string::npos, c.error);
        // The double also raises IBV_EVENT_QP_FATAL: it becomes an error naming rank 1 too.
        Completion fatal = me.awaitError();
        CHILD_CHECK(fatal.peer == 1 && fatal.error.find("rank 1") != std::string::npos, show(fatal));
      },
      [](Rank& me) {
        connect(me);
        Buffer dst(*me.fabric, 4096);
        me.send(dst.publish());
        me.send(std::to_string(getpid()));
        for (;;) pause();
      });
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_TRUE(WIFSIGNALED(o.status[1]) && WTERMSIG(o.status[1]) == SIGKILL) << o.report[1];
}

TEST(VerbsFabric, PortGoingDownIsReported) {
  REQUIRE_THE_DOUBLE();
  // Rank 0 takes its port down once connected (on a timer from the NIC's start, a loaded machine
  // could see it go down during the connection).
  Outcome o = runPair(
      [](Rank& me) {
        connect(me);
        CHILD_CHECK(ringfold::test::verbsDoublePortDown() == 1, "the double's hook took no port down");
        Completion c = me.awaitError();
        CHILD_CHECK(c.error.find("port") != std::string::npos, show(c));
        me.send("done");
      },
      [](Rank& me) {
        connect(me);
        me.recv();
      });
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

}  // namespace
}  // namespace ringfold::transport::rdma
