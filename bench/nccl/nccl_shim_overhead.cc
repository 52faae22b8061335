// nccl_shim_overhead: what the NCCL API costs per call over ringfold's own allreduce, measured
// in one run. Under ringfoldrun (any -np; -np 1 isolates the shim: both calls are then a local
// copy), each rank runs rounds of `--iters` ringfold::allreduce calls on the launcher's
// communicator and `--iters` ncclAllReduce calls on an NCCL communicator of the same ranks
// (ringfold's libnccl.so.2, host buffers), at each size, the order alternating from round to
// round; it prints, per size, the median over rounds of the time per call of each and their
// difference (rank 0's view; every block starts after a barrier).
//
//   ringfoldrun -np 2 build/bench/nccl_shim_overhead [--rounds 21] [--iters 2000]
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/barrier.h"
#include "collectives/broadcast.h"
#include "collectives/communicator.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringfold;
  int rounds = 21, iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  auto comm = Communicator::fromEnvironment();
  ncclUniqueId id{};
  if (comm->rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
    return 2;
  }
  BroadcastOptions b;
  b.sendbuf = &id;
  b.recvbuf = &id;
  b.count = sizeof id;
  b.dtype = DataType::kUint8;
  broadcast(*comm, b);
  ncclComm_t nccl = nullptr;
  if (ncclCommInitRank(&nccl, comm->size(), id, comm->rank()) != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitRank: %s\n", ncclGetLastError(nullptr));
    return 2;
  }
  if (comm->rank() == 0) {
    std::printf("# nccl_shim_overhead: %d ranks, %d rounds of %d calls per API and size, float32 sum, host buffers\n",
                comm->size(), rounds, iters);
    std::printf("# %10s %14s %14s %14s\n", "bytes", "ringfold(us)", "nccl-api(us)", "shim(us)");
  }
  for (size_t bytes : {size_t(8), size_t(64), size_t(1024), size_t(16384), size_t(262144)}) {
    const size_t count = bytes / 4;
    std::vector<float> send(count, 1.0f), recv(count, 0.0f);
    std::vector<double> own, api;
    auto ownBlock = [&] {
      for (int i = 0; i < iters; ++i) {
        AllreduceOptions o;
        o.sendbuf = send.data();
        o.recvbuf = recv.data();
        o.count = count;
        allreduce(*comm, o);
      }
    };
    bool apiFailed = false;
    auto apiBlock = [&] {
      for (int i = 0; i < iters && !apiFailed; ++i) {
        apiFailed = ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, nccl, nullptr) != ncclSuccess;
      }
    };
    auto timed = [&](const auto& block) {
      barrier(*comm);
      const auto t0 = std::chrono::steady_clock::now();
      block();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    };
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up; the order alternates per round
      double a, n;
      if (r % 2 == 0) {
        a = timed(ownBlock);
        n = timed(apiBlock);
      } else {
        n = timed(apiBlock);
        a = timed(ownBlock);
      }
      if (apiFailed) {
        std::fprintf(stderr, "ncclAllReduce: %s\n", ncclGetLastError(nccl));
        return 1;
      }
      if (r == 0) continue;
      own.push_back(a);
      api.push_back(n);
    }
    if (comm->rank() == 0) {
      const double a = median(own), n = median(api);
      std::printf("  %10zu %14.3f %14.3f %14.3f\n", bytes, a, n, n - a);
    }
  }
  ncclCommDestroy(nccl);
  return 0;
}
