// gpu label: the engine with GPU tensors, 2 and 3 ranks as threads over loopback: one allreduce
// per tensor, many small tensors fused in the device fusion buffer, a joined rank contributing
// zeros, broadcast, and ordering after the tensor's stream (the input is written by a copy queued
// on the stream just before the enqueue). Skips without a CUDA device.
#include <vector>

#include "engine/engine_harness.h"
#include "gpu_support.h"

namespace ringfold {
namespace {

using engine::Handle;
using engine::Status;
using engine::TensorArgs;
using testgpu::DeviceBuffer;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

class EngineGpu : public ::testing::Test {
 protected:
  void SetUp() override { RF_SKIP_WITHOUT_GPU(); }
};

TEST_F(EngineGpu, AllreduceFusedAndAloneOrderedOnTheTensorStream) {
  for (int ranks : {2, 3}) {
    const auto errors = rftest::runEngines(ranks, [&](engine::Engine& e, int rank) {
      cudaStream_t stream;
      checkCuda(cudaStreamCreate(&stream), "cudaStreamCreate");
      const std::vector<size_t> counts = {1, 7, 1000, 300001, 5, 64};
      std::vector<std::unique_ptr<DeviceBuffer>> bufs;
      std::vector<std::vector<float>> host(counts.size());
      std::vector<TensorArgs> group;
      for (size_t t = 0; t < counts.size(); ++t) {
        host[t].assign(counts[t], 0.0f);
        for (size_t i = 0; i < counts[t]; ++i) host[t][i] = float((rank + 1) * ((i + t) % 50));
        bufs.push_back(std::make_unique<DeviceBuffer>(counts[t] * 4));
        // Written on the stream, not synchronised: the engine must wait for it.
        checkCuda(cudaMemcpyAsync(bufs[t]->as(), host[t].data(), counts[t] * 4, cudaMemcpyHostToDevice, stream), "upload");
        TensorArgs a;
        a.name = "gpu." + std::to_string(t);
        a.shape = {static_cast<int64_t>(counts[t])};
        a.device = 0;
        a.stream = stream;
        a.input = a.output = bufs[t]->as();
        group.push_back(a);
      }
      std::vector<Handle> handles;
      for (TensorArgs& a : group) handles.push_back(e.enqueue(a));  // small ones fuse, the big one runs alone
      for (Handle h : handles) {
        const Status s = rftest::waitStatus(e, h);
        require(s.ok(), s.message);
      }
      const float sumRanks = float(ranks * (ranks + 1) / 2);
      for (size_t t = 0; t < counts.size(); ++t) {
        std::vector<float> out(counts[t]);
        checkCuda(cudaMemcpy(out.data(), bufs[t]->as(), counts[t] * 4, cudaMemcpyDeviceToHost), "download");
        for (size_t i = 0; i < counts[t]; ++i) {
          require(out[i] == sumRanks * float((i + t) % 50), "tensor " + std::to_string(t) + " element " + std::to_string(i));
        }
      }
      checkCuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
    });
    for (int r = 0; r < ranks; ++r) EXPECT_EQ("ok", errors[r]) << ranks << " ranks, rank " << r;
  }
}

TEST_F(EngineGpu, BroadcastAndJoinedRankZeros) {
  const auto errors = rftest::runEngines(2, [&](engine::Engine& e, int rank) {
    const size_t n = 100001;
    DeviceBuffer buf(n * 4);
    std::vector<float> host(n, rank == 1 ? 7.0f : -1.0f);
    checkCuda(cudaMemcpy(buf.as(), host.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    TensorArgs b;
    b.op = engine::OpType::kBroadcast;
    b.name = "gpu.bcast";
    b.shape = {static_cast<int64_t>(n)};
    b.device = 0;
    b.root = 1;
    b.input = b.output = buf.as();
    Status s = rftest::waitStatus(e, e.enqueue(b));
    require(s.ok(), s.message);
    checkCuda(cudaMemcpy(host.data(), buf.as(), n * 4, cudaMemcpyDeviceToHost), "download");
    require(host[0] == 7.0f && host[n - 1] == 7.0f, "broadcast result");
    // Rank 1 joins; rank 0's allreduce then sums with rank 1's zeros.
    if (rank == 1) {
      s = rftest::waitStatus(e, e.join());
      require(s.ok(), s.message);
      return;
    }
    TensorArgs a = b;
    a.op = engine::OpType::kAllreduce;
    a.name = "gpu.after-join";
    s = rftest::waitStatus(e, e.enqueue(a));
    require(s.ok(), s.message);
    checkCuda(cudaMemcpy(host.data(), buf.as(), n * 4, cudaMemcpyDeviceToHost), "download");
    require(host[0] == 7.0f && host[n - 1] == 7.0f, "allreduce with a joined rank");
    s = rftest::waitStatus(e, e.join());
    require(s.ok(), s.message);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ("ok", errors[r]) << "rank " << r;
}

}  // namespace
}  // namespace ringfold
