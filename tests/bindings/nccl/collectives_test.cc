// The NCCL-API library (libnccl.so.2) in host-memory mode: forked jobs of 2, 3 and 5 ranks run
// every collective with every datatype, every reduction operator (PreMulSum with a host and a
// "device" scalar included), in place and out of place, and compare each result exactly with a
// reference computed here. Point to point in groups (all-to-all as torch builds it) too.
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "tests/bindings/nccl/job.h"
#include "tests/bindings/nccl/values.h"

namespace {

using namespace ncclt;
using namespace std::chrono_literals;

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                                 ncclFloat16, ncclFloat32, ncclFloat64,  ncclBfloat16,   ncclFloat8e4m3, ncclFloat8e5m2};

enum class Red { kSum, kProd, kMax, kMin, kAvg, kPreMulHost, kPreMulDevice };
const Red kReds[] = {Red::kSum, Red::kProd, Red::kMax, Red::kMin, Red::kAvg, Red::kPreMulHost, Red::kPreMulDevice};
const char* redName(Red r) {
  static const char* n[] = {"sum", "prod", "max", "min", "avg", "premulsum(host)", "premulsum(device)"};
  return n[static_cast<int>(r)];
}

bool fp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

// Rank r's element i for reduction `red` (small integers: every sum, product and average is exact;
// in the 8-bit floats too, every partial result, whatever the order of the folds).
double input(Red red, ncclDataType_t t, int r, int n, size_t i) {
  if (fp8(t)) {
    switch (red) {
      case Red::kProd: return double((i + r) % 2 + 1);           // products: powers of two <= 32
      case Red::kAvg: return r == 0 ? double(n * ((i * 7) % 3)) : 0.0;  // sums <= 10
      case Red::kMax:
      case Red::kMin: return double((i * 7 + r * 3) % 5 + 1) - 3;
      default: return double((i * 7 + r * 3) % 2);              // sums <= 5, premulsum <= 10
    }
  }
  switch (red) {
    case Red::kProd: return double((i + r) % 2 + 1);
    case Red::kAvg: return double(n * ((i * 7) % 3 + r));
    case Red::kMax:
    case Red::kMin: return double((i * 7 + r * 3) % 5 + 1) - (isSigned(t) ? 3 : 0);
    default: return double((i * 7 + r * 3) % 5 + 1);
  }
}
double scalarOf(int r) { return double(r % 2 + 1); }

double reference(Red red, ncclDataType_t t, int n, size_t i) {
  double acc = input(red, t, 0, n, i) * ((red == Red::kPreMulHost || red == Red::kPreMulDevice) ? scalarOf(0) : 1);
  for (int r = 1; r < n; ++r) {
    const double v = input(red, t, r, n, i);
    switch (red) {
      case Red::kProd: acc *= v; break;
      case Red::kMax: acc = std::max(acc, v); break;
      case Red::kMin: acc = std::min(acc, v); break;
      case Red::kPreMulHost:
      case Red::kPreMulDevice: acc += v * scalarOf(r); break;
      default: acc += v;
    }
  }
  return red == Red::kAvg ? acc / n : acc;
}

// The ncclRedOp_t for `red` (PreMulSum operators are created here; the caller destroys them).
ncclRedOp_t opFor(Red red, ncclDataType_t t, int rank, ncclComm_t comm, std::vector<char>& scalar) {
  switch (red) {
    case Red::kSum: return ncclSum;
    case Red::kProd: return ncclProd;
    case Red::kMax: return ncclMax;
    case Red::kMin: return ncclMin;
    case Red::kAvg: return ncclAvg;
    default: break;
  }
  scalar.assign(8, 0);
  putValue(t, scalar.data(), 0, scalarOf(rank));
  ncclRedOp_t op{};
  NCCLOK(ncclRedOpCreatePreMulSum(&op, scalar.data(), t,
                                  red == Red::kPreMulHost ? ncclScalarHostImmediate : ncclScalarDevice, comm));
  if (red == Red::kPreMulHost) put(t, scalar.data(), 0, 99);  // read at creation: later changes do not count
  return op;
}

std::vector<char> buffer(ncclDataType_t t, size_t count) { return std::vector<char>(count * typeSize(t) + 8, 0); }

// Fills `count` elements from `at` with a sentinel that no result takes.
void poison(ncclDataType_t t, void* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) put(t, buf, i, fp8(t) ? 0xEE : 77);
}

int reductions(int rank, int n, ncclComm_t comm, ncclDataType_t t, size_t count) {
  for (Red red : kReds) {
    for (bool inPlace : {false, true}) {
      // allreduce
      {
        std::vector<char> scalar;
        const ncclRedOp_t op = opFor(red, t, rank, comm, scalar);
        auto send = buffer(t, count), recv = buffer(t, count);
        for (size_t i = 0; i < count; ++i) putValue(t, send.data(), i, input(red, t, rank, n, i));
        void* out = inPlace ? send.data() : recv.data();
        NCCLOK(ncclAllReduce(send.data(), out, count, t, op, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          CHECK(getValue(t, out, i) == reference(red, t, n, i), "allreduce %s %s %s n=%d i=%zu: %g != %g", typeName(t),
                redName(red), inPlace ? "in place" : "out of place", n, i, getValue(t, out, i), reference(red, t, n, i));
          if (getValue(t, out, i) != reference(red, t, n, i)) break;
        }
        // reduce to root n-1
        const int root = n - 1;
        for (size_t i = 0; i < count; ++i) putValue(t, send.data(), i, input(red, t, rank, n, i));
        poison(t, recv.data(), count);
        NCCLOK(ncclReduce(send.data(), out, count, t, op, root, comm, nullptr));
        if (rank == root) {
          for (size_t i = 0; i < count; ++i) {
            CHECK(getValue(t, out, i) == reference(red, t, n, i), "reduce %s %s %s i=%zu: %g != %g", typeName(t),
                  redName(red), inPlace ? "in place" : "out of place", i, getValue(t, out, i), reference(red, t, n, i));
            if (getValue(t, out, i) != reference(red, t, n, i)) break;
          }
        } else if (!inPlace) {
          CHECK(get(t, recv.data(), 0) == (fp8(t) ? 0xEE : 77), "reduce wrote a non-root's recvbuff");
        }
        if (red == Red::kPreMulHost || red == Red::kPreMulDevice) NCCLOK(ncclRedOpDestroy(op, comm));
      }
      // reduce-scatter: in place when recvbuff = sendbuff + rank * recvcount
      {
        std::vector<char> scalar;
        const ncclRedOp_t op = opFor(red, t, rank, comm, scalar);
        auto send = buffer(t, count * n), recv = buffer(t, count);
        for (size_t i = 0; i < count * n; ++i) putValue(t, send.data(), i, input(red, t, rank, n, i));
        void* out = inPlace ? send.data() + rank * count * typeSize(t) : recv.data();
        NCCLOK(ncclReduceScatter(send.data(), out, count, t, op, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          const double want = reference(red, t, n, rank * count + i);
          CHECK(getValue(t, out, i) == want, "reducescatter %s %s %s i=%zu: %g != %g", typeName(t), redName(red),
                inPlace ? "in place" : "out of place", i, getValue(t, out, i), want);
          if (getValue(t, out, i) != want) break;
        }
        if (red == Red::kPreMulHost || red == Red::kPreMulDevice) NCCLOK(ncclRedOpDestroy(op, comm));
      }
    }
  }
  return 0;
}

double pattern(int r, size_t i) { return double((r * 31 + i * 7) % 100 + 1); }

int copies(int rank, int n, ncclComm_t comm, ncclDataType_t t, size_t count) {
  const size_t e = typeSize(t);
  for (bool inPlace : {false, true}) {
    const char* where = inPlace ? "in place" : "out of place";
    // broadcast from root n-1 (ncclBcast in place, ncclBroadcast otherwise)
    {
      const int root = n - 1;
      auto send = buffer(t, count), recv = buffer(t, count);
      for (size_t i = 0; i < count; ++i) put(t, send.data(), i, rank == root ? pattern(root, i) : 0);
      if (inPlace) {
        NCCLOK(ncclBcast(send.data(), count, t, root, comm, nullptr));
      } else {
        NCCLOK(ncclBroadcast(send.data(), recv.data(), count, t, root, comm, nullptr));
      }
      const char* out = inPlace ? send.data() : recv.data();
      for (size_t i = 0; i < count; ++i) {
        CHECK(get(t, out, i) == pattern(root, i), "broadcast %s %s i=%zu", typeName(t), where, i);
        if (get(t, out, i) != pattern(root, i)) break;
      }
    }
    // allgather: in place when sendbuff = recvbuff + rank * sendcount
    {
      auto send = buffer(t, count), recv = buffer(t, count * n);
      char* in = inPlace ? recv.data() + rank * count * e : send.data();
      for (size_t i = 0; i < count; ++i) put(t, in, i, pattern(rank, i));
      NCCLOK(ncclAllGather(in, recv.data(), count, t, comm, nullptr));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          CHECK(get(t, recv.data(), r * count + i) == pattern(r, i), "allgather %s %s r=%d i=%zu", typeName(t), where, r, i);
        }
      }
    }
    // gather to root 1 % n, scatter from root 0
    {
      const int root = 1 % n;
      auto send = buffer(t, count), recv = buffer(t, count * n);
      char* in = inPlace && rank == root ? recv.data() + rank * count * e : send.data();
      for (size_t i = 0; i < count; ++i) put(t, in, i, pattern(rank, i));
      NCCLOK(ncclGather(in, recv.data(), count, t, root, comm, nullptr));
      if (rank == root) {
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) {
            CHECK(get(t, recv.data(), r * count + i) == pattern(r, i), "gather %s %s r=%d i=%zu", typeName(t), where, r, i);
          }
        }
      }
    }
    {
      const int root = 0;
      auto send = buffer(t, count * n), recv = buffer(t, count);
      for (size_t i = 0; i < count * n; ++i) put(t, send.data(), i, rank == root ? pattern(int(i / count), i % count) : 0);
      char* out = inPlace && rank == root ? send.data() + rank * count * e : recv.data();
      NCCLOK(ncclScatter(send.data(), out, count, t, root, comm, nullptr));
      for (size_t i = 0; i < count; ++i) {
        CHECK(get(t, out, i) == pattern(rank, i), "scatter %s %s i=%zu", typeName(t), where, i);
      }
    }
  }
  // all-to-all: block p of rank r's input goes to rank p's block r
  {
    auto send = buffer(t, count * n), recv = buffer(t, count * n);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < count; ++i) put(t, send.data(), p * count + i, pattern(rank * n + p, i));
    }
    NCCLOK(ncclAlltoAll(send.data(), recv.data(), count, t, comm, nullptr));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        CHECK(get(t, recv.data(), r * count + i) == pattern(r * n + rank, i), "alltoall %s r=%d i=%zu", typeName(t), r, i);
      }
    }
  }
  return 0;
}

// torch's all-to-all: one group in which every rank posts a send and a receive for every rank
// (itself included), with sizes that differ per pair; then two messages to one peer in one
// group (they arrive in order), and blocking send/recv pairs.
int pointToPoint(int rank, int n, ncclComm_t comm) {
  auto countOf = [](int from, int to) { return size_t(10 + from + 2 * to); };
  std::vector<std::vector<int32_t>> out(n), in(n);
  NCCLOK(ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    out[p].resize(countOf(rank, p));
    for (size_t i = 0; i < out[p].size(); ++i) out[p][i] = rank * 1000 + p * 10 + int(i % 7);
    in[p].assign(countOf(p, rank), -1);
    NCCLOK(ncclSend(out[p].data(), out[p].size(), ncclInt32, p, comm, nullptr));
    NCCLOK(ncclRecv(in[p].data(), in[p].size(), ncclInt32, p, comm, nullptr));
  }
  NCCLOK(ncclGroupEnd());
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < in[p].size(); ++i) {
      CHECK(in[p][i] == p * 1000 + rank * 10 + int(i % 7), "grouped all-to-all from %d i=%zu: %d", p, i, in[p][i]);
    }
  }
  // A ring: two messages to the next rank in one group, in order.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  std::vector<double> a(100, rank), b(50, rank + 0.5), ra(100, -1), rb(50, -1);
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclRecv(ra.data(), ra.size(), ncclFloat64, prev, comm, nullptr));
  NCCLOK(ncclSend(a.data(), a.size(), ncclFloat64, next, comm, nullptr));
  NCCLOK(ncclRecv(rb.data(), rb.size(), ncclFloat64, prev, comm, nullptr));
  NCCLOK(ncclSend(b.data(), b.size(), ncclFloat64, next, comm, nullptr));
  NCCLOK(ncclGroupEnd());
  CHECK(ra[99] == prev && rb[49] == prev + 0.5, "ring in a group: %g %g", ra[99], rb[49]);
  // A large grouped exchange (several MiB each way), then blocking send/recv between pairs.
  std::vector<float> big(1 << 20, float(rank)), bigIn(1 << 20, -1);
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclSend(big.data(), big.size(), ncclFloat32, next, comm, nullptr));
  NCCLOK(ncclRecv(bigIn.data(), bigIn.size(), ncclFloat32, prev, comm, nullptr));
  NCCLOK(ncclGroupEnd());
  CHECK(bigIn.front() == float(prev) && bigIn.back() == float(prev), "large grouped exchange");
  if (n % 2 == 0) {
    const int peer = rank ^ 1;
    int64_t v = rank + 40, w = -1;
    if (rank % 2 == 0) {
      NCCLOK(ncclSend(&v, 1, ncclInt64, peer, comm, nullptr));
      NCCLOK(ncclRecv(&w, 1, ncclInt64, peer, comm, nullptr));
    } else {
      NCCLOK(ncclRecv(&w, 1, ncclInt64, peer, comm, nullptr));
      NCCLOK(ncclSend(&v, 1, ncclInt64, peer, comm, nullptr));
    }
    CHECK(w == peer + 40, "blocking send/recv: %lld", static_cast<long long>(w));
  }
  return 0;
}

// Grouped collectives (torch's coalesced calls): several allreduces in one group.
int groupedCollectives(int rank, int n, ncclComm_t comm) {
  std::vector<int32_t> a(33, rank + 1), b(1000, 2 * rank);
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(a.data(), a.data(), a.size(), ncclInt32, ncclSum, comm, nullptr));
  NCCLOK(ncclAllReduce(b.data(), b.data(), b.size(), ncclInt32, ncclMax, comm, nullptr));
  NCCLOK(ncclGroupEnd());
  CHECK(a[32] == n * (n + 1) / 2 && b[999] == 2 * (n - 1), "grouped allreduces: %d %d", a[32], b[999]);
  return 0;
}

int everything(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  if (!comm) return 1;
  int count = 0, me = -1;
  NCCLOK(ncclCommCount(comm, &count));
  NCCLOK(ncclCommUserRank(comm, &me));
  CHECK(count == n && me == rank, "count %d rank %d", count, me);
  for (ncclDataType_t t : kTypes) {
    reductions(rank, n, comm, t, 37);
    copies(rank, n, comm, t, 37);
  }
  // One large allreduce (the ring's pipelined rounds) and zero-count calls.
  std::vector<float> big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float((i + rank) % 13);
  NCCLOK(ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat32, ncclSum, comm, nullptr));
  for (size_t i = 0; i < big.size(); i += 997) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += double((i + r) % 13);
    CHECK(big[i] == want, "large allreduce i=%zu: %g != %g", i, big[i], want);
  }
  NCCLOK(ncclAllReduce(big.data(), big.data(), 0, ncclFloat32, ncclSum, comm, nullptr));
  pointToPoint(rank, n, comm);
  groupedCollectives(rank, n, comm);
  NCCLOK(ncclCommFinalize(comm));
  NCCLOK(ncclCommDestroy(comm));
  return 0;
}

TEST(NcclApiCollectives, EveryCollectiveDtypeAndOpAt2Ranks) {
  const JobResult r = runJob(2, everything, 100s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

TEST(NcclApiCollectives, EveryCollectiveDtypeAndOpAt3Ranks) {
  const JobResult r = runJob(3, everything, 100s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

TEST(NcclApiCollectives, EveryCollectiveDtypeAndOpAt5Ranks) {
  const JobResult r = runJob(5, everything, 150s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
