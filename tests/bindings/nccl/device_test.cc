// The NCCL-API library on device buffers (cudaMalloc) and a CUDA stream: two forked ranks on
// GPU 0 run allreduce and broadcast (ringfold's GpuStaging where built with CUDA), allgather in
// place, reduce-scatter and a grouped send/recv exchange (pinned host copies), each checked
// exactly after a copy back. Skips, saying why, where no CUDA device is usable (the probe runs
// in a child process, so the test process never initializes CUDA before it forks).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <vector>

#include "tests/bindings/nccl/job.h"

namespace {

using namespace ncclt;
using namespace std::chrono_literals;

bool cudaDeviceUsable() {
  const pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int status = 1;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define CUDAOK(call)                                                                        \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                      \
  } while (0)

std::vector<float> fetch(const float* dev, size_t n) {
  std::vector<float> h(n);
  CUDAOK(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

int deviceRank(int rank, int n, const ncclUniqueId& id) {
  CUDAOK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDAOK(cudaStreamCreate(&stream));
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  const size_t count = 100000;
  float *a = nullptr, *b = nullptr;
  CUDAOK(cudaMalloc(&a, count * n * sizeof(float)));
  CUDAOK(cudaMalloc(&b, count * n * sizeof(float)));
  std::vector<float> h(count * n);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float((i + rank) % 17);
  CUDAOK(cudaMemcpy(a, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));

  // allreduce out of place, then in place
  NCCLOK(ncclAllReduce(a, b, count, ncclFloat32, ncclSum, comm, stream));
  NCCLOK(ncclAllReduce(a, a, count, ncclFloat32, ncclSum, comm, stream));
  CUDAOK(cudaStreamSynchronize(stream));
  auto rb = fetch(b, count), ra = fetch(a, count);
  for (size_t i = 0; i < count; i += 101) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += float((i + r) % 17);
    CHECK(rb[i] == want && ra[i] == want, "device allreduce i=%zu: %g %g != %g", i, rb[i], ra[i], want);
  }
  // broadcast from rank 1
  NCCLOK(ncclBroadcast(a, b, count, ncclFloat32, 1, comm, stream));
  CUDAOK(cudaStreamSynchronize(stream));
  auto rbc = fetch(b, count), root = fetch(a, count);
  CHECK(rbc == root, "broadcast: every rank holds the same allreduced a, the root's input");
  // allgather in place: this rank's block at b + rank * count
  std::vector<float> mine(count, float(rank + 1));
  CUDAOK(cudaMemcpy(b + rank * count, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  NCCLOK(ncclAllGather(b + rank * count, b, count, ncclFloat32, comm, stream));
  CUDAOK(cudaStreamSynchronize(stream));
  auto g = fetch(b, count * n);
  for (int r = 0; r < n; ++r) CHECK(g[r * count] == float(r + 1) && g[r * count + count - 1] == float(r + 1), "allgather block %d", r);
  // reduce-scatter
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(i % 5);
  CUDAOK(cudaMemcpy(a, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  NCCLOK(ncclReduceScatter(a, b, count, ncclFloat32, ncclMax, comm, stream));
  CUDAOK(cudaStreamSynchronize(stream));
  auto rs = fetch(b, count);
  CHECK(rs[7] == float((rank * count + 7) % 5), "reduce-scatter: %g", rs[7]);
  // grouped send/recv with the other rank
  const int peer = (rank + 1) % n;
  CUDAOK(cudaMemcpy(a, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclSend(a, count, ncclFloat32, peer, comm, stream));
  NCCLOK(ncclRecv(b, count, ncclFloat32, (rank + n - 1) % n, comm, stream));
  NCCLOK(ncclGroupEnd());
  CUDAOK(cudaStreamSynchronize(stream));
  auto got = fetch(b, count);
  CHECK(got[count - 1] == float((rank + n - 1) % n + 1), "send/recv: %g", got[count - 1]);
  NCCLOK(ncclCommDestroy(comm));
  CUDAOK(cudaFree(a));
  CUDAOK(cudaFree(b));
  CUDAOK(cudaStreamDestroy(stream));
  return 0;
}

TEST(NcclApiDevice, DeviceBuffersOnAStreamAt2Ranks) {
  if (!cudaDeviceUsable()) GTEST_SKIP() << "no usable CUDA device (cudaGetDeviceCount fails or finds none)";
  const JobResult r = runJob(2, deviceRank, 120s, {{"NCCL_MULTI_RANK_GPU_ENABLE", "1"}});
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
