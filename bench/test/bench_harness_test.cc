// Unit tests of the bench harness pieces that need no peers: the nccl-tests formatter (checked
// against nccl-tests' own published output), the size flags, and the data patterns, whose
// expected results are cross-checked against ringfold's CPU reducer folding every rank's input.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/common/data.h"
#include "bench/common/guarded_buffer.h"
#include "bench/common/harness.h"
#include "bench/common/nccl_format.h"
#include "reduce/cpu_reducer.h"

namespace ringfold::bench {
namespace {

template <typename F>
std::string capture(F&& print) {
  char* data = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&data, &size);
  print(f);
  std::fclose(f);
  std::string out(data, size);
  std::free(data);
  return out;
}

std::string rstripLines(const std::string& s) {
  std::string out, line;
  for (char c : s) {
    if (c == '\n') {
      line.erase(line.find_last_not_of(' ') + 1);
      out += line + '\n';
      line.clear();
    } else {
      line += c;
    }
  }
  return out + line;
}

TEST(NcclFormat, FitNumberFollowsNcclTests) {
  EXPECT_EQ(fitNumber(0.5, 6), "  0.50");
  EXPECT_EQ(fitNumber(22.07, 6), " 22.07");
  EXPECT_EQ(fitNumber(999.994, 6), "999.99");
  EXPECT_EQ(fitNumber(1234.5, 6), "1234.5");
  EXPECT_EQ(fitNumber(12345.6, 6), " 12346");
  EXPECT_EQ(fitNumber(1234567, 6), " 1e+06");
  EXPECT_EQ(fitNumber(2850.10, 7), "2850.10");
  EXPECT_EQ(fitNumber(123456.7, 7), " 123457");
  EXPECT_EQ(fitNumber(12345678, 7), "1.2e+07");
  EXPECT_EQ(fitNumber(0, 7), "   0.00");
}

TEST(NcclFormat, HeaderAndRowMatchNcclTestsOutput) {
  // nccl-tests' own output (docs), trailing blanks aside.
  const std::string expected =
      "#\n"
      "#                                                              out-of-place                       in-place\n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n"
      "    33554432       8388608     float     sum      -1  2850.10   11.77   22.07       0  2850.10   11.77   22.07       0\n";
  const std::string got = capture([](FILE* f) {
    printResultHeader(f, false);
    printRowPrefix(f, 33554432, 8388608, "float", "sum", -1);
    printRowBody(f, 2850.10, 11.77, 22.07, 0);
    printRowBody(f, 2850.10, 11.77, 22.07, 0);
    printRowEnd(f);
  });
  EXPECT_EQ(rstripLines(got), expected);
}

TEST(NcclFormat, UncheckedColumnSaysNA) {
  const std::string got = capture([](FILE* f) { printRowBody(f, 1.0, 2.0, 3.0, std::nullopt); });
  EXPECT_EQ(got, "     1.00    2.00    3.00    N/A");
}

TEST(NcclFormat, FooterReportsFailure) {
  const std::string ok = capture([](FILE* f) { printFooter(f, 0, 1.5, "x_perf"); });
  EXPECT_NE(ok.find("# Out of bounds values : 0 OK\n"), std::string::npos);
  EXPECT_NE(ok.find("# Avg bus bandwidth    : 1.5 \n"), std::string::npos);
  EXPECT_NE(ok.find("# Collective test concluded: x_perf\n"), std::string::npos);
  const std::string bad = capture([](FILE* f) { printFooter(f, 3, 1.5, "x_perf"); });
  EXPECT_NE(bad.find("# Out of bounds values : 3 FAILED\n"), std::string::npos);
}

TEST(NcclFormat, SizesAndSeries) {
  EXPECT_EQ(parseSize("8"), 8u);
  EXPECT_EQ(parseSize("64K"), 65536u);
  EXPECT_EQ(parseSize("0.5M"), 524288u);
  EXPECT_EQ(parseSize("1g"), 1073741824u);
  EXPECT_FALSE(parseSize("12Q").has_value());
  EXPECT_FALSE(parseSize("x").has_value());
  EXPECT_EQ(sizeSeries(8, 64, 0, 2), (std::vector<size_t>{8, 16, 32, 64}));
  EXPECT_EQ(sizeSeries(8, 100, 0, 8), (std::vector<size_t>{8, 64}));
  EXPECT_EQ(sizeSeries(10, 30, 10, 1), (std::vector<size_t>{10, 20, 30}));
  EXPECT_EQ(sizeSeries(0, 64, 0, 2), (std::vector<size_t>{0}));  // ends instead of looping
}

const DataType kReducible[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                               DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                               DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                               DataType::kBfloat16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kAvg};

// The expected results agree with what ringfold's own reducer computes from the inputs, for
// every type, op and a range of rank counts; one changed element is one wrong element.
TEST(BenchData, ReducePatternMatchesCpuReducer) {
  auto reducer = makeCpuReducer();
  const size_t count = 1000;
  for (DataType t : kReducible) {
    const size_t ws = dataTypeSize(t);
    for (ReduceOp op : kOps) {
      for (int n : {1, 2, 3, 5, 8, 16, 64}) {
        SCOPED_TRACE(std::string(dataTypeName(t)) + " " + reduceOpName(op) + " n=" + std::to_string(n));
        std::vector<char> acc(count * ws), in(count * ws);
        const size_t first = 17;
        const uint64_t seed = 5;
        fillReduceInput(t, op, acc.data(), count, first, 0, n, seed);
        for (int r = 1; r < n; ++r) {
          fillReduceInput(t, op, in.data(), count, first, r, n, seed);
          const double post = (op == ReduceOp::kAvg && r == n - 1) ? 1.0 / n : 1.0;
          reducer->reduce(acc.data(), acc.data(), in.data(), count, t, op, post);
        }
        EXPECT_EQ(checkReduceOutput(t, op, acc.data(), count, first, n, seed), 0);
        // Another seed or offset must not pass (avg is constant from 64 ranks on: 126/64 < 2).
        if (!(op == ReduceOp::kAvg && n >= 64)) {
          EXPECT_GT(checkReduceOutput(t, op, acc.data(), count, first, n, seed + 1), 0);
          EXPECT_GT(checkReduceOutput(t, op, acc.data(), count, first + 1, n, seed), 0);
        }
        // One flipped byte is exactly one wrong element.
        acc[3 * ws] ^= 0x40;
        EXPECT_EQ(checkReduceOutput(t, op, acc.data(), count, first, n, seed), 1);
      }
    }
  }
}

TEST(BenchData, CopyPatternDependsOnSourceIndexAndSeed) {
  for (DataType t : {DataType::kInt8, DataType::kFloat16, DataType::kBfloat16, DataType::kFloat64,
                     DataType::kBool}) {
    const size_t ws = dataTypeSize(t);
    std::vector<char> buf(500 * ws);
    fillCopyInput(t, buf.data(), 500, 40, 3, 9);
    EXPECT_EQ(checkCopyOutput(t, buf.data(), 500, 40, 3, 9), 0);
    EXPECT_GT(checkCopyOutput(t, buf.data(), 500, 40, 4, 9), 0);
    EXPECT_GT(checkCopyOutput(t, buf.data(), 500, 40, 3, 10), 0);
    EXPECT_GT(checkCopyOutput(t, buf.data(), 500, 41, 3, 9), 0);
    buf[7 * ws] ^= 0x01;
    EXPECT_EQ(checkCopyOutput(t, buf.data(), 500, 40, 3, 9), 1);
  }
}

TEST(GuardedBuffer, DetectsWritesPastEitherEnd) {
  GuardedBuffer b(1000);
  b.fill(0);
  EXPECT_EQ(b.guardDamage(), 0);
  b.data()[1000] = std::byte{1};   // just past the end
  b.data()[-1] = std::byte{2};     // just before the start
  EXPECT_EQ(b.guardDamage(), 2);
}

// A collective that is never run: the job fails before the communicator exists.
class NeverRun : public BenchCollective {
 public:
  std::string program() const override { return "never_run_perf"; }
  OpColumn opColumn() const override { return OpColumn::kNone; }
  CollCounts counts(size_t count, int) const override { return {count, count, count}; }
  double algBytes(const CollCounts& c, size_t elemSize, int) const override { return double(c.send * elemSize); }
  double busFactor(int) const override { return 1; }
  void run(Communicator&, const void*, void*, size_t, DataType, ReduceOp, int) override {}
  void fillInput(const CheckContext&, void*) const override {}
  int64_t checkOutput(const CheckContext&, const void*) const override { return 0; }
};

// A rank that cannot reach the store names its rank from the environment, not "rank -1".
TEST(BenchMain, StartFailureNamesTheRankFromTheEnvironment) {
  const std::pair<const char*, const char*> vars[] = {
      {"RINGFOLD_RANK", "1"}, {"RINGFOLD_SIZE", "2"}, {"RINGFOLD_LOCAL_RANK", "1"},
      {"RINGFOLD_LOCAL_SIZE", "2"}, {"RINGFOLD_STORE_ADDR", "127.0.0.1"},
      {"RINGFOLD_STORE_PORT", "1"}, {"RINGFOLD_SECRET", "s"}, {"RINGFOLD_START_TIMEOUT", "0.2"}};
  for (const auto& [k, v] : vars) ::setenv(k, v, 1);
  NeverRun coll;
  char name[] = "never_run_perf";
  char* argv[] = {name, nullptr};
  ::testing::internal::CaptureStderr();
  int rc = benchMain(1, argv, coll);
  std::string err = ::testing::internal::GetCapturedStderr();
  for (const auto& [k, v] : vars) ::unsetenv(k);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("never_run_perf: rank 1: could not connect to the rendezvous store"), std::string::npos) << err;
  EXPECT_EQ(err.find("rank -1"), std::string::npos) << err;
}

}  // namespace
}  // namespace ringfold::bench
