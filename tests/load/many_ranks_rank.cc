// many_ranks_rank: one rank of the many-ranks load test (tests/load/many_ranks.sh, ctest
// Load.ManyRanks*), started by ringfoldrun -np N.
//
//   ringfoldrun -np 256 load_many_ranks_rank [elements]      (default 65536 elements)
//
// Contract: bootstraps from the launcher's environment and joins the communicator
// (Communicator::fromEnvironment: the transport and local backend that RINGFOLD_TRANSPORT /
// RINGFOLD_LOCAL_TRANSPORT choose), then runs one allreduce (sum) of `elements` int64 and of
// `elements` float32, whose values are small integers so every sum is exact, and compares every
// element bit for bit with the sum it computes itself. Any mismatch or error: the message on
// stderr and exit 1. Then one more allreduce (max, and sum) gathers the figures, and rank 0
// prints one line:
//   many_ranks ok ranks=N meet_ms=... barrier_ms=... allreduce_ms=... rss_max_kib=...
//   rss_sum_kib=...
// meet_ms: from LOAD_T0_NS (CLOCK_REALTIME nanoseconds, set by whoever started ringfoldrun; else
// this process's start) to the communicator being connected, the slowest rank; barrier_ms: to the
// barrier after it; allreduce_ms: the slowest rank's two allreduces; rss: getrusage peak RSS
// (private and touched shared pages) of the ranks.
#include <sys/resource.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/barrier.h"
#include "collectives/communicator.h"

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void sum(ringfold::Communicator& comm, const void* in, void* out, size_t n, ringfold::DataType t,
         ringfold::ReduceOp op = ringfold::ReduceOp::kSum) {
  ringfold::AllreduceOptions o;
  o.sendbuf = in;
  o.recvbuf = out;
  o.count = n;
  o.dtype = t;
  o.op = op;
  ringfold::allreduce(comm, o);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t start = nowNs();
  const char* t0env = std::getenv("LOAD_T0_NS");
  const int64_t t0 = t0env != nullptr ? std::strtoll(t0env, nullptr, 10) : start;
  const size_t elements = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 65536;
  int rank = -1;
  try {
    auto comm = ringfold::Communicator::fromEnvironment();
    const int64_t met = nowNs();
    rank = comm->rank();
    const int64_t n = comm->size();
    ringfold::barrier(*comm);
    const int64_t barrier = nowNs();

    std::vector<int64_t> ints(elements), intsOut(elements, -1);
    std::vector<float> floats(elements), floatsOut(elements, -1.0f);
    for (size_t i = 0; i < elements; ++i) {
      ints[i] = static_cast<int64_t>(rank + 1) * static_cast<int64_t>(i % 1009 + 1);
      floats[i] = static_cast<float>((rank % 7 + 1) * static_cast<int>(i % 5));
    }
    const int64_t a0 = nowNs();
    sum(*comm, ints.data(), intsOut.data(), elements, ringfold::DataType::kInt64);
    sum(*comm, floats.data(), floatsOut.data(), elements, ringfold::DataType::kFloat32);
    const int64_t a1 = nowNs();

    int64_t sevens = 0;  // sum over ranks of (rank % 7 + 1)
    for (int64_t r = 0; r < n; ++r) sevens += r % 7 + 1;
    for (size_t i = 0; i < elements; ++i) {
      const int64_t wantInt = n * (n + 1) / 2 * static_cast<int64_t>(i % 1009 + 1);
      const float wantFloat = static_cast<float>(sevens * static_cast<int64_t>(i % 5));
      if (intsOut[i] != wantInt || std::memcmp(&floatsOut[i], &wantFloat, sizeof(float)) != 0) {
        std::fprintf(stderr,
                     "many_ranks: rank %d element %zu: int64 %" PRId64 " (want %" PRId64
                     "), float32 %.9g (want %.9g)\n",
                     rank, i, intsOut[i], wantInt, static_cast<double>(floatsOut[i]),
                     static_cast<double>(wantFloat));
        return 1;
      }
    }

    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const int64_t rssKib = ru.ru_maxrss;
    std::vector<int64_t> mine = {(met - t0) / 1000, (barrier - t0) / 1000, (a1 - a0) / 1000, rssKib};
    std::vector<int64_t> maxes(mine.size());
    sum(*comm, mine.data(), maxes.data(), mine.size(), ringfold::DataType::kInt64, ringfold::ReduceOp::kMax);
    int64_t rssSum = 0;
    sum(*comm, &rssKib, &rssSum, 1, ringfold::DataType::kInt64);
    if (rank == 0) {
      std::printf("many_ranks ok ranks=%" PRId64 " elements=%zu meet_ms=%.1f barrier_ms=%.1f allreduce_ms=%.1f "
                  "rss_max_kib=%" PRId64 " rss_sum_kib=%" PRId64 "\n",
                  n, elements, maxes[0] / 1000.0, maxes[1] / 1000.0, maxes[2] / 1000.0, maxes[3], rssSum);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "many_ranks: rank %d failed: %s\n", rank, e.what());
    return 1;
  }
}
