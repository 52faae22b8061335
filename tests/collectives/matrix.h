// The collective test matrix, shared by the loopback suite and the tcp_uring suite: each check
// runs one group of `ranks` threads, performs every case in place and out of place, twice, and
// compares each rank's result bitwise with a sequential reference (reference.h), the second run
// with the first, and the guard bytes around every buffer. Failures go to `log`.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/collectives.h"
#include "test_util.h"

namespace ringfold::rftest {

struct ReduceCase {
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  double preScale = 1.0;
  double postScale = 1.0;
};

// Every op x count (scales 1).
std::vector<ReduceCase> reduceCases(const std::vector<ReduceOp>& ops, const std::vector<size_t>& counts);

void checkAllreduce(int ranks, DataType dtype, const std::vector<ReduceCase>& cases,
                    const std::vector<AllreduceAlgorithm>& algorithms, const GroupOptions& group, FailureLog& log);
// Each case's count is the recvCount.
void checkReduceScatter(int ranks, DataType dtype, const std::vector<ReduceCase>& cases, const GroupOptions& group,
                        FailureLog& log);
void checkAllgather(int ranks, DataType dtype, const std::vector<size_t>& counts, const GroupOptions& group,
                    FailureLog& log);
// Per-rank counts derived from each base count (some ranks contribute 0).
void checkAllgatherv(int ranks, DataType dtype, const std::vector<size_t>& baseCounts, const GroupOptions& group,
                     FailureLog& log);
// Roots 0, ranks-1 and ranks/2 for each count.
void checkBroadcast(int ranks, DataType dtype, const std::vector<size_t>& counts, const GroupOptions& group,
                    FailureLog& log);
// Splits derived from each base count: a symmetric matrix (in and out of place) and an
// asymmetric one with zeros (out of place), plus alltoallExchangeCounts.
void checkAlltoall(int ranks, DataType dtype, const std::vector<size_t>& baseCounts, const GroupOptions& group,
                   FailureLog& log);

// The transport a matrix binary runs over, chosen at build time (tests/collectives/CMakeLists.txt):
// RF_MATRIX_SUITE names its test instances, matrixGroup() (matrix_test.cc, built into every
// such binary) gives the group options.
#if defined(RF_MATRIX_RDMA_FAKE)
#define RF_MATRIX_SUITE RdmaFake
#elif defined(RF_MATRIX_SHM)
#define RF_MATRIX_SUITE Shm
#else
#define RF_MATRIX_SUITE Loopback
#endif
GroupOptions matrixGroup();

}  // namespace ringfold::rftest
