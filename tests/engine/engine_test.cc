// The engine end to end, ranks as threads over loopback: negotiation, fusion, the response
// cache, every operation, the errors every rank must agree on, join, stalls, process sets,
// the timeline and autotune.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <sstream>

#include "engine/engine_harness.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/hash_store.h"
#include "transport/device.h"

// ThreadSanitizer's build (clang has no __SANITIZE_THREAD__).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RF_TEST_TSAN 1
#endif
#endif
#ifndef RF_TEST_TSAN
#define RF_TEST_TSAN 0
#endif

namespace ringfold::engine {
namespace {

using rftest::EngineGroupOptions;
using rftest::runEngines;
using rftest::waitStatus;

void expectAllOk(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "ok") << "rank " << r;
}

TensorArgs allreduceArgs(const std::string& name, const std::vector<float>& in, std::vector<float>& out,
                         ReduceOp op = ReduceOp::kSum) {
  TensorArgs a;
  a.op = OpType::kAllreduce;
  a.name = name;
  a.dtype = DataType::kFloat32;
  a.shape = {static_cast<int64_t>(in.size())};
  a.input = in.data();
  a.output = out.data();
  a.reduceOp = op;
  return a;
}

// Many tensors per step, submitted in a different order on every rank, for several steps: all
// results right, later steps served by the cache, small tensors fused.
TEST(EngineAllreduce, ManyTensorsAnyOrderFusedAndCached) {
  constexpr int kRanks = 3, kTensors = 24, kSteps = 6;
  std::vector<EngineStats> stats(kRanks);
  auto errors = runEngines(kRanks, [&](Engine& e, int rank) {
    std::mt19937 rng(rank);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<int> order(kTensors);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Handle> handles(kTensors);
      for (int t : order) {
        const int n = 1 + t * 37;
        in[t].assign(n, static_cast<float>(rank + t));
        out[t].assign(n, -1.0f);
        handles[t] = e.enqueue(allreduceArgs("grad." + std::to_string(t), in[t], out[t]));
      }
      for (int t = 0; t < kTensors; ++t) {
        Status s = waitStatus(e, handles[t]);
        if (!s.ok()) throw std::runtime_error(s.message);
        const float expect = static_cast<float>(kRanks * t + kRanks * (kRanks - 1) / 2);
        for (float v : out[t]) {
          if (v != expect) throw std::runtime_error("wrong sum for tensor " + std::to_string(t));
        }
      }
    }
    stats[rank] = e.stats();
  });
  expectAllOk(errors);
  for (const EngineStats& s : stats) {
    EXPECT_EQ(s.tensorsRun, static_cast<uint64_t>(kTensors * kSteps));
    EXPECT_GT(s.cacheHits, 0u) << "recurring tensors should skip the coordinator";
    EXPECT_LT(s.batches, s.tensorsRun) << "small tensors submitted together should be fused";
  }
}

TEST(EngineAllreduce, OpsScalesAndDtypes) {
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    std::vector<float> in = {1.0f + rank, -2.0f * (rank + 1)}, out(2);
    TensorArgs a = allreduceArgs("avg", in, out, ReduceOp::kAvg);
    a.preScale = 2.0;
    a.postScale = 0.5;
    Status s = waitStatus(e, e.enqueue(a));
    if (!s.ok() || out[0] != 1.5f || out[1] != -3.0f) throw std::runtime_error("avg with scales: " + s.message);
    std::vector<int64_t> li = {rank * 10, -rank}, lo(2);
    TensorArgs b;
    b.name = "max.i64";
    b.dtype = DataType::kInt64;
    b.shape = {2};
    b.input = li.data();
    b.output = lo.data();
    b.reduceOp = ReduceOp::kMax;
    s = waitStatus(e, e.enqueue(b));
    if (!s.ok() || lo[0] != 10 || lo[1] != 0) throw std::runtime_error("int64 max: " + s.message);
  });
  expectAllOk(errors);
}

TEST(EngineAllreduce, GroupedTensorsAreReleasedTogether) {
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    std::vector<std::vector<float>> in(3, std::vector<float>(5, 1.0f + rank)), out(3, std::vector<float>(5));
    std::vector<TensorArgs> group;
    for (int i = 0; i < 3; ++i) group.push_back(allreduceArgs("g." + std::to_string(i), in[i], out[i]));
    for (Handle h : e.enqueueGroup(group)) {
      Status s = waitStatus(e, h);
      if (!s.ok()) throw std::runtime_error(s.message);
    }
    for (auto& o : out) {
      if (o[4] != 3.0f) throw std::runtime_error("grouped allreduce result");
    }
  });
  expectAllOk(errors);
}

TEST(EngineOps, AllgatherBroadcastAlltoallReducescatterBarrier) {
  constexpr int kRanks = 3;
  auto errors = runEngines(kRanks, [&](Engine& e, int rank) {
    // allgather: rank r contributes r+1 rows of 2.
    std::vector<int32_t> rows(2 * (rank + 1), rank);
    TensorArgs g;
    g.op = OpType::kAllgather;
    g.name = "gather";
    g.dtype = DataType::kInt32;
    g.shape = {rank + 1, 2};
    g.input = rows.data();
    Handle h = e.enqueue(g);
    const Result* r = e.handles().wait(h);
    if (!r->status.ok()) throw std::runtime_error(r->status.message);
    if (r->shape != std::vector<int64_t>{6, 2}) throw std::runtime_error("allgather shape");
    const auto* got = reinterpret_cast<const int32_t*>(r->output.get());
    const int32_t expect[12] = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    if (!std::equal(got, got + 12, expect)) throw std::runtime_error("allgather data");
    e.handles().release(h);

    // broadcast from rank 2, in place.
    std::vector<double> b(4, rank == 2 ? 7.5 : 0.0);
    TensorArgs bc;
    bc.op = OpType::kBroadcast;
    bc.name = "bcast";
    bc.dtype = DataType::kFloat64;
    bc.shape = {4};
    bc.input = b.data();
    bc.output = b.data();
    bc.root = 2;
    Status s = waitStatus(e, e.enqueue(bc));
    if (!s.ok() || b[3] != 7.5) throw std::runtime_error("broadcast: " + s.message);

    // alltoall: rank r sends (q+1) rows to rank q, each row = r*10+q.
    std::vector<int64_t> splits = {1, 2, 3};
    std::vector<float> send;
    for (int q = 0; q < kRanks; ++q) send.insert(send.end(), q + 1, static_cast<float>(rank * 10 + q));
    TensorArgs at;
    at.op = OpType::kAlltoall;
    at.name = "a2a";
    at.shape = {6};
    at.input = send.data();
    at.splits = splits;
    h = e.enqueue(at);
    r = e.handles().wait(h);
    if (!r->status.ok()) throw std::runtime_error(r->status.message);
    if (r->receivedSplits != std::vector<int64_t>(kRanks, rank + 1)) throw std::runtime_error("alltoall splits");
    const auto* a2a = reinterpret_cast<const float*>(r->output.get());
    for (int q = 0; q < kRanks; ++q) {
      for (int i = 0; i < rank + 1; ++i) {
        if (a2a[q * (rank + 1) + i] != static_cast<float>(q * 10 + rank)) throw std::runtime_error("alltoall data");
      }
    }
    e.handles().release(h);

    // reducescatter of 7 rows of 2 over 3 ranks: 3, 2, 2 rows.
    std::vector<float> rs(14);
    for (int i = 0; i < 14; ++i) rs[i] = static_cast<float>(i);
    TensorArgs sc;
    sc.op = OpType::kReducescatter;
    sc.name = "rs";
    sc.shape = {7, 2};
    sc.input = rs.data();
    h = e.enqueue(sc);
    r = e.handles().wait(h);
    if (!r->status.ok()) throw std::runtime_error(r->status.message);
    const int64_t myRows = rank == 0 ? 3 : 2, firstRow = rank == 0 ? 0 : (rank == 1 ? 3 : 5);
    if (r->shape != std::vector<int64_t>{myRows, 2}) throw std::runtime_error("reducescatter shape");
    const auto* part = reinterpret_cast<const float*>(r->output.get());
    for (int i = 0; i < myRows * 2; ++i) {
      if (part[i] != 3.0f * static_cast<float>(firstRow * 2 + i)) throw std::runtime_error("reducescatter data");
    }
    e.handles().release(h);

    s = waitStatus(e, e.barrier());
    if (!s.ok()) throw std::runtime_error("barrier: " + s.message);
  });
  expectAllOk(errors);
}

// Reduce to each root in turn: the root's output gets postscale * sum(prescale * input), in
// place and out of place; the other ranks' outputs are not written. Averaging divides by the
// set's size; mismatched roots and an out-of-range root fail on every rank with one message; a
// GPU tensor is refused at enqueue (reduce is CPU only).
TEST(EngineOps, ReduceToEachRoot) {
  constexpr int kRanks = 3;
  std::vector<std::vector<std::string>> messages(kRanks);
  auto errors = runEngines(kRanks, [&](Engine& e, int rank) {
    for (int root = 0; root < kRanks; ++root) {
      for (int inPlace = 0; inPlace < 2; ++inPlace) {
        std::vector<float> in(5), out(5, -1.0f);
        for (int i = 0; i < 5; ++i) in[i] = static_cast<float>(rank * 10 + i);
        TensorArgs a;
        a.op = OpType::kReduce;
        a.name = "reduce." + std::to_string(root) + "." + std::to_string(inPlace);
        a.shape = {5};
        a.input = in.data();
        a.output = inPlace ? in.data() : out.data();
        a.root = root;
        a.reduceOp = ReduceOp::kSum;
        a.preScale = 2.0;
        a.postScale = 0.5;
        const std::vector<float> before = in;
        Status s = waitStatus(e, e.enqueue(a));
        if (!s.ok()) throw std::runtime_error("reduce: " + s.message);
        const std::vector<float>& got = inPlace ? in : out;
        for (int i = 0; i < 5; ++i) {
          const float want = rank == root ? static_cast<float>(30 + 3 * i) : (inPlace ? before[i] : -1.0f);
          if (got[i] != want) {
            throw std::runtime_error("reduce to " + std::to_string(root) + (inPlace ? " in place" : "") +
                                     ": element " + std::to_string(i) + " is " + std::to_string(got[i]));
          }
        }
        if (!inPlace && in != before) throw std::runtime_error("reduce wrote its input");
      }
    }
    std::vector<double> v(2, static_cast<double>(rank)), avg(2, 0.0);
    TensorArgs m;
    m.op = OpType::kReduce;
    m.name = "reduce.avg";
    m.dtype = DataType::kFloat64;
    m.shape = {2};
    m.input = v.data();
    m.output = avg.data();
    m.root = 1;
    m.reduceOp = ReduceOp::kAvg;
    Status s = waitStatus(e, e.enqueue(m));
    if (!s.ok() || (rank == 1 && avg[1] != 1.0) || (rank != 1 && avg[1] != 0.0)) {
      throw std::runtime_error("reduce average: " + s.message);
    }
    TensorArgs bad = m;
    bad.name = "reduce.roots";
    bad.root = rank == 2 ? 0 : 1;
    messages[rank].push_back(waitStatus(e, e.enqueue(bad)).message);
    bad.name = "reduce.range";
    bad.root = 3;
    messages[rank].push_back(waitStatus(e, e.enqueue(bad)).message);
    TensorArgs gpu = m;
    gpu.name = "reduce.gpu";
    gpu.device = 0;
    try {
      e.enqueue(gpu);
      throw std::runtime_error("a GPU reduce was accepted");
    } catch (const InvalidArgument& x) {
      if (std::string(x.what()).find("reduce") == std::string::npos) throw std::runtime_error(x.what());
    }
  });
  expectAllOk(errors);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(messages[r].size(), 2u);
    EXPECT_EQ(messages[r][0], messages[0][0]);
    EXPECT_EQ(messages[r][1], messages[0][1]);
  }
  EXPECT_NE(messages[0][0].find("Mismatched reduce root ranks for 'reduce.roots'"), std::string::npos)
      << messages[0][0];
  EXPECT_NE(messages[0][1].find("reduce 'reduce.range': root rank 3 is not in the process set of 3 ranks"),
            std::string::npos)
      << messages[0][1];
}

// Every rank gets the same message, naming the tensor and the ranks that differ.
TEST(EngineErrors, MismatchesFailOnEveryRankWithOneMessage) {
  constexpr int kRanks = 3;
  std::vector<std::vector<std::string>> messages(kRanks);
  auto errors = runEngines(kRanks, [&](Engine& e, int rank) {
    std::vector<float> in(rank == 1 ? 4 : 3, 1.0f), out(in.size());
    messages[rank].push_back(waitStatus(e, e.enqueue(allreduceArgs("shape", in, out))).message);
    TensorArgs d = allreduceArgs("dtype", in, out);
    if (rank == 2) d.dtype = DataType::kInt32;
    d.shape = {3};
    messages[rank].push_back(waitStatus(e, e.enqueue(d)).message);
    TensorArgs o = allreduceArgs("op", in, out, rank == 0 ? ReduceOp::kMax : ReduceOp::kSum);
    o.shape = {3};
    messages[rank].push_back(waitStatus(e, e.enqueue(o)).message);
    std::vector<float> b(3);
    TensorArgs bc;
    bc.op = OpType::kBroadcast;
    bc.name = "root";
    bc.shape = {3};
    bc.input = b.data();
    bc.output = b.data();
    bc.root = rank == 0 ? 1 : 0;
    messages[rank].push_back(waitStatus(e, e.enqueue(bc)).message);
    // The engine is still usable afterwards.
    std::vector<float> ok(2, 1.0f), okOut(2);
    Status s = waitStatus(e, e.enqueue(allreduceArgs("fine", ok, okOut)));
    if (!s.ok() || okOut[0] != kRanks) throw std::runtime_error("engine unusable after a mismatch");
  });
  expectAllOk(errors);
  ASSERT_EQ(messages[0].size(), 4u);
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(messages[r], messages[0]);
  EXPECT_NE(messages[0][0].find("'shape'"), std::string::npos) << messages[0][0];
  EXPECT_NE(messages[0][0].find("rank 1: [4]"), std::string::npos) << messages[0][0];
  EXPECT_NE(messages[0][0].find("ranks 0, 2: [3]"), std::string::npos) << messages[0][0];
  EXPECT_NE(messages[0][1].find("rank 2: int32"), std::string::npos) << messages[0][1];
  EXPECT_NE(messages[0][2].find("rank 0: max"), std::string::npos) << messages[0][2];
  EXPECT_NE(messages[0][3].find("root"), std::string::npos) << messages[0][3];
}

TEST(EngineErrors, LocalMistakesThrowAtOnce) {
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    std::vector<float> in(3, 1.0f), out(3);
    Handle h = e.enqueue(allreduceArgs("dup", in, out));
    try {
      e.enqueue(allreduceArgs("dup", in, out));
      throw std::runtime_error("a name in flight was accepted twice");
    } catch (const InvalidArgument& ex) {
      if (std::string(ex.what()).find("already in flight") == std::string::npos) throw;
    }
    waitStatus(e, h);
    TensorArgs bad = allreduceArgs("nullin", in, out);
    bad.input = nullptr;
    EXPECT_THROW(e.enqueue(bad), InvalidArgument);
    TensorArgs ps = allreduceArgs("noset", in, out);
    ps.processSet = 9;
    EXPECT_THROW(e.enqueue(ps), InvalidArgument);
    (void)rank;
  });
  expectAllOk(errors);
}

// Every check of a tensor's arguments is the engine's own (tensor_args.h), so a caller that is
// not the C ABI gets the C ABI's messages: a shape whose byte size overflows, a negative
// dimension, missing buffers, a dtype that cannot be reduced, a dtype outside the enum, alltoall
// splits (their values, and one per rank of the set), a stream on a CPU tensor. A grouped call
// names the tensor's index. Only rank 0 submits, so a tensor an engine wrongly accepts is never
// agreed (nothing runs on its bad buffers) and is cancelled.
TEST(EngineErrors, TensorArgumentsAreCheckedInTheEngine) {
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    if (rank != 0) return;
    std::vector<float> in(4, 1.0f), out(4);
    auto expectRefused = [&](std::vector<TensorArgs> group, const std::string& part) {
      const std::string name = group.front().name;
      try {
        std::vector<Handle> hs = group.size() == 1 ? std::vector<Handle>{e.enqueue(group.front())} : e.enqueueGroup(group);
        for (Handle h : hs) {
          e.cancel(h);
          waitStatus(e, h);
        }
        ADD_FAILURE() << name << " was accepted; expected InvalidArgument '" << part << "'";
      } catch (const InvalidArgument& ex) {
        EXPECT_NE(std::string(ex.what()).find(part), std::string::npos) << name << ": " << ex.what();
      }
    };
    TensorArgs huge = allreduceArgs("huge", in, out);
    huge.shape = {int64_t{1} << 40, int64_t{1} << 40, 16};
    expectRefused({huge}, "shape [1099511627776, 1099511627776, 16] is too large");
    TensorArgs hugeGather = huge;
    hugeGather.op = OpType::kAllgather;
    hugeGather.dtype = DataType::kFloat64;
    hugeGather.shape = {int64_t{1} << 31, int64_t{1} << 31, 2};  // 2^63 bytes: one past the limit
    expectRefused({hugeGather}, "is too large");
    TensorArgs negative = allreduceArgs("negative", in, out);
    negative.shape = {2, -3};
    expectRefused({negative}, "dimension 1 of shape [2, -3] is negative");
    TensorArgs noOutput = allreduceArgs("no.output", in, out);
    noOutput.output = nullptr;
    expectRefused({noOutput}, "output is NULL");
    TensorArgs boolSum = allreduceArgs("bool.sum", in, out);
    boolSum.dtype = DataType::kBool;
    expectRefused({boolSum}, "dtype bool cannot be reduced");
    TensorArgs badType = allreduceArgs("bad.dtype", in, out);
    badType.dtype = static_cast<DataType>(42);
    expectRefused({badType}, "unknown dtype code 42");
    TensorArgs a2a = allreduceArgs("a2a", in, out);
    a2a.op = OpType::kAlltoall;
    a2a.output = nullptr;
    a2a.splits = {INT64_MAX, 1};
    expectRefused({a2a}, "splits add up to more than the first dimension 4: splits[0] alone is 9223372036854775807");
    a2a.splits = {-1, 5};
    expectRefused({a2a}, "splits[0] is -1");
    a2a.splits = {1, 1, 2};
    expectRefused({a2a}, "nsplits is 3 but process set 0 has 2 ranks");
    TensorArgs cpuStream = allreduceArgs("cpu.stream", in, out);
    int fakeStream = 0;
    cpuStream.stream = &fakeStream;
    expectRefused({cpuStream}, "a CUDA stream was given");
    TensorArgs fine = allreduceArgs("group.fine", in, out);
    TensorArgs bad = huge;
    bad.name = "group.huge";
    expectRefused({fine, bad}, "tensor 1: shape [1099511627776, 1099511627776, 16] is too large");
  });
  expectAllOk(errors);
}

TEST(EngineErrors, ShutdownOnOneRankStopsEveryRank) {
  std::vector<std::string> later(2);
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    if (rank == 0) {
      e.shutdown();
    } else {
      while (e.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<float> in(1), out(1);
    try {
      e.enqueue(allreduceArgs("after", in, out));
    } catch (const Error& ex) {
      later[rank] = ex.what();
    }
  });
  expectAllOk(errors);
  for (const auto& m : later) EXPECT_NE(m.find("shut down"), std::string::npos) << m;
}

// Rank 1 runs out of data after 2 steps and joins; rank 0 does 5 steps. Joined ranks
// contribute zeros, and everyone learns who joined last.
TEST(EngineJoin, UnevenStepsAndLastJoinedRank) {
  std::vector<int> last(3, -2);
  auto errors = runEngines(3, [&](Engine& e, int rank) {
    const int steps = rank == 0 ? 5 : (rank == 1 ? 2 : 3);
    for (int step = 0; step < steps; ++step) {
      std::vector<float> in(10, 1.0f), out(10);
      Status s = waitStatus(e, e.enqueue(allreduceArgs("step" + std::to_string(step), in, out)));
      if (!s.ok()) throw std::runtime_error(s.message);
      const float expect = static_cast<float>(step < 2 ? 3 : (step < 3 ? 2 : 1));
      if (out[0] != expect) throw std::runtime_error("step " + std::to_string(step) + " sum " + std::to_string(out[0]));
    }
    Handle h = e.join();
    const Result* r = e.handles().wait(h, std::chrono::milliseconds(60000));
    if (!r || !r->status.ok()) throw std::runtime_error("join failed");
    last[rank] = r->lastJoinedRank;
    e.handles().release(h);
  });
  expectAllOk(errors);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(last[r], 0) << "rank " << r;
}

TEST(EngineStall, WarningThenFailureOnEveryRank) {
  EngineGroupOptions options;
  options.engine.stallWarning = std::chrono::milliseconds(200);
  options.engine.stallShutdown = std::chrono::milliseconds(600);
  std::vector<std::string> messages(3);
  auto errors = runEngines(3, [&](Engine& e, int rank) {
    std::vector<float> in(2, 1.0f), out(2);
    if (rank != 2) {
      messages[rank] = waitStatus(e, e.enqueue(allreduceArgs("lonely", in, out))).message;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      // The group already failed this tensor: submitting it late fails the same way.
      messages[rank] = waitStatus(e, e.enqueue(allreduceArgs("lonely", in, out))).message;
    }
  }, options);
  expectAllOk(errors);
  EXPECT_NE(messages[0].find("'lonely' stalled"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("rank 2 never submitted"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[1], messages[0]);
  EXPECT_EQ(messages[2], messages[0]);
}

TEST(EngineStall, DescribeNamesMissingRanksAndTensors) {
  Coordinator c(3, 3);
  const auto t0 = Coordinator::Clock::now();
  Request a;
  a.name = "w1";
  a.shape = {1};
  c.add(a, t0);
  a.name = "w2";
  a.rank = 1;
  c.add(a, t0);
  auto stalls = c.stalled(t0 + std::chrono::seconds(61), std::chrono::seconds(60));
  ASSERT_EQ(stalls.size(), 2u);
  const std::string text = Coordinator::describeStalls(stalls);
  EXPECT_NE(text.find("Missing ranks:"), std::string::npos);
  EXPECT_NE(text.find("1: [w1]"), std::string::npos) << text;
  EXPECT_NE(text.find("2: [w1, w2]"), std::string::npos) << text;
  EXPECT_NE(text.find("0: [w2]"), std::string::npos) << text;
}

TEST(EngineProcessSets, StaticAndDynamicSets) {
  EngineGroupOptions options;
  options.engine.processSets = {{0, 2}, {1, 2, 3}};
  options.engine.dynamicProcessSets = true;
  auto errors = runEngines(4, [&](Engine& e, int rank) {
    if (e.processSetIds() != std::vector<int>{0, 1, 2}) throw std::runtime_error("set ids");
    const int set = rank == 1 || rank == 3 ? 2 : 1;
    std::vector<float> in(3, 1.0f + rank), out(3);
    TensorArgs a = allreduceArgs("inset", in, out);
    a.processSet = set;
    if (rank == 2) {
      // Rank 2 is in both sets.
      std::vector<float> in2 = in, out2(3);
      TensorArgs b = allreduceArgs("inset", in2, out2);
      b.processSet = 2;
      Handle hb = e.enqueue(b);
      Status s = waitStatus(e, e.enqueue(a));
      if (!s.ok() || out[0] != 1.0f + 3.0f) throw std::runtime_error("set 1 result " + std::to_string(out[0]));
      s = waitStatus(e, hb);
      if (!s.ok() || out2[0] != 2.0f + 3.0f + 4.0f) throw std::runtime_error("set 2 result");
    } else {
      Status s = waitStatus(e, e.enqueue(a));
      const float expect = set == 1 ? 4.0f : 9.0f;
      if (!s.ok() || out[0] != expect) throw std::runtime_error("set result " + std::to_string(out[0]));
    }
    // Dynamic: add {0, 1}, use it, remove it.
    const int id = e.addProcessSet({1, 0});
    if (id != 3 || e.processSetRanks(id) != std::vector<int>{0, 1}) throw std::runtime_error("added set");
    if (rank <= 1) {
      TensorArgs c = allreduceArgs("dyn", in, out);
      c.processSet = id;
      Status s = waitStatus(e, e.enqueue(c));
      if (!s.ok() || out[0] != 3.0f) throw std::runtime_error("dynamic set result");
    } else {
      TensorArgs c = allreduceArgs("dyn", in, out);
      c.processSet = id;
      try {
        e.enqueue(c);
        throw std::runtime_error("a non-member enqueued into a set");
      } catch (const InvalidArgument&) {
      }
    }
    e.removeProcessSet(id);
    if (e.processSetIds() != std::vector<int>{0, 1, 2}) throw std::runtime_error("removed set");
  }, options);
  expectAllOk(errors);
}

TEST(EngineTimeline, RecordsNegotiationAndOperations) {
  const std::string path = ::testing::TempDir() + "/engine_timeline.json";
  EngineGroupOptions options;
  options.engine.timelinePath = path;
  options.engine.timelineMarkCycles = true;
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    for (int step = 0; step < 3; ++step) {
      std::vector<float> a(100, 1.0f), b(50, 2.0f), oa(100), ob(50);
      Handle h1 = e.enqueue(allreduceArgs("layer.a", a, oa));
      Handle h2 = e.enqueue(allreduceArgs("layer.b", b, ob));
      waitStatus(e, h1);
      waitStatus(e, h2);
    }
    (void)rank;
  }, options);
  expectAllOk(errors);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_NE(json.find("NEGOTIATE_ALLREDUCE"), std::string::npos);
  EXPECT_NE(json.find("\"ALLREDUCE\""), std::string::npos);
  EXPECT_NE(json.find("layer.a"), std::string::npos);
  EXPECT_NE(json.find("CYCLE_START"), std::string::npos);
  EXPECT_NE(json.find("LOOPBACK_ALLREDUCE"), std::string::npos);
  EXPECT_NE(json.find("CPU_REDUCE"), std::string::npos);
  EXPECT_NE(json.find("MEMCPY_IN_FUSION_BUFFER"), std::string::npos);
  const std::string cmd = "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "timeline is not valid JSON";
}

TEST(EngineAutotune, EveryRankAdoptsRankZerosSettings) {
  EngineGroupOptions options;
  options.engine.autotune = true;
  options.engine.autotuneOptions.warmupSamples = 0;
  options.engine.autotuneOptions.stepsPerSample = 1;
  options.engine.autotuneOptions.maxSamples = 3;
  std::vector<std::vector<TunableSettings>> seen(2);
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    for (int step = 0; step < 40; ++step) {
      std::vector<float> in(1000, 1.0f), out(1000);
      Status s = waitStatus(e, e.enqueue(allreduceArgs("t", in, out)));
      if (!s.ok()) throw std::runtime_error(s.message);
      TunableSettings now = e.settings();
      if (seen[rank].empty() || !(seen[rank].back() == now)) seen[rank].push_back(now);
    }
  }, options);
  expectAllOk(errors);
  EXPECT_GT(seen[0].size(), 1u) << "autotune never changed the settings";
  // Both ranks passed through the same settings (rank 1 may lag rank 0 by the last change).
  for (size_t i = 0; i + 1 < std::min(seen[0].size(), seen[1].size()); ++i) EXPECT_TRUE(seen[0][i] == seen[1][i]);
}

}  // namespace
}  // namespace ringfold::engine

namespace ringfold::engine {
namespace {

// Every dtype through allreduce (bool refused at enqueue, with one message on every rank), and every
// dtype including bool through the copying operations.
TEST(EngineDtypes, EveryDtypeAndBoolForCopies) {
  auto errors = rftest::runEngines(2, [&](Engine& e, int rank) {
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      const size_t es = dataTypeSize(dtype);
      std::vector<std::byte> in(4 * es, std::byte{0}), out(4 * es, std::byte{0xEE});
      for (size_t i = 0; i < 4; ++i) in[i * es] = std::byte{1};  // 1 in every integer type, true for bool
      TensorArgs a;
      a.name = std::string("ar.") + dataTypeName(dtype);
      a.dtype = dtype;
      a.shape = {4};
      a.input = in.data();
      a.output = out.data();
      Status s;
      if (dtype == DataType::kBool) {  // refused at enqueue, on every rank (tensor_args.h)
        try {
          e.enqueue(a);
          throw std::runtime_error("bool allreduce was accepted");
        } catch (const InvalidArgument& ex) {
          if (std::string(ex.what()).find("bool") == std::string::npos) throw std::runtime_error(std::string("bool allreduce: ") + ex.what());
        }
      } else if (!(s = rftest::waitStatus(e, e.enqueue(a))).ok()) {
        throw std::runtime_error(a.name + ": " + s.message);
      }
      TensorArgs g = a;
      g.op = OpType::kAllgather;
      g.name = std::string("ag.") + dataTypeName(dtype);
      g.output = nullptr;
      Handle h = e.enqueue(g);
      const Result* r = e.handles().wait(h);
      if (!r->status.ok() || r->outputBytes != 8 * es || std::memcmp(r->output.get(), in.data(), 4 * es) != 0) {
        throw std::runtime_error(g.name + ": " + r->status.message);
      }
      e.handles().release(h);
      TensorArgs b = a;
      b.op = OpType::kBroadcast;
      b.name = std::string("bc.") + dataTypeName(dtype);
      b.root = 1;
      std::vector<std::byte> bin(4 * es, std::byte{static_cast<unsigned char>(rank == 1 ? 1 : 0)});
      b.input = bin.data();
      b.output = bin.data();
      s = rftest::waitStatus(e, e.enqueue(b));
      if (!s.ok() || bin[0] != std::byte{1}) throw std::runtime_error(b.name + ": " + s.message);
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "ok") << "rank " << r;
}

}  // namespace
}  // namespace ringfold::engine

namespace ringfold::engine {
namespace {

// A tensor no rank has reported yet can be cancelled (on every rank that submitted it); its name
// is free again afterwards. The long cycle leaves the enqueue-then-cancel window wide open.
TEST(EngineCancel, UnreportedTensorIsCancelledAndItsNameFreed) {
  rftest::EngineGroupOptions options;
  options.engine.cycleTimeMs = 300;
  // Only regular cycles: an enqueue would otherwise start one at once, which may report the
  // tensor before the cancel below arrives (then it runs, as cancel() documents).
  options.engine.wakeDelayUs = -1;
  auto errors = rftest::runEngines(2, [&](Engine& e, int) {
    std::vector<float> in(4, 1.0f), out(4);
    TensorArgs a;
    a.name = "c";
    a.shape = {4};
    a.input = in.data();
    a.output = out.data();
    // Completes inside a cycle, which is followed at once by an idle one; the cycle after
    // that is a whole cycle time (300 ms) away, so the enqueue and cancel below land in the
    // same gap (at start-up the first cycle could have drained the tensor between the two calls).
    TensorArgs warm = a;
    warm.name = "warm";
    std::vector<float> warmOut(4);
    warm.output = warmOut.data();
    Status w = rftest::waitStatus(e, e.enqueue(warm));
    if (!w.ok()) throw std::runtime_error("warm-up failed: " + w.message);
    // The warm-up's own cycle may not have counted itself yet: two more cycles past this
    // reading include the idle one.
    const uint64_t seen = e.stats().cycles;
    for (int i = 0; i < 2000 && e.stats().cycles < seen + 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Handle h = e.enqueue(a);
    e.cancel(h);
    Status s = rftest::waitStatus(e, h);
    if (s.code != StatusCode::kAborted || s.message != "cancelled") throw std::runtime_error("not cancelled: " + s.message);
    s = rftest::waitStatus(e, e.enqueue(a));
    if (!s.ok() || out[0] != 2.0f) throw std::runtime_error("the name was not freed: " + s.message);
    EXPECT_THROW(e.cancel(12345), InvalidArgument);
  }, options);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "ok") << "rank " << r;
}

// Fusion must not change the result: the same tensors fused and unfused give the same bits.
// With 2 ranks every fold is a + b = b + a, so any data works. With 3 or more ranks the ring's
// fold order for an element follows its chunk, which fusion moves, so only exact sums (here
// multiples of 0.25 in float) are bitwise equal; arbitrary floats agree to rounding.
TEST(EngineFusion, SameBitsFusedAndUnfused) {
  for (int ranks : {2, 3}) {
    std::vector<std::vector<std::vector<float>>> results[2];  // [fused][rank][tensor]
    for (uint64_t threshold : {uint64_t{0}, uint64_t{1} << 20}) {
      auto& store = results[threshold ? 1 : 0];
      store.assign(ranks, {});
      rftest::EngineGroupOptions options;
      options.engine.fusionThresholdBytes = threshold;
      auto errors = rftest::runEngines(ranks, [&](Engine& e, int rank) {
        std::mt19937 rng(rank * 7 + 1);
        std::uniform_real_distribution<float> any(-1.0f, 1.0f);
        std::uniform_int_distribution<int> whole(-1000, 1000);
        std::vector<std::vector<float>> in(20), out(20);
        std::vector<Handle> hs;
        for (int t = 0; t < 20; ++t) {
          in[t].resize(50 + t * 13);
          for (float& v : in[t]) v = ranks == 2 ? any(rng) : static_cast<float>(whole(rng)) * 0.25f;
          out[t].assign(in[t].size(), 0.0f);
          TensorArgs a;
          a.name = "t" + std::to_string(t);
          a.shape = {static_cast<int64_t>(in[t].size())};
          a.input = in[t].data();
          a.output = out[t].data();
          a.reduceOp = t % 2 ? ReduceOp::kAvg : ReduceOp::kSum;
          hs.push_back(e.enqueue(a));
        }
        for (Handle h : hs) {
          Status s = rftest::waitStatus(e, h);
          if (!s.ok()) throw std::runtime_error(s.message);
        }
        if (rank == 0 && threshold && e.stats().batches >= 20) throw std::runtime_error("nothing was fused");
        store[rank] = out;
      }, options);
      for (size_t r = 0; r < errors.size(); ++r) ASSERT_EQ(errors[r], "ok") << "rank " << r;
    }
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(results[0][r].size(), results[1][r].size());
      for (size_t t = 0; t < results[0][r].size(); ++t) {
        EXPECT_EQ(0, std::memcmp(results[0][r][t].data(), results[1][r][t].data(), results[0][r][t].size() * 4))
            << ranks << " ranks, rank " << r << ", tensor " << t;
      }
    }
  }
}

}  // namespace
}  // namespace ringfold::engine

namespace ringfold::engine {
namespace {

// Enqueues one allreduce on every rank once the engines wait for their next regular cycle;
// returns how long it took on the slowest rank.
double secondsForOneAllreduceWhileWaiting(const EngineGroupOptions& options) {
  std::vector<double> took(3, 0);
  auto errors = runEngines(
      3,
      [&](Engine& e, int rank) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past start-up's cycles
        std::vector<float> in(16, 1.0f), out(16, 0.0f);
        const auto t0 = std::chrono::steady_clock::now();
        Status s = waitStatus(e, e.enqueue(allreduceArgs("wake", in, out)));
        took[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_TRUE(s.ok()) << s.message;
        EXPECT_EQ(out[0], 3.0f);
      },
      options);
  expectAllOk(errors);
  return *std::max_element(took.begin(), took.end());
}

// With a 10 s cycle time, an enqueued tensor starts a cycle at once (RINGFOLD_WAKE_DELAY_US=0)
// instead of waiting for the tick (the 5 s bound is loose: without the wake-up it takes ~10 s).
TEST(EngineCycle, EnqueueWakesAWaitingEngine) {
  EngineGroupOptions o;
  o.engine.cycleTimeMs = 10000;
  o.engine.wakeDelayUs = 0;
  o.timeout = std::chrono::milliseconds(30000);
  EXPECT_LT(secondsForOneAllreduceWhileWaiting(o), 5.0);
}

// RINGFOLD_WAKE_DELAY_US=-1: Horovod's behaviour, the tensor waits for the regular tick.
TEST(EngineCycle, WithoutWakeUpsTensorsWaitForTheTick) {
  EngineGroupOptions o;
  o.engine.cycleTimeMs = 1500;
  o.engine.wakeDelayUs = -1;
  EXPECT_GT(secondsForOneAllreduceWhileWaiting(o), 0.8);  // enqueued ~0.2 s after a tick
}

}  // namespace
}  // namespace ringfold::engine


namespace ringfold::engine {
namespace {

// A signal handler that calls exit() on the engine's own thread (libfabric's psm provider, when
// loaded, installs one; the fault matrix's ranks aborted with "terminate called" on SIGTERM)
// runs the static destructors there, the engine's among them. The process must end with the
// handler's status: the engine thread must not try to join itself and abort.
TEST(EngineLifetime, ExitOnTheEngineThreadEndsTheProcessCleanly) {
#if defined(__SANITIZE_THREAD__) || RF_TEST_TSAN
  // exit() from a signal handler on the engine thread reads the global that the main thread set
  // after that thread started, with nothing between them that TSan counts as synchronisation.
  GTEST_SKIP() << "the scenario (exit() in a signal handler on another thread) is a race by design under TSan";
#endif
  EXPECT_EXIT(
      {
        static std::unique_ptr<Engine> held;  // destroyed by exit(), as the C ABI's global is
        auto store = std::make_shared<rendezvous::HashStore>();
        auto device = transport::createDevice("loopback");
        auto peers = device->connectAll(*store, "exit-test", 0, 1, std::chrono::milliseconds(20000));
        auto comm = std::make_unique<Communicator>(0, 1, std::move(device), std::move(peers), makeCpuReducer());
        comm->setStore(store, "exit-test");
        std::signal(SIGUSR1, [](int) { std::exit(3); });
        held = std::make_unique<Engine>(std::move(comm), rftest::EngineGroupOptions::defaultEngineOptions());
        // Only the engine's thread, started above with SIGUSR1 open, can take the signal now.
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
        ::kill(::getpid(), SIGUSR1);
        std::this_thread::sleep_for(std::chrono::seconds(20));
        std::_Exit(9);  // the signal never came
      },
      ::testing::ExitedWithCode(3), "");
}

}  // namespace
}  // namespace ringfold::engine
