// The fake fabric (transport/rdma/fabric_fake.h) against the Fabric contract (fabric.h), and its
// fault injection. Most tests drive every rank from the test's thread (writes land when the
// target polls); the waitFd and two-jobs tests run ranks as threads. Every wait is bounded.
#include "transport/rdma/fabric_fake.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "common/error.h"
#include "transport/rdma/wire.h"

namespace ringfold::transport::rdma {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Type = Completion::Type;

// `size` fake fabrics of one job, connected pairwise.
struct Job {
  explicit Job(int size) {
    for (int r = 0; r < size; ++r) fabrics.push_back(fake::open(r, size));
    for (int r = 0; r < size; ++r) {
      for (int p = 0; p < size; ++p) {
        if (p != r) fabrics[r]->insertPeer(p, fabrics[p]->localAddress(r));
      }
    }
  }
  Fabric& operator[](int r) { return *fabrics[r]; }
  int size() const { return static_cast<int>(fabrics.size()); }
  std::vector<std::unique_ptr<Fabric>> fabrics;
};

// A registered host buffer of one rank.
struct Buffer {
  Buffer(Fabric& fabric, size_t bytes) : fabric(fabric), data(bytes, 0) {
    reg = fabric.registerMemory(data.data(), data.size(), MemoryKind::kHost);
  }
  RemoteAddress at(size_t offset) const { return RemoteAddress{reg.remoteBase + offset, reg.rkey}; }
  uint64_t word(size_t i) const {
    uint64_t value = 0;
    std::memcpy(&value, data.data() + i * 8, 8);
    return value;
  }
  void setWord(size_t i, uint64_t value) { std::memcpy(data.data() + i * 8, &value, 8); }
  Fabric& fabric;
  std::vector<char> data;
  Registration reg;
};

using Got = std::vector<std::vector<Completion>>;

// Polls every fabric of `job` from this thread, appending to got[rank], until done(got) or 5 s.
bool pump(Job& job, Got& got, const std::function<bool(const Got&)>& done) {
  got.resize(job.size());
  const auto deadline = Clock::now() + 5s;
  while (!done(got)) {
    if (Clock::now() > deadline) return false;
    bool any = false;
    for (int r = 0; r < job.size(); ++r) {
      Completion batch[16];
      const int n = job[r].poll(batch, 16);
      for (int i = 0; i < n; ++i) got[r].push_back(batch[i]);
      any = any || n > 0;
    }
    if (!any) std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A few rounds of polls with no waiting: what single-threaded driving can still deliver.
void settle(Job& job, Got& got) {
  for (int round = 0; round < 4; ++round) pump(job, got, [&, polled = 0](const Got&) mutable { return polled++ > 0; });
}

size_t count(const std::vector<Completion>& completions, Type type) {
  return std::count_if(completions.begin(), completions.end(), [&](const Completion& c) { return c.type == type; });
}

std::function<bool(const Got&)> counts(std::vector<size_t> wanted) {
  return [wanted](const Got& got) {
    for (size_t r = 0; r < wanted.size(); ++r) {
      if (got[r].size() < wanted[r]) return false;
    }
    return true;
  };
}

class FakeFabricTest : public ::testing::Test {
 protected:
  void SetUp() override { fake::clearFaults(); }
  void TearDown() override { fake::clearFaults(); }
};

TEST_F(FakeFabricTest, WriteAndWriteImmLandAndComplete) {
  Job job(2);
  EXPECT_STREQ(job[0].kind(), "fake");
  EXPECT_EQ(job[0].describe(), "fake (ranks as threads)");
  EXPECT_EQ(job[0].lanes(), 1);
  EXPECT_TRUE(job[0].writesOrdered());
  EXPECT_NE(job[0].localAddress(1), job[1].localAddress(0));
  Buffer src(job[0], 4096), dst(job[1], 4096);
  for (size_t i = 0; i < src.data.size(); ++i) src.data[i] = static_cast<char>(i % 255 + 1);
  job[1].postImmReceives(0, 1);
  ASSERT_EQ(job[0].postWrite(1, 0, src.data.data(), 100, src.reg, dst.at(10), 7), 0);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data() + 100, 50, src.reg, dst.at(200), 0xabc, 8), 0);
  Got got;
  ASSERT_TRUE(pump(job, got, counts({2, 1})));
  settle(job, got);
  ASSERT_EQ(got[1].size(), 1u);
  EXPECT_EQ(got[1][0].type, Type::kImmediate);
  EXPECT_EQ(got[1][0].peer, 0);
  EXPECT_EQ(got[1][0].imm, 0xabcu);
  ASSERT_EQ(got[0].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[0][i].type, Type::kWriteDone);
    EXPECT_EQ(got[0][i].context, 7u + i);
  }
  EXPECT_EQ(std::memcmp(dst.data.data() + 10, src.data.data(), 100), 0);
  EXPECT_EQ(std::memcmp(dst.data.data() + 200, src.data.data() + 100, 50), 0);
  EXPECT_EQ(std::count(dst.data.begin(), dst.data.end(), 0), 4096 - 150);
  const fake::Counters c = fake::counters();
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.immediates, 1u);
  EXPECT_EQ(c.bytes, 150u);
  EXPECT_EQ(c.errors, 0u);
}

TEST_F(FakeFabricTest, ZeroLengthWriteImmNeedsNoMemory) {
  Job job(2);
  job[1].postImmReceives(0, 1);
  const uint32_t credits = wire::imm(wire::ImmType::kCredits, 3);
  ASSERT_EQ(job[0].postWriteImm(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, credits, 42), 0);
  Got got;
  ASSERT_TRUE(pump(job, got, counts({1, 1})));
  EXPECT_EQ(got[1][0].type, Type::kImmediate);
  EXPECT_EQ(got[1][0].imm, credits);
  EXPECT_EQ(got[0][0].type, Type::kWriteDone);
  EXPECT_EQ(got[0][0].context, 42u);
}

// Writes lane by lane; odd writes carry an immediate. The target has one receive at a time, so
// each poll lands at most one immediate and what its lane held behind it stays queued.
class FakeFabricOrderTest : public FakeFabricTest, public ::testing::WithParamInterface<bool> {};

TEST_P(FakeFabricOrderTest, OrderedLanesKeepOrderAndReorderMixesLanes) {
  const bool reorder = GetParam();
  constexpr int kLanes = 4, kPerLane = 24;
  fake::Faults faults;
  faults.lanes = kLanes;
  faults.reorder = reorder;
  faults.seed = 7;
  fake::setFaults(faults);
  Job job(2);
  ASSERT_EQ(job[0].lanes(), kLanes);
  Buffer src(job[0], kLanes * kPerLane * 8), dst(job[1], kLanes * kPerLane * 8);
  std::vector<std::pair<int, int>> posted;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < kPerLane; ++i) {
      const size_t slot = lane * kPerLane + i;
      src.setWord(slot, slot + 1);
      const char* from = src.data.data() + slot * 8;
      if (i % 2 == 1) {
        ASSERT_EQ(job[0].postWriteImm(1, lane, from, 8, src.reg, dst.at(slot * 8), lane << 8 | i, slot), 0);
        posted.emplace_back(lane, i);
      } else {
        ASSERT_EQ(job[0].postWrite(1, lane, from, 8, src.reg, dst.at(slot * 8), slot), 0);
      }
    }
  }
  std::vector<std::pair<int, int>> seen;
  std::vector<int> last(kLanes, -1);
  const auto deadline = Clock::now() + 5s;
  while (seen.size() < posted.size() && Clock::now() < deadline) {
    job[1].postImmReceives(0, 1);
    Completion c[4];
    int n = 0;
    while (n == 0 && Clock::now() < deadline) n = job[1].poll(c, 4);
    ASSERT_EQ(n, 1);
    const int lane = c[0].imm >> 8, i = c[0].imm & 0xff;
    EXPECT_GT(i, last[lane]) << "lane " << lane << " delivered out of order";
    last[lane] = i;
    for (int j = 0; j <= i; ++j) {
      EXPECT_EQ(dst.word(lane * kPerLane + j), lane * kPerLane + j + 1u) << "immediate " << i << " of lane " << lane
                                                                         << " seen before write " << j << " landed";
    }
    for (int j = i + 2; j < kPerLane; ++j) EXPECT_EQ(dst.word(lane * kPerLane + j), 0u) << "lane " << lane << " ran ahead";
    seen.emplace_back(lane, i);
  }
  ASSERT_EQ(seen.size(), posted.size());
  if (reorder) {
    EXPECT_NE(seen, posted) << "reorder=true delivered in posting order";
  } else {
    EXPECT_EQ(seen, posted);
  }
  Got got;
  ASSERT_TRUE(pump(job, got, counts({kLanes * kPerLane, 0})));
  EXPECT_EQ(count(got[0], Type::kWriteDone), size_t{kLanes * kPerLane});
}

INSTANTIATE_TEST_SUITE_P(Reorder, FakeFabricOrderTest, ::testing::Bool());

TEST_F(FakeFabricTest, UnorderedFabricReordersWithinALane) {
  fake::Faults faults;
  faults.ordered = false;
  faults.reorder = true;
  fake::setFaults(faults);
  Job job(2);
  EXPECT_FALSE(job[0].writesOrdered());
  EXPECT_NE(job[0].describe().find("unordered"), std::string::npos) << job[0].describe();
  constexpr int kWrites = 64;
  Buffer src(job[0], kWrites * 8), dst(job[1], kWrites * 8);
  job[1].postImmReceives(0, kWrites);
  for (int i = 0; i < kWrites; ++i) {
    src.setWord(i, i + 100);
    ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data() + i * 8, 8, src.reg, dst.at(i * 8), i, i), 0);
  }
  std::vector<uint32_t> seen;
  const auto deadline = Clock::now() + 5s;
  while (seen.size() < kWrites && Clock::now() < deadline) {
    Completion c[8];
    const int n = job[1].poll(c, 8);
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(dst.word(c[k].imm), c[k].imm + 100u) << "immediate before its bytes";
      seen.push_back(c[k].imm);
    }
  }
  ASSERT_EQ(seen.size(), size_t{kWrites});
  EXPECT_FALSE(std::is_sorted(seen.begin(), seen.end())) << "an unordered lane was delivered in order";
  EXPECT_EQ(std::set<uint32_t>(seen.begin(), seen.end()).size(), size_t{kWrites});
}

TEST_F(FakeFabricTest, RemoteAccessErrorsLandNothing) {
  Job job(2);
  Buffer src(job[0], 256), dst(job[1], 256), gone(job[1], 64);
  std::fill(src.data.begin(), src.data.end(), 'x');
  job[1].deregister(gone.reg);
  job[1].postImmReceives(0, 4);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, {dst.reg.remoteBase, dst.reg.rkey + 999}, 1, 1), 0);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, dst.at(252), 2, 2), 0);  // 4 bytes past the end
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, src.at(0), 3, 3), 0);    // the poster's own key
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, gone.at(0), 4, 4), 0);   // deregistered
  ASSERT_EQ(job[0].postWrite(1, 0, src.data.data(), 8, src.reg, {dst.reg.remoteBase - 1, dst.reg.rkey}, 5), 0);
  Got got;
  ASSERT_TRUE(pump(job, got, counts({5, 0})));
  settle(job, got);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[0][i].type, Type::kError);
    EXPECT_EQ(got[0][i].context, i + 1u);
    EXPECT_EQ(got[0][i].peer, 1);
    EXPECT_NE(got[0][i].error.find("remote access error"), std::string::npos) << got[0][i].error;
    EXPECT_NE(got[0][i].error.find("peer rank 1"), std::string::npos) << got[0][i].error;
  }
  EXPECT_TRUE(got[1].empty()) << "an immediate of a failed write arrived";
  EXPECT_EQ(std::count(dst.data.begin(), dst.data.end(), 0), 256);
  EXPECT_EQ(fake::counters().errors, 5u);
  EXPECT_EQ(fake::counters().writes, 0u);
}

TEST_F(FakeFabricTest, ErrorAfterWritesFailsExactlyThatWrite) {
  fake::Faults faults;
  faults.errorAfterWrites = 3;
  fake::setFaults(faults);
  Job job(2);
  Buffer src(job[0], 64), dst(job[1], 64);
  job[1].postImmReceives(0, 6);
  for (int i = 0; i < 6; ++i) {
    src.setWord(i, i + 1);
    ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data() + i * 8, 8, src.reg, dst.at(i * 8), i, i), 0);
  }
  Got got;
  ASSERT_TRUE(pump(job, got, counts({6, 5})));
  settle(job, got);
  ASSERT_EQ(got[0].size(), 6u);
  EXPECT_EQ(got[1].size(), 5u);
  for (const Completion& c : got[0]) {
    if (c.context == 3) {
      EXPECT_EQ(c.type, Type::kError);
      EXPECT_EQ(c.peer, 1);
      EXPECT_NE(c.error.find("injected"), std::string::npos) << c.error;
      EXPECT_NE(c.error.find("peer rank 1"), std::string::npos) << c.error;
    } else {
      EXPECT_EQ(c.type, Type::kWriteDone) << c.context;
    }
  }
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dst.word(i), i == 3 ? 0u : i + 1u) << i;
  for (const Completion& c : got[1]) EXPECT_NE(c.imm, 3u);
}

TEST_F(FakeFabricTest, ErrorProbabilityFailsSomeWritesAndEachCompletesOnce) {
  fake::Faults faults;
  faults.errorProbability = 0.3;
  faults.seed = 42;
  fake::setFaults(faults);
  Job job(2);
  EXPECT_NE(job[0].describe().find("error probability"), std::string::npos) << job[0].describe();
  constexpr int kWrites = 200;
  Buffer src(job[0], kWrites * 8), dst(job[1], kWrites * 8);
  for (int i = 0; i < kWrites; ++i) {
    src.setWord(i, i + 1);
    ASSERT_EQ(job[0].postWrite(1, 0, src.data.data() + i * 8, 8, src.reg, dst.at(i * 8), i), 0);
  }
  Got got;
  ASSERT_TRUE(pump(job, got, counts({kWrites, 0})));
  settle(job, got);
  ASSERT_EQ(got[0].size(), size_t{kWrites});
  std::vector<int> seen(kWrites, 0);
  size_t errors = 0;
  for (const Completion& c : got[0]) {
    ASSERT_LT(c.context, uint64_t{kWrites});
    seen[c.context]++;
    if (c.type == Type::kError) {
      errors++;
      EXPECT_EQ(dst.word(c.context), 0u) << "a failed write landed";
    } else {
      EXPECT_EQ(dst.word(c.context), c.context + 1);
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), kWrites);
  EXPECT_GT(errors, 0u);
  EXPECT_LT(errors, size_t{kWrites});
  EXPECT_EQ(fake::counters().errors, errors);
  EXPECT_EQ(fake::counters().writes, kWrites - errors);
}

TEST_F(FakeFabricTest, WithheldImmediatesArriveOnRelease) {
  fake::Faults faults;
  faults.withholdImm = [](int, int, uint32_t imm) { return wire::immType(imm) == wire::ImmType::kCredits; };
  fake::setFaults(faults);
  Job job(2);
  Buffer src(job[0], 64), dst(job[1], 64);
  job[1].postImmReceives(0, 4);
  const uint32_t credits = wire::imm(wire::ImmType::kCredits, 5), slot = wire::imm(wire::ImmType::kSlot, 0);
  ASSERT_EQ(job[0].postWriteImm(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, credits, 1), 0);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, dst.at(0), slot, 2), 0);
  Got got;
  ASSERT_TRUE(pump(job, got, counts({1, 1})));
  settle(job, got);
  ASSERT_EQ(got[1].size(), 1u);
  EXPECT_EQ(got[1][0].imm, slot);
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[0][0].context, 2u);
  fake::releaseWithheld();
  ASSERT_TRUE(pump(job, got, counts({2, 2})));
  EXPECT_EQ(got[1][1].imm, credits);
  EXPECT_EQ(got[0][1].type, Type::kWriteDone);
  EXPECT_EQ(got[0][1].context, 1u);
}

TEST_F(FakeFabricTest, ImmediatesWaitForReceives) {
  fake::Faults faults;
  faults.lanes = 2;
  fake::setFaults(faults);
  Job job(2);
  Buffer src(job[0], 64), dst(job[1], 64);
  for (int i = 0; i < 4; ++i) src.setWord(i, i + 1);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, dst.at(0), 10, 0), 0);
  ASSERT_EQ(job[0].postWrite(1, 0, src.data.data() + 8, 8, src.reg, dst.at(8), 1), 0);     // behind it
  ASSERT_EQ(job[0].postWrite(1, 1, src.data.data() + 16, 8, src.reg, dst.at(16), 2), 0);  // another lane
  Got got;
  ASSERT_TRUE(pump(job, got, counts({1, 0})));
  settle(job, got);
  EXPECT_TRUE(got[1].empty());
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[0][0].context, 2u);
  EXPECT_EQ(dst.word(0), 0u);
  EXPECT_EQ(dst.word(1), 0u);
  EXPECT_EQ(dst.word(2), 3u);
  job[1].postImmReceives(0, 1);
  EXPECT_FALSE(job[1].armWait()) << "receives were posted for a queued immediate";
  ASSERT_TRUE(pump(job, got, counts({3, 1})));
  EXPECT_EQ(got[1][0].imm, 10u);
  EXPECT_EQ(dst.word(0), 1u);
  EXPECT_EQ(dst.word(1), 2u);
  // The receive is consumed: the next immediate waits again.
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data() + 24, 8, src.reg, dst.at(24), 11, 3), 0);
  settle(job, got);
  EXPECT_EQ(got[1].size(), 1u);
  EXPECT_EQ(dst.word(3), 0u);
}

TEST_F(FakeFabricTest, DisappearedRankFailsWritesNamingIt) {
  Job job(3);
  Buffer src0(job[0], 64), dst1(job[1], 64), src1(job[1], 64), dst0(job[0], 64), dst2(job[2], 64);
  std::fill(src1.data.begin(), src1.data.end(), 'k');
  job[0].postImmReceives(1, 4);
  job[2].postImmReceives(0, 4);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src0.data.data(), 8, src0.reg, dst1.at(0), 1, 1), 0);  // queued at 1
  ASSERT_EQ(job[1].postWriteImm(0, 0, src1.data.data(), 8, src1.reg, dst0.at(0), 2, 9), 0);  // queued at 0
  fake::disappear(1);
  const auto start = Clock::now();
  ASSERT_EQ(job[0].postWrite(1, 0, src0.data.data(), 8, src0.reg, dst1.at(8), 2), 0);
  EXPECT_EQ(job[1].postWrite(0, 0, src1.data.data(), 8, src1.reg, dst0.at(8), 10), 0);  // goes nowhere
  ASSERT_EQ(job[0].postWriteImm(2, 0, src0.data.data(), 8, src0.reg, dst2.at(0), 3, 3), 0);
  std::vector<Completion> at0;
  while (count(at0, Type::kError) < 2 && Clock::now() < start + 5s) {
    if (job[0].armWait()) {
      pollfd fd{job[0].waitFd(), POLLIN, 0};
      ::poll(&fd, 1, 100);
    }
    Completion c[8];
    const int n = job[0].poll(c, 8);
    at0.insert(at0.end(), c, c + n);
    Completion other[8];
    job[2].poll(other, 8);  // lets rank 0's write to rank 2 land
  }
  ASSERT_EQ(count(at0, Type::kError), 2u) << "no error within 5 s";
  std::set<uint64_t> failed;
  for (const Completion& c : at0) {
    if (c.type != Type::kError) continue;
    failed.insert(c.context);
    EXPECT_EQ(c.peer, 1);
    EXPECT_NE(c.error.find("peer rank 1 is gone"), std::string::npos) << c.error;
  }
  EXPECT_EQ(failed, (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(count(at0, Type::kImmediate), 0u) << "a write of the vanished rank landed";
  EXPECT_EQ(std::count(dst0.data.begin(), dst0.data.end(), 0), 64);
  EXPECT_EQ(std::count(dst1.data.begin(), dst1.data.end(), 0), 64);
  Completion c[4];
  EXPECT_EQ(job[1].poll(c, 4), 0);
  Got got;  // rank 0's write to rank 2 still completes
  ASSERT_TRUE(pump(job, got, [&](const Got& g) { return count(at0, Type::kWriteDone) + count(g[0], Type::kWriteDone) == 1; }));
}

TEST_F(FakeFabricTest, ClosedFabricsNeitherReceiveNorLand) {
  Job job(3);
  Buffer src0(job[0], 64), dst2(job[2], 64);
  std::fill(src0.data.begin(), src0.data.end(), 'z');
  job[2].postImmReceives(0, 1);
  ASSERT_EQ(job[0].postWriteImm(2, 0, src0.data.data(), 8, src0.reg, dst2.at(0), 1, 1), 0);
  job.fabrics[1].reset();
  Buffer dst1Dummy(job[2], 8);
  ASSERT_EQ(job[2].postWrite(1, 0, dst1Dummy.data.data(), 8, dst1Dummy.reg, RemoteAddress{1, 1}, 5), 0);
  job.fabrics[0]->close();
  EXPECT_EQ(job.fabrics[0]->postWrite(2, 0, src0.data.data(), 8, src0.reg, dst2.at(0), 2), -EBADF);
  std::vector<Completion> at2;
  const auto deadline = Clock::now() + 5s;
  while (at2.empty() && Clock::now() < deadline) {
    Completion c[4];
    const int n = job[2].poll(c, 4);
    at2.insert(at2.end(), c, c + n);
    if (n == 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(at2.size(), 1u);
  EXPECT_EQ(at2[0].type, Type::kError);
  EXPECT_EQ(at2[0].peer, 1);
  EXPECT_NE(at2[0].error.find("peer rank 1 is gone"), std::string::npos) << at2[0].error;
  EXPECT_EQ(std::count(dst2.data.begin(), dst2.data.end(), 0), 64) << "a closed fabric's write landed";
}

TEST_F(FakeFabricTest, WaitFdWakesASleepingRank) {
  Job job(2);
  Buffer src(job[0], 64), dst(job[1], 64);
  job[1].postImmReceives(0, 1);
  ASSERT_TRUE(job[1].armWait());
  ASSERT_GE(job[1].waitFd(), 0);
  std::atomic<int> woke{-1};
  std::vector<Completion> at1;
  std::thread sleeper([&] {
    pollfd fd{job[1].waitFd(), POLLIN, 0};
    woke = ::poll(&fd, 1, 5000);
    Completion c[4];
    const int n = job[1].poll(c, 4);
    at1.assign(c, c + n);
  });
  std::this_thread::sleep_for(20ms);
  ASSERT_EQ(job[0].postWriteImm(1, 0, src.data.data(), 8, src.reg, dst.at(0), 77, 5), 0);
  sleeper.join();
  ASSERT_EQ(woke.load(), 1) << "waitFd did not become readable";
  ASSERT_EQ(at1.size(), 1u);
  EXPECT_EQ(at1[0].imm, 77u);
  pollfd fd1{job[1].waitFd(), POLLIN, 0};
  EXPECT_EQ(::poll(&fd1, 1, 0), 0) << "poll() left the event set";
  // The poster's completion was queued by the target's poll: armWait says so, and the fd is set.
  EXPECT_FALSE(job[0].armWait());
  pollfd fd0{job[0].waitFd(), POLLIN, 0};
  EXPECT_EQ(::poll(&fd0, 1, 0), 1);
  Completion c[4];
  ASSERT_EQ(job[0].poll(c, 4), 1);
  EXPECT_EQ(c[0].type, Type::kWriteDone);
  EXPECT_TRUE(job[0].armWait());
}

TEST_F(FakeFabricTest, EagainAtTheInflightLimit) {
  Job job(2);
  const int limit = fake::Faults{}.maxInflight;
  for (int i = 0; i < limit; ++i) {
    ASSERT_EQ(job[0].postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, i), 0) << i;
  }
  EXPECT_EQ(job[0].postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, limit), -EAGAIN);
  Completion none[1];
  EXPECT_EQ(job[1].poll(none, 1), 0);  // lands them all
  EXPECT_EQ(job[0].postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, limit), -EAGAIN)
      << "room before the completions were polled";
  Completion c[10];
  ASSERT_EQ(job[0].poll(c, 10), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(job[0].postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, i), 0);
  EXPECT_EQ(job[0].postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, 0), -EAGAIN);
}

TEST_F(FakeFabricTest, BadPostsAndArguments) {
  fake::Faults faults;
  faults.maxWriteBytes = 64;
  fake::setFaults(faults);
  auto lone = fake::open(0, 2);
  Job job(2);
  Buffer src(job[0], 256), dst(job[1], 256);
  EXPECT_EQ(job[0].maxWriteBytes(), 64u);
  EXPECT_NE(job[0].describe().find("max write 64"), std::string::npos) << job[0].describe();
  EXPECT_EQ(job[0].postWrite(1, 1, src.data.data(), 8, src.reg, dst.at(0), 0), -EINVAL);   // lane
  EXPECT_EQ(job[0].postWrite(0, 0, src.data.data(), 8, src.reg, dst.at(0), 0), -EINVAL);   // itself
  EXPECT_EQ(job[0].postWrite(2, 0, src.data.data(), 8, src.reg, dst.at(0), 0), -EINVAL);   // no such rank
  EXPECT_EQ(job[0].postWrite(1, 0, src.data.data(), 65, src.reg, dst.at(0), 0), -EMSGSIZE);
  EXPECT_EQ(job[0].postWrite(1, 0, src.data.data() + 250, 8, src.reg, dst.at(0), 0), -EINVAL);  // past src
  EXPECT_EQ(lone->postWrite(1, 0, nullptr, 0, Registration{}, RemoteAddress{}, 0), -ENOTCONN);
  int device = 0;
  EXPECT_THROW(job[0].registerMemory(&device, 4, MemoryKind::kCuda), InvalidArgument);
  EXPECT_THROW(job[0].insertPeer(1, "tcp:1.2.3.4"), InvalidArgument);
  EXPECT_THROW(job[0].insertPeer(1, job[0].localAddress(1)), InvalidArgument);  // rank 0's own address
  EXPECT_THROW(job[0].postImmReceives(0, 1), InvalidArgument);
  EXPECT_THROW(fake::open(2, 2), InvalidArgument);
  faults.lanes = 9;
  EXPECT_THROW(fake::setFaults(faults), InvalidArgument);
}

// Two jobs of three ranks each at once, every rank a thread, lanes reordered: each rank gets
// exactly its own job's writes.
TEST_F(FakeFabricTest, TwoJobsAtOnceDoNotInterfere) {
  fake::Faults faults;
  faults.lanes = 2;
  faults.reorder = true;
  fake::setFaults(faults);
  constexpr int kRanks = 3, kMsgs = 300;
  Job jobs[2] = {Job(kRanks), Job(kRanks)};
  std::vector<std::unique_ptr<Buffer>> buffers;  // per job and rank: [from][i] slots, then the source
  for (int j = 0; j < 2; ++j) {
    for (int r = 0; r < kRanks; ++r) buffers.push_back(std::make_unique<Buffer>(jobs[j][r], kRanks * kMsgs * 8 * 2));
  }
  auto buffer = [&](int j, int r) -> Buffer& { return *buffers[j * kRanks + r]; };
  std::atomic<int> failures{0};
  auto rank = [&](int j, int r) {
    Fabric& fabric = jobs[j][r];
    Buffer& mine = buffer(j, r);
    const size_t sourceBase = kRanks * kMsgs;
    for (int p = 0; p < kRanks; ++p) {
      if (p != r) fabric.postImmReceives(p, kMsgs);
    }
    int posted = 0, done = 0, received = 0;
    const int total = kMsgs * (kRanks - 1);
    const auto deadline = Clock::now() + 10s;
    while ((done < total || received < total) && Clock::now() < deadline) {
      while (posted < total) {
        const int p = (r + 1 + posted % (kRanks - 1)) % kRanks, i = posted / (kRanks - 1);
        const size_t word = sourceBase + posted;
        mine.setWord(word, (j + 1) * 1000000ull + r * 1000 + i);
        const int rc = fabric.postWriteImm(p, posted % 2, mine.data.data() + word * 8, 8, mine.reg,
                                           buffer(j, p).at((r * kMsgs + i) * 8), r << 16 | i, posted);
        if (rc == -EAGAIN) break;
        if (rc != 0) failures++;
        posted++;
      }
      if (fabric.armWait()) {
        pollfd fd{fabric.waitFd(), POLLIN, 0};
        ::poll(&fd, 1, 50);
      }
      Completion c[32];
      const int n = fabric.poll(c, 32);
      for (int k = 0; k < n; ++k) {
        if (c[k].type == Type::kWriteDone) {
          done++;
        } else if (c[k].type == Type::kImmediate) {
          received++;
          const int from = c[k].imm >> 16, i = c[k].imm & 0xffff;
          if (from != c[k].peer || mine.word(from * kMsgs + i) != (j + 1) * 1000000ull + from * 1000 + i) failures++;
        } else {
          failures++;
        }
      }
    }
    if (done != total || received != total) failures++;
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < 2; ++j) {
    for (int r = 0; r < kRanks; ++r) threads.emplace_back(rank, j, r);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fake::counters().immediates, uint64_t{2 * kRanks * (kRanks - 1) * kMsgs});
}

}  // namespace
}  // namespace ringfold::transport::rdma
