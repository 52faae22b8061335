// Barrier, point to point, closed-form results (independent of the reducer), and the
// Communicator's own behaviour (connect, fromEnvironment, settings).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/collectives.h"
#include "rendezvous/hash_store.h"
#include "test_util.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;
using namespace std::chrono_literals;

TEST(Barrier, NobodyLeavesEarly) {
  for (int n : kRankCounts) {
    constexpr int kRounds = 20;
    std::vector<std::atomic<int>> arrived(kRounds);
    std::atomic<int> early{0};
    auto errors = runRanks(n, [&](Communicator& comm) {
      for (int i = 0; i < kRounds; ++i) {
        if ((i + comm.rank()) % 4 == 0) std::this_thread::sleep_for(1ms);
        arrived[i].fetch_add(1);
        barrier(comm);
        if (arrived[i].load() != n) early.fetch_add(1);
      }
    });
    expectAllOk(errors);
    EXPECT_EQ(early.load(), 0) << n << " ranks";
  }
}

// The reducer is an argument of the call: a collective given one folds (and scales) through it
// alone, and the communicator's own reducer is left alone.
class CountingReducer final : public Reducer {
 public:
  explicit CountingReducer(Reducer& inner) : inner_(inner) {}
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale) override {
    ++reduces;
    inner_.reduce(dst, a, b, count, dtype, op, postScale);
  }
  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override {
    ++scales;
    inner_.scale(dst, src, count, dtype, factor);
  }
  int reduces = 0, scales = 0;

 private:
  Reducer& inner_;
};

TEST(PerCallReducer, AllreduceAndReduceScatterFoldThroughTheReducerTheyAreGiven) {
  for (int n : {2, 3}) {
    for (auto algo : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect}) {
      auto errors = runRanks(n, [&](Communicator& comm) {
        const Reducer* before = &comm.reducer();
        CountingReducer counting(comm.reducer());
        std::vector<float> in(1000, static_cast<float>(comm.rank() + 1)), out(1000, 0.f);
        AllreduceOptions o{in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum, 2.0, 1.0, algo};
        o.reducer = &counting;
        allreduce(comm, o);
        const float expected = 2.0f * static_cast<float>(n * (n + 1) / 2);
        for (float v : out) ASSERT_EQ(v, expected);
        EXPECT_GT(counting.reduces, 0);
        EXPECT_GT(counting.scales, 0);  // preScale went through it too
        const int reduces = counting.reduces;
        std::vector<float> block(100, 0.f);
        reduceScatter(comm, {in.data(), block.data(), 100, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, &counting});
        for (float v : block) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));
        EXPECT_GT(counting.reduces, reduces);
        EXPECT_EQ(&comm.reducer(), before);
      });
      expectAllOk(errors);
    }
  }
}

TEST(SendRecv, RingAndPairsInOrderInterleavedWithCollectives) {
  for (int n : {2, 3, 5}) {
    auto errors = runRanks(n, [&](Communicator& comm) {
      const int r = comm.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
      for (int round = 0; round < 3; ++round) {
        std::vector<int32_t> out(100 + round), in(100 + round, -1);
        for (size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + round * 10 + static_cast<int>(i);
        // Even ranks send first; odd ranks receive first (with n odd, rank n-1 and 0 both send
        // first, which works because sends complete without a posted receive).
        if (r % 2 == 0) {
          send(comm, out.data(), out.size(), DataType::kInt32, right);
          recv(comm, in.data(), in.size(), DataType::kInt32, left);
        } else {
          recv(comm, in.data(), in.size(), DataType::kInt32, left);
          send(comm, out.data(), out.size(), DataType::kInt32, right);
        }
        for (size_t i = 0; i < in.size(); ++i) {
          ASSERT_EQ(in[i], left * 1000 + round * 10 + static_cast<int>(i));
        }
        barrier(comm);
      }
      // Two messages to the same peer arrive in order.
      if (r == 0) {
        int32_t a = 1, b = 2;
        send(comm, &a, 1, DataType::kInt32, 1);
        send(comm, &b, 1, DataType::kInt32, 1);
      } else if (r == 1) {
        int32_t a = 0, b = 0;
        recv(comm, &a, 1, DataType::kInt32, 0);
        recv(comm, &b, 1, DataType::kInt32, 0);
        EXPECT_EQ(a, 1);
        EXPECT_EQ(b, 2);
      }
    });
    expectAllOk(errors);
  }
}

TEST(SendRecv, RejectsSelfAndOutOfRange) {
  auto errors = runRanks(2, [&](Communicator& comm) {
    int x = 0;
    send(comm, &x, 1, DataType::kInt32, comm.rank());
  });
  for (auto& e : errors) EXPECT_TRUE(holds<InvalidArgument>(e)) << describe(e);
}

// Results that do not depend on the reducer: small integers and exact binary fractions.
TEST(ClosedForm, SumsAveragesAndExtremes) {
  for (int n : kRankCounts) {
    for (auto algo : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect}) {
      auto errors = runRanks(n, [&](Communicator& comm) {
        const int r = comm.rank();
        const size_t count = 5003;
        std::vector<int32_t> ints(count);
        std::vector<float> floats(count);
        for (size_t i = 0; i < count; ++i) {
          ints[i] = r * 1000 + static_cast<int32_t>(i);
          floats[i] = static_cast<float>(r) + 0.25f * static_cast<float>(i % 8);
        }
        AllreduceOptions o;
        o.sendbuf = o.recvbuf = ints.data();
        o.count = count;
        o.dtype = DataType::kInt32;
        o.algorithm = algo;
        allreduce(comm, o);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(ints[i], n * static_cast<int32_t>(i) + 1000 * n * (n - 1) / 2) << i;
        }
        std::vector<float> avg(count), mx(count);
        o.sendbuf = floats.data();
        o.recvbuf = avg.data();
        o.dtype = DataType::kFloat32;
        o.op = ReduceOp::kAvg;
        allreduce(comm, o);
        o.recvbuf = mx.data();
        o.op = ReduceOp::kMax;
        allreduce(comm, o);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(avg[i], (n - 1) / 2.0f + 0.25f * static_cast<float>(i % 8)) << i;
          ASSERT_EQ(mx[i], static_cast<float>(n - 1) + 0.25f * static_cast<float>(i % 8)) << i;
        }
        std::vector<int64_t> rs(3 * n), block(3);
        for (int b = 0; b < n; ++b) {
          for (int j = 0; j < 3; ++j) rs[b * 3 + j] = b * 10 + j + r;
        }
        ReduceScatterOptions ro;
        ro.sendbuf = rs.data();
        ro.recvbuf = block.data();
        ro.recvCount = 3;
        ro.dtype = DataType::kInt64;
        reduceScatter(comm, ro);
        for (int j = 0; j < 3; ++j) ASSERT_EQ(block[j], n * (r * 10 + j) + n * (n - 1) / 2);
      });
      expectAllOk(errors);
    }
  }
}

TEST(Communicator, ConnectThroughAStore) {
  rendezvous::HashStore store;
  std::vector<std::thread> threads;
  std::vector<int32_t> results(3);
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::connect(store, r, 3, transport::createDevice("loopback"), "job");
      int32_t v = r + 1;
      AllreduceOptions o;
      o.sendbuf = o.recvbuf = &v;
      o.count = 1;
      o.dtype = DataType::kInt32;
      allreduce(*comm, o);
      results[r] = v;
      barrier(*comm);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results, (std::vector<int32_t>{6, 6, 6}));
}

// Restores (or unsets) environment variables when it goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1); else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(Communicator, FromEnvironmentSingleProcess) {
  std::vector<std::unique_ptr<ScopedEnv>> env;
  for (const char* v : {"RINGFOLD_RANK", "RINGFOLD_SIZE", "HOROVOD_RANK", "HOROVOD_SIZE", "RANK", "WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                        "RINGFOLD_TRANSPORT"}) {
    env.push_back(std::make_unique<ScopedEnv>(v, nullptr));
  }
  auto comm = Communicator::fromEnvironment();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->device().name(), "loopback");
  double x = 3.0, y = 0.0;
  AllreduceOptions o;
  o.sendbuf = &x;
  o.recvbuf = &y;
  o.count = 1;
  o.dtype = DataType::kFloat64;
  o.op = ReduceOp::kAvg;
  o.preScale = 2.0;
  allreduce(*comm, o);
  EXPECT_EQ(y, 6.0);
  barrier(*comm);
}

TEST(Communicator, SettingsAndTheirErrors) {
  {
    ScopedEnv algo("RINGFOLD_ALGO", "ring,nvls");  // not one of ringfold's algorithms
    rendezvous::HashStore store;
    EXPECT_THROW(Communicator::connect(store, 0, 1, transport::createDevice("loopback")), InvalidArgument);
  }
  ScopedEnv seg("RINGFOLD_SEGMENT_BYTES", "64K");
  ScopedEnv direct("RINGFOLD_DIRECT_MAX_BYTES", "1K");
  ScopedEnv timeout("RINGFOLD_TIMEOUT", "2.5");
  rendezvous::HashStore store;
  auto comm = Communicator::connect(store, 0, 1, transport::createDevice("loopback"));
  EXPECT_EQ(comm->segmentBytes(), 64u << 10);
  EXPECT_EQ(comm->timeout(), 2500ms);
  EXPECT_EQ(chooseAllreduceAlgorithm(*comm, 1024), AllreduceAlgorithm::kDirect);
  EXPECT_EQ(chooseAllreduceAlgorithm(*comm, 1025), AllreduceAlgorithm::kRing);
  EXPECT_THROW(comm->setSegmentBytes(0), InvalidArgument);
  CollectiveTuning t;
  t.allreduceAlgorithm = "ring";
  comm->setTuning(t);
  EXPECT_EQ(chooseAllreduceAlgorithm(*comm, 8), AllreduceAlgorithm::kRing);
  // Scratch slots are distinct and keep their memory.
  std::byte* a = comm->scratch(100, 0);
  std::byte* b = comm->scratch(100, 1);
  EXPECT_NE(a, b);
  EXPECT_EQ(comm->scratch(50, 0), a);
}

}  // namespace
