// The negotiation's pure parts: message encoding, the coordinator's readiness and checks, the
// response cache's slots, and fusion planning.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "engine/coordinator.h"
#include "engine/device_ops.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace ringfold::engine {
namespace {

Request req(const std::string& name, int rank, std::vector<int64_t> shape = {4}) {
  Request r;
  r.name = name;
  r.rank = rank;
  r.shape = std::move(shape);
  return r;
}

TEST(NegotiationMessage, RoundTripsEveryField) {
  Request r = req("layer/0.weight", 2, {3, 5});
  r.op = OpType::kAlltoall;
  r.dtype = DataType::kBfloat16;
  r.reduceOp = ReduceOp::kMin;
  r.root = 1;
  r.device = 0;
  r.preScale = 0.25;
  r.postScale = 3.0;
  r.splits = {1, 2};
  r.group = "group:x";
  r.groupSize = 4;
  RequestList back = [&] {
    auto bytes = encode(RequestList{{r}});
    return decodeRequests(bytes.data(), bytes.size());
  }();
  ASSERT_EQ(back.requests.size(), 1u);
  const Request& b = back.requests[0];
  EXPECT_EQ(b.name, r.name);
  EXPECT_EQ(b.op, r.op);
  EXPECT_EQ(b.dtype, r.dtype);
  EXPECT_EQ(b.shape, r.shape);
  EXPECT_EQ(b.splits, r.splits);
  EXPECT_EQ(b.postScale, 3.0);
  EXPECT_EQ(b.group, "group:x");
  EXPECT_EQ(b.groupSize, 4);

  Response res;
  res.name = "n";
  res.error = true;
  res.errorMessage = "why";
  res.firstDims = {1, 2, 3};
  auto bytes = encode(ResponseList{{res}});
  ResponseList rl = decodeResponses(bytes.data(), bytes.size());
  ASSERT_EQ(rl.responses.size(), 1u);
  EXPECT_EQ(rl.responses[0].errorMessage, "why");
  EXPECT_EQ(rl.responses[0].firstDims, res.firstDims);
}

TEST(NegotiationMessage, CorruptInputIsRejectedNotAllocated) {
  auto bytes = encode(RequestList{{req("a", 0)}});
  // Truncated anywhere.
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_THROW(decodeRequests(bytes.data(), n), InvalidArgument);
  // A list claiming 2^32-1 entries in a tiny message.
  auto huge = bytes;
  huge[4] = huge[5] = huge[6] = huge[7] = 0xFF;
  EXPECT_THROW(decodeRequests(huge.data(), huge.size()), InvalidArgument);
  // A name length far past the limit.
  auto longName = encode(RequestList{{req(std::string(kMaxNameBytes + 1, 'x'), 0)}});
  EXPECT_THROW(decodeRequests(longName.data(), longName.size()), InvalidArgument);
  // Trailing garbage, wrong magic.
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_THROW(decodeRequests(trailing.data(), trailing.size()), InvalidArgument);
  EXPECT_THROW(decodeResponses(bytes.data(), bytes.size()), InvalidArgument);
}

TEST(NegotiationCoordinator, ReadyOnlyWhenEveryRankSubmitted) {
  Coordinator c(3, 3);
  auto now = Coordinator::Clock::now();
  EXPECT_TRUE(c.add(req("b", 0), now));
  EXPECT_TRUE(c.add(req("a", 1), now));
  EXPECT_FALSE(c.add(req("b", 1), now));
  EXPECT_TRUE(c.takeReady().empty());
  c.add(req("a", 0), now);
  c.add(req("a", 2), now);
  c.add(req("b", 2), now);
  auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "b");  // first submitted first
  EXPECT_EQ(ready[1].name, "a");
  EXPECT_FALSE(ready[0].error);
  EXPECT_EQ(ready[0].elements, 4);
  EXPECT_FALSE(c.waiting());
}

// A rank that joined waits, by design, for ranks that still have data (uneven epochs can last
// long): its join is never a stall (as in Horovod, whose stall inspector never sees joins), with
// the stall shutdown now on by default. A tensor only some ranks submitted still is one.
TEST(NegotiationCoordinator, AJoinWaitingForWorkingRanksIsNotAStall) {
  Coordinator c(3, 3);
  const auto t0 = Coordinator::Clock::now();
  Request join = req("__ringfold.join", 0, {});
  join.op = OpType::kJoin;
  c.add(join, t0);
  c.add(req("lonely", 1), t0);
  const auto later = t0 + std::chrono::seconds(3600);
  const auto stalls = c.stalled(later, std::chrono::seconds(600));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "lonely");
  const auto failed = c.failStalled(later, std::chrono::seconds(600));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].name, "lonely");
  // The join still completes once the others join.
  join.rank = 1;
  c.add(join, later);
  join.rank = 2;
  c.add(join, later);
  const auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kJoin);
  EXPECT_FALSE(ready[0].error) << ready[0].errorMessage;
}

TEST(NegotiationCoordinator, GroupsAreReleasedWhole) {
  Coordinator c(2, 2);
  auto now = Coordinator::Clock::now();
  for (int r = 0; r < 2; ++r) {
    Request a = req("g0", r), b = req("g1", r);
    a.group = b.group = "group:g0";
    a.groupSize = b.groupSize = 2;
    c.add(a, now);
    if (r == 0) c.add(b, now);
    if (r == 1) {
      EXPECT_TRUE(c.takeReady().empty()) << "g0 is ready but g1 is not";
      c.add(b, now);
    }
  }
  EXPECT_EQ(c.takeReady().size(), 2u);
}

TEST(NegotiationCoordinator, AllgatherAndAlltoallChecks) {
  Coordinator c(2, 2);
  auto now = Coordinator::Clock::now();
  Request g0 = req("g", 0, {2, 3}), g1 = req("g", 1, {5, 3});
  g0.op = g1.op = OpType::kAllgather;
  c.add(g0, now);
  c.add(g1, now);
  Request t0 = req("t", 0, {4}), t1 = req("t", 1, {3});
  t0.op = t1.op = OpType::kAlltoall;
  t1.splits = {1, 1};
  c.add(t0, now);
  c.add(t1, now);
  auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_FALSE(ready[0].error);
  EXPECT_EQ(ready[0].firstDims, (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(ready[1].error);
  EXPECT_NE(ready[1].errorMessage.find("rank 1: splits add up to 2 but the first dimension is 3"), std::string::npos)
      << ready[1].errorMessage;
}

// A request's splits come from another rank's bytes: a sum past INT64_MAX is named, not wrapped.
TEST(NegotiationCoordinator, AlltoallSplitsThatOverflowAreNamed) {
  Coordinator c(2, 2);
  auto now = Coordinator::Clock::now();
  Request t0 = req("t", 0, {4}), t1 = req("t", 1, {3});
  t0.op = t1.op = OpType::kAlltoall;
  t1.splits = {INT64_MAX, 2};
  c.add(t0, now);
  c.add(t1, now);
  auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].error);
  EXPECT_NE(ready[0].errorMessage.find("rank 1: splits whose sum does not fit in 64 bits"), std::string::npos)
      << ready[0].errorMessage;
}

TEST(NegotiationCoordinator, GpuTensorsWithoutCudaFailClearly) {
  Coordinator c(1, 1);
  Request r = req("gpu", 0);
  r.device = 0;
  c.add(r, Coordinator::Clock::now());
  auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].error);
  EXPECT_NE(ready[0].errorMessage.find("no CUDA support"), std::string::npos);
}

TEST(DeviceOps, DefaultCudaDeviceIsTheLocalRanksUnlessConfigured) {
  unsetenv("RINGFOLD_CUDA_DEVICE");
  EXPECT_EQ(-1, defaultCudaDevice(0, 0));
  EXPECT_EQ(0, defaultCudaDevice(0, 1));
  EXPECT_EQ(1, defaultCudaDevice(3, 2));
  EXPECT_EQ(3, defaultCudaDevice(3, 8));
  setenv("RINGFOLD_CUDA_DEVICE", "1", 1);
  EXPECT_EQ(1, defaultCudaDevice(0, 2));
  EXPECT_EQ(-1, defaultCudaDevice(0, 0));
  setenv("RINGFOLD_CUDA_DEVICE", "2", 1);
  EXPECT_THROW(defaultCudaDevice(0, 2), InvalidArgument);
  unsetenv("RINGFOLD_CUDA_DEVICE");
  EXPECT_EQ(deviceOpsBuilt(), makeDeviceOps() != nullptr);
}

TEST(NegotiationCoordinator, GpuIndicesMayDifferButNotCpuAgainstGpu) {
  Coordinator c(2, 2, /*gpuSupported=*/true);
  for (int r = 0; r < 2; ++r) {
    Request gpu = req("per-rank-gpu", r);
    gpu.device = r;  // each rank drives its own GPU
    c.add(gpu, Coordinator::Clock::now());
    Request mixed = req("mixed", r);
    mixed.device = r == 0 ? kCpuDevice : 0;
    c.add(mixed, Coordinator::Clock::now());
  }
  auto ready = c.takeReady();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_FALSE(ready[0].error) << ready[0].errorMessage;
  EXPECT_TRUE(ready[1].error);
  EXPECT_NE(ready[1].errorMessage.find("Mismatched devices for allreduce 'mixed': rank 0: CPU; rank 1: GPU 0"),
            std::string::npos)
      << ready[1].errorMessage;
}

Response allreduce(const std::string& name, int64_t elements, DataType dtype = DataType::kFloat32) {
  Response r;
  r.name = name;
  r.elements = elements;
  r.shape = {elements};
  r.dtype = dtype;
  return r;
}

TEST(NegotiationCache, SameCallsGiveSameSlotsAndLruEviction) {
  ResponseCache a(2), b(2);
  for (ResponseCache* c : {&a, &b}) {
    c->put(allreduce("x", 4), req("x", 0));
    c->put(allreduce("y", 4), req("y", 0));
    c->touch(0);                             // x used: y is now least recent
    c->put(allreduce("z", 4), req("z", 0));  // evicts y
  }
  uint32_t slot = 99;
  EXPECT_EQ(a.lookup(req("x", 0), &slot), ResponseCache::Lookup::kHit);
  EXPECT_EQ(slot, 0u);
  EXPECT_EQ(a.lookup(req("z", 0), &slot), ResponseCache::Lookup::kHit);
  EXPECT_EQ(slot, 1u);
  EXPECT_EQ(a.lookup(req("y", 0), &slot), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(a.lookup(req("x", 0, {5}), &slot), ResponseCache::Lookup::kInvalid);
  for (uint32_t s = 0; s < a.slots(); ++s) EXPECT_EQ(a.response(s).name, b.response(s).name);

  ResponseCache off(0);
  off.put(allreduce("x", 4), req("x", 0));
  EXPECT_EQ(off.slots(), 0u);
  Response err = allreduce("e", 1);
  err.error = true;
  EXPECT_FALSE(ResponseCache::cacheable(err));
}

TEST(NegotiationFusion, PacksMatchingAllreducesUpToTheThreshold) {
  std::vector<Response> list = {allreduce("a", 100), allreduce("b", 100, DataType::kFloat64),
                                allreduce("c", 100), allreduce("d", 1000), allreduce("e", 100)};
  list.push_back(allreduce("f", 10));
  list.back().op = OpType::kBroadcast;
  auto batches = planBatches(list, 1600, false);
  // a+c+e (1200 bytes; d would overflow), b, d, f.
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].members, (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(batches[0].bytes, 1200u);
  EXPECT_EQ(batches[1].members, (std::vector<size_t>{1}));
  EXPECT_EQ(batches[2].members, (std::vector<size_t>{3}));
  EXPECT_EQ(batches[3].members, (std::vector<size_t>{5}));
  EXPECT_EQ(planBatches(list, 0, false).size(), list.size()) << "threshold 0 turns fusion off";
  // Tensors of at least tensorMaxBytes stay alone: with 1000 bytes, a, c and e (400 each) fuse.
  auto capped = planBatches(list, 1600, false, 1000);
  EXPECT_EQ(capped[0].members, (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(planBatches(list, 1600, false, 400)[0].members, (std::vector<size_t>{0})) << "400-byte tensors are not < 400";
  list[2].group = "group:c";
  EXPECT_EQ(planBatches(list, 1600, true)[0].members, (std::vector<size_t>{0, 4}));
}

}  // namespace
}  // namespace ringfold::engine
