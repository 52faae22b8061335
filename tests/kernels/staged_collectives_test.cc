// gpu label: allreduce and broadcast of device buffers through GpuStaging, 2 and 3 ranks as
// threads over loopback and over tcp_uring on 127.0.0.1, with small staging blocks so buffers
// cross many blocks, in and out of place, at misaligned device addresses. Values are small
// integers, so every fold order gives the exact result the host computes; random floats check
// that every rank ends with the same bits. Skips without a CUDA device.
#include <bit>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "common/error.h"
#include "gpu_support.h"
#include "collectives/gpu_staged.h"
#include "reduce/cpu_reducer.h"
#include "support/rank_threads.h"

namespace ringfold {
namespace {

using testgpu::DeviceBuffer;

struct Case {
  int ranks;
  std::string transport;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool inPlace;
};

// Rank r's input: small integers (exact in every dtype and under any fold order), or random
// float bits when `noisy`.
std::vector<unsigned char> inputOf(int r, DataType dt, size_t count, bool noisy) {
  std::vector<unsigned char> out(count * dataTypeSize(dt));
  std::vector<float> f(count);
  std::mt19937 rng(1000 + r);
  for (auto& v : f) v = noisy ? std::uniform_real_distribution<float>(-1, 1)(rng) : float(int(rng() % 17) - 8);
  for (size_t i = 0; i < count; ++i) {
    switch (dt) {
      case DataType::kFloat32: std::memcpy(&out[i * 4], &f[i], 4); break;
      case DataType::kBfloat16: { const uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(f[i]) >> 16); std::memcpy(&out[i * 2], &h, 2); break; }
      case DataType::kInt32: { const int32_t v = static_cast<int32_t>(f[i]); std::memcpy(&out[i * 4], &v, 4); break; }
      default: RF_THROW(InvalidArgument, "test dtype");
    }
  }
  return out;
}

void runCase(const Case& c, bool noisy = false) {
  SCOPED_TRACE(::testing::Message() << c.ranks << " ranks over " << c.transport << ", " << dataTypeName(c.dtype) << " "
                                    << reduceOpName(c.op) << ", count " << c.count << (c.inPlace ? ", in place" : ""));
  const size_t es = dataTypeSize(c.dtype), bytes = c.count * es;
  // Expected: the exact fold on the host, rank order; kAvg divides by the rank count once.
  auto cpu = makeCpuReducer();
  std::vector<unsigned char> want = inputOf(0, c.dtype, c.count, noisy);
  for (int r = 1; r < c.ranks; ++r) {
    const auto in = inputOf(r, c.dtype, c.count, noisy);
    cpu->reduce(want.data(), want.data(), in.data(), c.count, c.dtype, c.op,
                r == c.ranks - 1 && c.op == ReduceOp::kAvg ? 1.0 / c.ranks : 1.0);
  }
  std::vector<std::vector<unsigned char>> got(c.ranks);
  rftest::GroupOptions go;
  go.transport = c.transport;
  auto errors = rftest::runRanks(c.ranks, [&](Communicator& comm) {
    const int r = comm.rank();
    const auto in = inputOf(r, c.dtype, c.count, noisy);
    DeviceBuffer send(bytes + 2 * es), recv(bytes + 2 * es);
    unsigned char* dsend = send.as(es);  // one element past cudaMalloc's alignment
    unsigned char* drecv = c.inPlace ? dsend : recv.as(es);
    checkCuda(cudaMemcpy(dsend, in.data(), bytes, cudaMemcpyHostToDevice), "upload");
    cudaStream_t stream;
    checkCuda(cudaStreamCreate(&stream), "cudaStreamCreate");
    GpuStaging staging(0, 64 << 10);
    staging.allreduce(comm, {dsend, drecv, c.count, c.dtype, c.op, 1.0, 1.0, stream});
    checkCuda(cudaStreamSynchronize(stream), "sync");
    got[r].resize(bytes);
    checkCuda(cudaMemcpy(got[r].data(), drecv, bytes, cudaMemcpyDeviceToHost), "download");
    checkCuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }, go);
  for (int r = 0; r < c.ranks; ++r) ASSERT_FALSE(errors[r]) << "rank " << r << ": " << rftest::describe(errors[r]);
  for (int r = 1; r < c.ranks; ++r) ASSERT_EQ(got[0], got[r]) << "rank " << r << " differs from rank 0";
  if (!noisy) {
    ASSERT_EQ(0, std::memcmp(want.data(), got[0].data(), bytes)) << "result differs from the host's";
  }
}

class StagedCollectives : public ::testing::Test {
 protected:
  void SetUp() override { RF_SKIP_WITHOUT_GPU(); }
};

TEST_F(StagedCollectives, AllreduceOverLoopback) {
  for (int ranks : {2, 3}) {
    for (DataType dt : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{4097}, size_t{300001}}) {
          for (bool inPlace : {false, true}) runCase({ranks, "loopback", dt, op, count, inPlace});
        }
      }
    }
  }
}

TEST_F(StagedCollectives, AllreduceOverTcpUring) {
#if !defined(RINGFOLD_HAVE_URING)
  GTEST_SKIP() << "built without io_uring";
#endif
  for (int ranks : {2, 3}) runCase({ranks, "tcp_uring", DataType::kFloat32, ReduceOp::kSum, (size_t{1} << 20) + 3, false});
}

TEST_F(StagedCollectives, RandomFloatsGiveTheSameBitsOnEveryRank) {
  runCase({3, "loopback", DataType::kFloat32, ReduceOp::kSum, 200003, true}, true);
  runCase({2, "loopback", DataType::kBfloat16, ReduceOp::kAvg, 200003, true}, true);
}

TEST_F(StagedCollectives, BroadcastFromEachRoot) {
  const size_t count = 100003;
  for (int root : {0, 2}) {
    std::vector<std::vector<float>> got(3);
    auto errors = rftest::runRanks(3, [&](Communicator& comm) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = comm.rank() == root ? float(i % 1000) : -1.0f;
      DeviceBuffer buf((count + 1) * 4);
      checkCuda(cudaMemcpy(buf.as(4), in.data(), count * 4, cudaMemcpyHostToDevice), "upload");
      GpuStaging staging(0, 32 << 10);
      staging.broadcast(comm, {buf.as(4), count, DataType::kFloat32, root, nullptr});
      got[comm.rank()].resize(count);
      checkCuda(cudaMemcpy(got[comm.rank()].data(), buf.as(4), count * 4, cudaMemcpyDeviceToHost), "download");
    });
    for (int r = 0; r < 3; ++r) {
      ASSERT_FALSE(errors[r]) << rftest::describe(errors[r]);
      for (size_t i = 0; i < count; i += 997) ASSERT_EQ(float(i % 1000), got[r][i]) << "rank " << r << " at " << i;
    }
  }
}

}  // namespace
}  // namespace ringfold
