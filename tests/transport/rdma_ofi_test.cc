// The ofi fabric (transport/rdma/fabric_ofi.h) between two forked processes over libfabric
// (tcp;ofi_rxm on 127.0.0.1 unless RINGFOLD_OFI_PROVIDER / FI_PROVIDER name another provider).
// Each test forks two ranks that exchange endpoint names and registrations through a socketpair;
// every wait in a child is bounded, and the parent SIGKILLs children past a deadline. A child
// that cannot open the fabric exits 77 and the test skips with its reason.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "fabric_pair.h"
#include "transport/rdma/fabric_ofi.h"
#include "transport/rdma/ofi_api.h"

#include <rdma/fi_errno.h>

namespace ringfold::transport::rdma {
namespace {

using namespace pairtest;

// A registered buffer and how the other rank names it.
struct Buffer {
  std::vector<uint8_t> bytes;
  Registration reg;
  Buffer(Fabric& f, size_t n, uint8_t fill = 0) : bytes(n, fill) {
    reg = f.registerMemory(bytes.data(), n, MemoryKind::kHost);
  }
  std::string publish() const { return detail::concat(reg.rkey, " ", reg.remoteBase); }
};
struct Remote {
  uint64_t rkey = 0, base = 0;
  explicit Remote(const std::string& text) { std::istringstream(text) >> rkey >> base; }
  RemoteAddress at(uint64_t offset) const { return {base + offset, rkey}; }
};

void setChildEnvironment() {
  if (!getenv("RINGFOLD_OFI_PROVIDER") && !getenv("FI_PROVIDER")) setenv("RINGFOLD_OFI_PROVIDER", "tcp;ofi_rxm", 1);
  if (!getenv("FI_TCP_IFACE")) setenv("FI_TCP_IFACE", "lo", 1);
}

// Opens the fabric and connects the pair (endpoint names over the channel).
void connect(Rank& me) {
  setChildEnvironment();
  try {
    me.fabric = ofi::open(me.rank, 2);
  } catch (const Error& e) {
    throw ChildSkip(detail::concat("no usable libfabric provider: ", e.what()));
  }
  me.send(me.fabric->localAddress(me.peer));
  me.fabric->insertPeer(me.peer, me.recv());
  me.fabric->postImmReceives(me.peer, 64);
}

bool exitedWith(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

std::optional<std::string> skipReason(const Outcome& o) {
  for (int r = 0; r < 2; ++r) {
    if (exitedWith(o.status[r], kSkip)) return o.report[r];
  }
  return std::nullopt;
}

#define EXPECT_RANK_PASSED(o, r)                                                                                       \
  EXPECT_TRUE(exitedWith((o).status[r], 0))                                                                            \
      << "rank " << r << " status " << (o).status[r] << ((o).timedOut ? " (killed at the test deadline)" : "") << ": " \
      << (o).report[r]

// Skips the test when a child could not open the fabric; prints what the children noted.
#define SKIP_OR_SHOW(o)                                                                         \
  if (auto why_ = skipReason(o)) GTEST_SKIP() << *why_;                                         \
  for (int r_ = 0; r_ < 2; ++r_) {                                                              \
    if (!(o).report[r_].empty()) std::cout << "[rank " << r_ << "] " << (o).report[r_] << "\n"; \
  }

void idle(Rank&) {}

// Whether this process has libfabric mapped.
bool libfabricMapped() {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, maps) != nullptr) found = std::strstr(line, "/libfabric.so") != nullptr;
  std::fclose(maps);
  return found;
}

// libringfold does not load libfabric (and its providers' libraries) until the ofi fabric is
// used: ctest runs each test in a fresh process, so nothing before this test loaded it.
TEST(OfiApi, LibfabricIsLoadedOnFirstUseOnly) {
  if (libfabricMapped()) GTEST_SKIP() << "an earlier test in this process loaded libfabric (run this test alone)";
  std::string why;
  const ofi::Api* api = ofi::ofiApi(&why);
  ASSERT_NE(api, nullptr) << why;
  EXPECT_TRUE(libfabricMapped());
  EXPECT_EQ(ofi::ofiApi(nullptr), api) << "loaded once";
  // The functions work at the versions resolved: fi_allocinfo, fi_freeinfo, fi_strerror.
  fi_info* info = api->dupinfo(nullptr);
  ASSERT_NE(info, nullptr);
  ASSERT_NE(info->ep_attr, nullptr);
  api->freeinfo(info);
  EXPECT_STRNE(api->strerror(FI_EAGAIN), "");
}

// Loading libfabric leaves the process's signal handling as it was (kept_signals.h): Debian's
// psm providers install handlers for SIGTERM and others from libinfinipath's constructor, and
// its SIGTERM handler called exit(1) in the middle of a job. In a child: SIGINT keeps the
// handler set before, and SIGTERM still kills with SIGTERM.
void onSigint(int) {}

TEST(OfiApi, LoadingLibfabricKeepsTheProcessSignalHandlers) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);
    struct sigaction mine {};
    mine.sa_handler = onSigint;
    sigaction(SIGINT, &mine, nullptr);
    std::string why;
    if (ofi::ofiApi(&why) == nullptr) _exit(kSkip);
    struct sigaction now {};
    sigaction(SIGINT, nullptr, &now);
    if (now.sa_handler != onSigint) _exit(3);
    raise(SIGTERM);
    _exit(4);  // SIGTERM was caught
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (exitedWith(status, kSkip)) GTEST_SKIP() << "libfabric.so.1 cannot be loaded here";
  EXPECT_FALSE(exitedWith(status, 3)) << "loading libfabric replaced the process's SIGINT handler";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << "SIGTERM did not kill the process by its default action (status " << status
      << (WIFEXITED(status) ? ", exited " + std::to_string(WEXITSTATUS(status)) : std::string()) << ")";
}

TEST(OfiFabric, HardwareProviderNames) {
  EXPECT_TRUE(ofi::hardwareProvider("efa"));
  EXPECT_TRUE(ofi::hardwareProvider("verbs;ofi_rxm"));
  EXPECT_TRUE(ofi::hardwareProvider("psm3"));
  EXPECT_TRUE(ofi::hardwareProvider("CXI"));
  EXPECT_FALSE(ofi::hardwareProvider("tcp;ofi_rxm"));
  EXPECT_FALSE(ofi::hardwareProvider("tcp"));
  EXPECT_FALSE(ofi::hardwareProvider("sockets"));
  EXPECT_FALSE(ofi::hardwareProvider("udp;ofi_rxd"));
  EXPECT_FALSE(ofi::hardwareProvider("shm"));
  EXPECT_FALSE(ofi::hardwareProvider(""));
}

TEST(OfiFabric, UnknownProviderThrowsWithTheReason) {
  Outcome o = runPair(
      [](Rank&) {
        setenv("RINGFOLD_OFI_PROVIDER", "no_such_provider", 1);
        try {
          ofi::open(0, 2);
          CHILD_CHECK(false, "open() succeeded with provider no_such_provider");
        } catch (const Error& e) {
          CHILD_CHECK(std::string(e.what()).find("no_such_provider") != std::string::npos, e.what());
        }
      },
      idle);
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
}

TEST(OfiFabric, OpensAndDescribesItself) {
  Outcome o = runPair(
      [](Rank& me) {
        setChildEnvironment();
        try {
          me.fabric = ofi::open(0, 2);
        } catch (const Error& e) {
          throw ChildSkip(detail::concat("no usable libfabric provider: ", e.what()));
        }
        Fabric& f = *me.fabric;
        CHILD_CHECK(std::string(f.kind()) == "ofi");
        CHILD_CHECK(f.lanes() == 1);
        CHILD_CHECK(f.maxWriteBytes() >= (64u << 10), f.maxWriteBytes());
        CHILD_CHECK(!f.describe().empty());
        CHILD_CHECK(!f.localAddress(1).empty());
        Buffer b(f, 4096);
        CHILD_CHECK(b.reg.handle != nullptr && b.reg.data == b.bytes.data() && b.reg.size == 4096);
        f.deregister(b.reg);
        if (!ofi::hardwareProvider(f.describe().substr(0, f.describe().find(' ')))) {
          // Software providers get no FI_HMEM: GPU memory is refused, the caller stages.
          std::vector<uint8_t> fake(64);
          bool refused = false;
          try {
            f.registerMemory(fake.data(), fake.size(), MemoryKind::kCuda);
          } catch (const InvalidArgument&) {
            refused = true;
          }
          CHILD_CHECK(refused, "kCuda registration was not refused with InvalidArgument");
        }
        me.notes.push_back(detail::concat(f.describe(), ", ordered ", f.writesOrdered(), ", max write ",
                                          f.maxWriteBytes(), ", wait fd ", f.waitFd()));
        f.close();
        f.deregister(b.reg);  // after close: a no-op
      },
      idle);
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
}

// Rank 0 writes A (no imm) then B with an immediate; rank 1 sees the immediate from rank 0 with
// B (and A where writes are ordered) in place, then answers with a write-with-imm of its own.
TEST(OfiFabric, WriteAndWriteImmLandWithBytesAndImmediate) {
  constexpr uint32_t kImm0 = 0xFEDCBA98u, kImm1 = 0x80000001u;
  Outcome o = runPair(
      [&](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, 8192), dst(f, 4096);
        for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = static_cast<uint8_t>(i * 13 + 5);
        me.send(dst.publish());
        Remote peer(me.recv());
        me.post([&] { return f.postWrite(1, 0, src.bytes.data(), 1000, src.reg, peer.at(100), 11); });
        me.post([&] { return f.postWriteImm(1, 0, src.bytes.data() + 4000, 3000, src.reg, peer.at(5000), kImm0, 12); });
        Completion a = me.awaitDone(11), b = me.awaitDone(12);
        CHILD_CHECK(a.type == Type::kWriteDone && a.peer == 1, show(a));
        CHILD_CHECK(b.type == Type::kWriteDone && b.peer == 1, show(b));
        Completion back = me.awaitImm(kImm1);
        CHILD_CHECK(back.type == Type::kImmediate && back.imm == kImm1 && back.peer == 1, show(back));
        for (size_t i = 0; i < 500; ++i) CHILD_CHECK(dst.bytes[10 + i] == static_cast<uint8_t>(i + 1), "byte ", i);
        CHILD_CHECK(me.got.empty(), "unexpected completions: ", me.seen());
        me.barrier();
      },
      [&](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, 1024), dst(f, 8192);
        for (size_t i = 0; i < 500; ++i) src.bytes[i] = static_cast<uint8_t>(i + 1);
        me.send(dst.publish());
        Remote peer(me.recv());
        Completion c = me.awaitImm(kImm0);
        CHILD_CHECK(c.type == Type::kImmediate && c.imm == kImm0 && c.peer == 0, show(c));
        for (size_t i = 0; i < 3000; ++i) {
          CHILD_CHECK(dst.bytes[5000 + i] == static_cast<uint8_t>((4000 + i) * 13 + 5), "B byte ", i);
        }
        if (f.writesOrdered()) {
          for (size_t i = 0; i < 1000; ++i)
            CHILD_CHECK(dst.bytes[100 + i] == static_cast<uint8_t>(i * 13 + 5), "A byte ", i);
        } else {
          me.notes.push_back("writes unordered: A not checked at the immediate");
        }
        CHILD_CHECK(dst.bytes[99] == 0 && dst.bytes[1100] == 0 && dst.bytes[4999] == 0 && dst.bytes[8000] == 0);
        me.post([&] { return f.postWriteImm(0, 0, src.bytes.data(), 500, src.reg, peer.at(10), kImm1, 21); });
        Completion d = me.awaitDone(21);
        CHILD_CHECK(d.type == Type::kWriteDone && d.peer == 0, show(d));
        CHILD_CHECK(me.got.empty(), "unexpected completions: ", me.seen());
        me.barrier();
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

TEST(OfiFabric, ZeroLengthWriteImm) {
  Outcome o = runPair(
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, 64);
        Remote peer(me.recv());
        for (uint32_t i = 0; i < 3; ++i) {
          me.post([&] { return f.postWriteImm(1, 0, src.bytes.data(), 0, src.reg, peer.at(64 * i), 7 + i, 30 + i); });
        }
        for (uint32_t i = 0; i < 3; ++i) {
          Completion c = me.awaitDone(30 + i);
          CHILD_CHECK(c.type == Type::kWriteDone && c.peer == 1, show(c));
        }
        me.barrier();
      },
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer dst(f, 256, 0xEE);
        me.send(dst.publish());
        for (uint32_t i = 0; i < 3; ++i) {
          Completion c = me.awaitImm(7 + i);
          CHILD_CHECK(c.type == Type::kImmediate && c.peer == 0, show(c));
        }
        for (uint8_t byte : dst.bytes) CHILD_CHECK(byte == 0xEE, "a zero-length write changed memory");
        me.barrier();
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

// 1000 writes of 64 KiB, at most 16 in flight, the last with an immediate: every context
// completes exactly once; where writes are ordered, the target holds the last 16 at the immediate.
TEST(OfiFabric, ManyWritesAllComplete) {
  constexpr int kWrites = 1000, kSlots = 16;
  constexpr size_t kBytes = 64 << 10;
  auto pattern = [](int i) { return static_cast<uint8_t>(i * 7 + 1); };
  Outcome o = runPair(
      [&](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, kBytes * kSlots);
        Remote peer(me.recv());
        std::vector<int> completed(kWrites, 0);
        std::array<bool, kSlots> busy{};
        int inFlight = 0, next = 0, done = 0;
        const auto until = Clock::now() + 20s;
        while (done < kWrites) {
          CHILD_CHECK(Clock::now() < until, done, " of ", kWrites, " writes completed");
          while (next < kWrites && !busy[next % kSlots]) {
            const int i = next, slot = i % kSlots;
            uint8_t* p = src.bytes.data() + slot * kBytes;
            std::memset(p, pattern(i), kBytes);
            int rc = i == kWrites - 1 ? f.postWriteImm(1, 0, p, kBytes, src.reg, peer.at(slot * kBytes), 999, i)
                                      : f.postWrite(1, 0, p, kBytes, src.reg, peer.at(slot * kBytes), i);
            if (rc == -EAGAIN) break;
            CHILD_CHECK(rc == 0, "post ", i, " returned ", rc);
            busy[slot] = true;
            ++inFlight;
            ++next;
          }
          me.pump();
          while (!me.got.empty()) {
            Completion c = std::move(me.got.front());
            me.got.pop_front();
            CHILD_CHECK(c.type == Type::kWriteDone && c.peer == 1 && c.context < kWrites, show(c));
            CHILD_CHECK(++completed[c.context] == 1, "context ", c.context, " completed twice");
            busy[c.context % kSlots] = false;
            --inFlight;
            ++done;
          }
        }
        CHILD_CHECK(inFlight == 0);
        me.barrier();
      },
      [&](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer dst(f, kBytes * kSlots);
        me.send(dst.publish());
        const auto until = Clock::now() + 20s;
        for (;;) {
          CHILD_CHECK(Clock::now() < until, "no final immediate");
          me.pump();
          if (!me.got.empty()) break;
        }
        Completion c = me.got.front();
        CHILD_CHECK(c.type == Type::kImmediate && c.imm == 999 && c.peer == 0, show(c));
        if (f.writesOrdered()) {
          for (int slot = 0; slot < kSlots; ++slot) {
            const int last = kWrites - kSlots + ((slot - (kWrites - kSlots) % kSlots) + kSlots) % kSlots;
            for (size_t b = 0; b < kBytes; b += 4093) {
              CHILD_CHECK(dst.bytes[slot * kBytes + b] == pattern(last), "slot ", slot, " byte ", b);
            }
          }
        }
        me.barrier();
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

// A write naming a key the target never gave. Where the provider completes writes when they
// leave (tcp;ofi_rxm: transmit completion), the bad write itself ends as kWriteDone: the target
// drops its bytes and the connection, and the writes in flight after it end in kError naming the
// peer. Either way the poster hears of it as kError naming the peer, and the target neither
// sees the immediate nor has its memory changed.
TEST(OfiFabric, BadKeyGivesErrorAtThePoster) {
  Outcome o = runPair(
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, 4096, 1);
        Remote good(me.recv());
        Remote bad = good;
        bad.rkey += 0x5151;
        me.post([&] { return f.postWriteImm(1, 0, src.bytes.data(), 1024, src.reg, bad.at(0), 5, 40); });
        Completion first = me.awaitDone(40);
        if (first.type == Type::kError) {
          CHILD_CHECK(first.peer == 1, show(first));
          me.notes.push_back("the bad write itself: " + show(first));
        } else {
          // Keep good writes (64 bytes at offset 2048 and up) in flight until one fails.
          const auto until = Clock::now() + kWait;
          std::optional<Completion> error;
          int inFlight = 0;
          uint64_t next = 41;
          while (!error) {
            CHILD_CHECK(Clock::now() < until, "no kError within the wait after a write with a bad key");
            if (inFlight < 4) {
              int rc = f.postWrite(1, 0, src.bytes.data(), 64, src.reg, good.at(2048 + (next % 8) * 64), next);
              CHILD_CHECK(rc == 0 || rc == -EAGAIN, "post returned ", rc);
              if (rc == 0) ++inFlight, ++next;
            }
            me.pump();
            for (; !me.got.empty(); me.got.pop_front(), --inFlight) {
              if (me.got.front().type == Type::kError) error = me.got.front();
            }
          }
          CHILD_CHECK(error->peer == 1, show(*error));
          me.notes.push_back(detail::concat("the bad write completed as kWriteDone; write ", error->context - 40,
                                            " after it: ", show(*error)));
        }
        me.send("seen");
      },
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer dst(f, 4096);
        me.send(dst.publish());
        // Polls meanwhile. Rank 0 may take a whole wait for its first completion and another
        // for the error (on a loaded machine the connection drop takes that long), so this one
        // waits for both.
        CHILD_CHECK(me.recv(2 * kWait + 4s) == "seen");
        for (const Completion& c : me.got) CHILD_CHECK(c.type != Type::kImmediate, "target saw ", show(c));
        for (size_t i = 0; i < 1024; ++i) CHILD_CHECK(dst.bytes[i] == 0, "a write with a bad key changed memory");
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

// Rank 0 kills rank 1 with SIGKILL and keeps writing to it (up to `window` writes in flight,
// after `idle` without any): it must see kError naming rank 1 within the wait, never a hang (a
// provider may also refuse the post itself with an error, which the contract allows), and
// close() must then return.
void expectKilledPeerError(std::chrono::milliseconds idle, int window) {
  Outcome o = runPair(
      [&](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        constexpr size_t kBytes = 64 << 10;
        Buffer src(f, kBytes * 4, 3);
        std::istringstream hello(me.recv());
        pid_t victim;
        uint64_t rkey, base;
        hello >> victim >> rkey >> base;
        Remote peer(detail::concat(rkey, " ", base));
        me.post([&] { return f.postWriteImm(1, 0, src.bytes.data(), 64, src.reg, peer.at(0), 1, 1000); });
        CHILD_CHECK(me.awaitDone(1000).type == Type::kWriteDone);
        CHILD_CHECK(kill(victim, SIGKILL) == 0);
        const auto killed = Clock::now();
        while (Clock::now() - killed < idle) me.pump();
        int inFlight = 0, accepted = 0;
        uint64_t next = 0;
        std::optional<Completion> error;
        int postError = 0;
        while (!error && postError == 0) {
          CHILD_CHECK(Clock::now() - killed < kWait, "no kError within the wait after the kill (", accepted,
                      " writes accepted)");
          if (inFlight < window) {
            int rc = f.postWrite(1, 0, src.bytes.data() + (next % 4) * kBytes, kBytes, src.reg, peer.at(0), next);
            if (rc == 0) {
              ++inFlight, ++next, ++accepted;
            } else if (rc != -EAGAIN) {
              postError = rc;
            }
          }
          me.pump();
          for (; !me.got.empty(); me.got.pop_front(), --inFlight) {
            if (me.got.front().type == Type::kError) error = me.got.front();
          }
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
        if (error) {
          CHILD_CHECK(error->peer == 1, show(*error));
          CHILD_CHECK(!error->error.empty());
          me.notes.push_back(
              detail::concat("kError ", seconds, " s after the kill, ", accepted, " writes accepted: ", error->error));
        } else {
          me.notes.push_back(detail::concat("post refused with ", postError, " (", strerror(-postError), ") ", seconds,
                                            " s after the kill, ", accepted, " writes accepted"));
        }
        f.close();  // must not wait on the dead peer (the parent's deadline bounds it)
      },
      [](Rank& me) {
        connect(me);
        Buffer dst(*me.fabric, 64 << 10);
        me.send(detail::concat(getpid(), " ", dst.publish()));
        const auto until = Clock::now() + kWait * 2;
        while (Clock::now() < until) me.pump();  // until killed
        throw ChildFailure("rank 1 was not killed");
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_TRUE(WIFSIGNALED(o.status[1]) && WTERMSIG(o.status[1]) == SIGKILL) << "rank 1 status " << o.status[1];
}

TEST(OfiFabric, KilledPeerGivesErrorNamingIt) { expectKilledPeerError(0ms, 4); }

// Killed while nothing was in flight to it: ofi_rxm only finds the connection gone (or refused)
// when the next writes are posted.
TEST(OfiFabric, KilledIdlePeerGivesErrorOnTheNextWrites) { expectKilledPeerError(300ms, 1); }

// Rank 1 arms the wait and blocks in poll(2) on waitFd(); rank 0 writes only after rank 1 said
// it armed: the fd must become readable, and the immediate must then be polled.
TEST(OfiFabric, WaitFdWakesWhenThePeerWrites) {
  Outcome o = runPair(
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        Buffer src(f, 256, 9);
        Remote peer(me.recv());
        me.post([&] { return f.postWriteImm(1, 0, src.bytes.data(), 8, src.reg, peer.at(0), 1, 50); });
        CHILD_CHECK(me.awaitDone(50).type == Type::kWriteDone);
        CHILD_CHECK(me.recv() == "sleeping");
        me.post([&] { return f.postWriteImm(1, 0, src.bytes.data(), 256, src.reg, peer.at(0), 2, 51); });
        CHILD_CHECK(me.awaitDone(51).type == Type::kWriteDone);
        me.barrier();
      },
      [](Rank& me) {
        connect(me);
        Fabric& f = *me.fabric;
        if (f.waitFd() < 0) throw ChildSkip("this provider gives no wait fd (FI_WAIT_FD refused)");
        Buffer dst(f, 256);
        me.send(dst.publish());
        CHILD_CHECK(me.awaitImm(1).type == Type::kImmediate);  // the pair is connected
        me.pump();
        CHILD_CHECK(me.got.empty(), me.seen());
        const auto until = Clock::now() + kWait;
        while (!f.armWait()) {
          CHILD_CHECK(Clock::now() < until, "armWait() never returned true on an idle fabric");
          me.pump();
          CHILD_CHECK(me.got.empty(), me.seen());
        }
        me.send("sleeping");  // no fabric progress from here until the fd wakes us
        pollfd p{f.waitFd(), POLLIN, 0};
        int rc = ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count()));
        CHILD_CHECK(rc == 1, "the wait fd did not become readable when the peer wrote (poll ", rc, ")");
        // Woken: poll (and sleep again when nothing is there yet) until the immediate.
        for (;;) {
          CHILD_CHECK(Clock::now() < until + kWait, "no immediate after the wake");
          me.pump();
          if (!me.got.empty()) break;
          if (f.armWait()) ::poll(&p, 1, 100);
        }
        Completion c = me.got.front();
        me.got.pop_front();
        CHILD_CHECK(c.type == Type::kImmediate && c.imm == 2 && c.peer == 0, show(c));
        CHILD_CHECK(dst.bytes[255] == 9);
        me.barrier();
      });
  SKIP_OR_SHOW(o);
  EXPECT_RANK_PASSED(o, 0);
  EXPECT_RANK_PASSED(o, 1);
}

}  // namespace
}  // namespace ringfold::transport::rdma
