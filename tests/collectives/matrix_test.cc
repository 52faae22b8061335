// The full collective matrix (ranks as threads): every collective x dtype x op x rank count
// {1,2,3,5,8} x count {0, 1, 7, odd, larger than a 4 KiB segment} x in/out of place, run twice,
// bitwise against the sequential reference. collectives_test runs it over loopback;
// collectives_rdma_test compiles it again with RF_MATRIX_RDMA_FAKE and runs it over the rdma
// transport on its fake fabric: 1 KiB eager slots, so small messages go eagerly and segments by
// rendezvous, 8 slots, so credits run out, and two lanes delivered out of order.
// collectives_shm_test compiles it with RF_MATRIX_SHM: the shm transport between threads (small
// rings, cross-memory attach from 2 KiB).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "matrix.h"
#ifdef RF_MATRIX_RDMA_FAKE
#include "transport/rdma/fabric_fake.h"
#endif

ringfold::rftest::GroupOptions ringfold::rftest::matrixGroup() {
  ringfold::rftest::GroupOptions g;
#if defined(RF_MATRIX_RDMA_FAKE)
  g.transport = "rdma";
#elif defined(RF_MATRIX_SHM)
  g.transport = "shm";
#endif
  return g;
}

namespace {

using namespace ringfold;
using namespace ringfold::rftest;

// allreduce counts: 7 < 8 ranks, 4097 and 40001 not multiples of 2, 3, 5 or 8; 40001 elements
// make chunks larger than the 4 KiB test segment for every dtype at 8 ranks.
const std::vector<size_t> kAllreduceCounts = {0, 1, 7, 4097, 40001};
// Per-rank counts (reduce-scatter recvCount, allgather sendCount, ...): 5001 > one segment.
const std::vector<size_t> kBlockCounts = {0, 1, 7, 1025, 5001};

#ifdef RF_MATRIX_RDMA_FAKE
class RdmaFakeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("RINGFOLD_RDMA_FABRIC", "fake", 1);
    setenv("RINGFOLD_RDMA_SLOT_BYTES", "1K", 1);
    setenv("RINGFOLD_RDMA_SLOTS", "8", 1);
    transport::rdma::fake::Faults faults;
    faults.lanes = 2;
    faults.ordered = false;
    faults.reorder = true;
    transport::rdma::fake::setFaults(faults);
  }
  void TearDown() override { transport::rdma::fake::clearFaults(); }
};
const auto* const kRdmaFake = ::testing::AddGlobalTestEnvironment(new RdmaFakeEnvironment);
#elif defined(RF_MATRIX_SHM)
// Small rings (1 KiB slots, 8 of them), so messages span slots and rings fill; cross-memory
// attach on from 2 KiB, so the 4 KiB-segment collectives use both paths.
class ShmEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("RINGFOLD_SHM_SLOT_BYTES", "1K", 1);
    setenv("RINGFOLD_SHM_SLOTS", "8", 1);
    setenv("RINGFOLD_SHM_CMA", "on", 1);
    setenv("RINGFOLD_SHM_CMA_MIN_BYTES", "2K", 1);
  }
};
const auto* const kShm = ::testing::AddGlobalTestEnvironment(new ShmEnvironment);
#endif

using Param = std::tuple<int, DataType>;
std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return "ranks" + std::to_string(std::get<0>(info.param)) + "_" + dataTypeName(std::get<1>(info.param));
}

class Reducing : public ::testing::TestWithParam<Param> {};

TEST_P(Reducing, Allreduce) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllreduce(n, t, reduceCases(allOps(), kAllreduceCounts),
                 {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree}, matrixGroup(), log);
  log.report();
}

TEST_P(Reducing, ReduceScatter) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkReduceScatter(n, t, reduceCases(allOps(), kBlockCounts), matrixGroup(), log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(RF_MATRIX_SUITE, Reducing,
                         ::testing::Combine(::testing::ValuesIn(kRankCounts), ::testing::ValuesIn(reducibleTypes())),
                         paramName);

class Copying : public ::testing::TestWithParam<Param> {};

TEST_P(Copying, Allgather) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllgather(n, t, kBlockCounts, matrixGroup(), log);
  log.report();
}

TEST_P(Copying, Allgatherv) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllgatherv(n, t, {0, 1, 7, 1025, 5001}, matrixGroup(), log);
  log.report();
}

TEST_P(Copying, Broadcast) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkBroadcast(n, t, kAllreduceCounts, matrixGroup(), log);
  log.report();
}

TEST_P(Copying, Alltoall) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAlltoall(n, t, {0, 1, 7, 1025}, matrixGroup(), log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(RF_MATRIX_SUITE, Copying,
                         ::testing::Combine(::testing::ValuesIn(kRankCounts), ::testing::ValuesIn(allTypes())),
                         paramName);

// preScale, postScale and avg, with every algorithm (auto included), every dtype.
class Scaling : public ::testing::TestWithParam<int> {};

std::vector<ReduceCase> scaleCases() {
  std::vector<ReduceCase> out;
  for (size_t count : {size_t{7}, size_t{4097}}) {
    out.push_back({ReduceOp::kSum, count, 0.5, 3.0});
    out.push_back({ReduceOp::kAvg, count, 1.0, 1.0});
    out.push_back({ReduceOp::kAvg, count, 2.0, 0.25});
    out.push_back({ReduceOp::kMax, count, -1.5, 1.0});
    out.push_back({ReduceOp::kProd, count, 1.0, -2.0});
  }
  return out;
}

TEST_P(Scaling, Allreduce) {
  FailureLog log;
  for (DataType t : reducibleTypes()) {
    checkAllreduce(GetParam(), t, scaleCases(),
                   {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree,
                    AllreduceAlgorithm::kAuto},
                   matrixGroup(), log);
  }
  log.report();
}

TEST_P(Scaling, ReduceScatter) {
  FailureLog log;
  for (DataType t : reducibleTypes()) checkReduceScatter(GetParam(), t, scaleCases(), matrixGroup(), log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(RF_MATRIX_SUITE, Scaling, ::testing::ValuesIn(kRankCounts),
                         [](const ::testing::TestParamInfo<int>& i) { return "ranks" + std::to_string(i.param); });

// Hierarchical allreduce on groups that look like several hosts (hosts x ranks per host), with
// every algorithm among hosts, every dtype and op, scales included, and auto on the same hosts.
using HostsParam = std::tuple<int, int>;
class Hierarchical : public ::testing::TestWithParam<HostsParam> {};

TEST_P(Hierarchical, Allreduce) {
  auto [hosts, local] = GetParam();
  const int n = hosts * local;
  GroupOptions group = matrixGroup();
  group.ranksPerHost = local;
  FailureLog log;
  std::vector<ReduceCase> cases = reduceCases(allOps(), kAllreduceCounts);
  for (const ReduceCase& c : scaleCases()) cases.push_back(c);
  // Among hosts: each flat algorithm (RINGFOLD_ALGO=hierarchical,<it>) on three dtypes, then the
  // model's choice on every dtype.
  for (const std::string algorithms : {"hierarchical,ring", "hierarchical,direct", "hierarchical,tree", "auto"}) {
    group.algorithms = algorithms;
    const std::vector<DataType> types = algorithms == "auto" ? reducibleTypes()
                                                             : std::vector<DataType>{DataType::kFloat32, DataType::kBfloat16, DataType::kInt64};
    for (DataType t : types) {
      checkAllreduce(n, t, cases, {AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kAuto}, group, log);
    }
  }
  log.report();
}

INSTANTIATE_TEST_SUITE_P(RF_MATRIX_SUITE, Hierarchical,
                         ::testing::Values(HostsParam{2, 2}, HostsParam{3, 2}, HostsParam{2, 3}, HostsParam{2, 4}),
                         [](const ::testing::TestParamInfo<HostsParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "hosts_x" + std::to_string(std::get<1>(i.param));
                         });

}  // namespace
