// The full collective matrix over loopback (ranks as threads): every collective x dtype x op x
// rank count {1,2,3,5,8} x count {0, 1, 7, odd, larger than a 4 KiB segment} x in/out of place,
// run twice, bitwise against the sequential reference.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "matrix.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;

// allreduce counts: 7 < 8 ranks, 4097 and 40001 not multiples of 2, 3, 5 or 8; 40001 elements
// make chunks larger than the 4 KiB test segment for every dtype at 8 ranks.
const std::vector<size_t> kAllreduceCounts = {0, 1, 7, 4097, 40001};
// Per-rank counts (reduce-scatter recvCount, allgather sendCount, ...): 5001 > one segment.
const std::vector<size_t> kBlockCounts = {0, 1, 7, 1025, 5001};

using Param = std::tuple<int, DataType>;
std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return "ranks" + std::to_string(std::get<0>(info.param)) + "_" + dataTypeName(std::get<1>(info.param));
}

class Reducing : public ::testing::TestWithParam<Param> {};

TEST_P(Reducing, Allreduce) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllreduce(n, t, reduceCases(allOps(), kAllreduceCounts),
                 {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect}, GroupOptions{}, log);
  log.report();
}

TEST_P(Reducing, ReduceScatter) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkReduceScatter(n, t, reduceCases(allOps(), kBlockCounts), GroupOptions{}, log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(Loopback, Reducing,
                         ::testing::Combine(::testing::ValuesIn(kRankCounts), ::testing::ValuesIn(reducibleTypes())),
                         paramName);

class Copying : public ::testing::TestWithParam<Param> {};

TEST_P(Copying, Allgather) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllgather(n, t, kBlockCounts, GroupOptions{}, log);
  log.report();
}

TEST_P(Copying, Allgatherv) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAllgatherv(n, t, {0, 1, 7, 1025, 5001}, GroupOptions{}, log);
  log.report();
}

TEST_P(Copying, Broadcast) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkBroadcast(n, t, kAllreduceCounts, GroupOptions{}, log);
  log.report();
}

TEST_P(Copying, Alltoall) {
  auto [n, t] = GetParam();
  FailureLog log;
  checkAlltoall(n, t, {0, 1, 7, 1025}, GroupOptions{}, log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(Loopback, Copying,
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
                   {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kAuto},
                   GroupOptions{}, log);
  }
  log.report();
}

TEST_P(Scaling, ReduceScatter) {
  FailureLog log;
  for (DataType t : reducibleTypes()) checkReduceScatter(GetParam(), t, scaleCases(), GroupOptions{}, log);
  log.report();
}

INSTANTIATE_TEST_SUITE_P(Loopback, Scaling, ::testing::ValuesIn(kRankCounts),
                         [](const ::testing::TestParamInfo<int>& i) { return "ranks" + std::to_string(i.param); });

}  // namespace
