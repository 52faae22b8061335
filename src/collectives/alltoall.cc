// alltoall with splits: every receive posted up front into its block of recvbuf, then sends in
// pairwise order r+1, r+2, ... (each pair exchanges exactly one message, even an empty one, so
// every pair compares its counts).
#include "collectives/alltoall.h"

#include <cstring>

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

namespace {

std::vector<size_t> prefixOffsets(const char* name, int rank, const std::vector<size_t>& counts, DataType dtype) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) {
    coll::byteSize(name, rank, counts[i], dtype);
    offsets[i + 1] = offsets[i] + counts[i];
    if (offsets[i + 1] < offsets[i]) RF_THROW(InvalidArgument, name, " on rank ", rank, ": counts overflow");
  }
  coll::byteSize(name, rank, offsets.back(), dtype);
  return offsets;
}

}  // namespace

void alltoall(Communicator& comm, const AlltoallOptions& o) {
  coll::run(comm, "alltoall", [&] {
    const char* name = "alltoall";
    const int n = comm.size(), r = comm.rank();
    if (o.sendCounts.size() != static_cast<size_t>(n) || o.recvCounts.size() != static_cast<size_t>(n)) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": sendCounts and recvCounts need ", n, " entries (have ",
               o.sendCounts.size(), " and ", o.recvCounts.size(), ")");
    }
    const size_t es = coll::byteSize(name, r, 1, o.dtype);
    const auto sendOff = prefixOffsets(name, r, o.sendCounts, o.dtype);
    const auto recvOff = prefixOffsets(name, r, o.recvCounts, o.dtype);
    const size_t sendBytes = sendOff.back() * es, recvBytes = recvOff.back() * es;
    coll::requireBuffer(name, r, o.sendbuf, sendBytes, "sendbuf");
    coll::requireBuffer(name, r, o.recvbuf, recvBytes, "recvbuf");
    const bool inPlace = o.sendbuf == o.recvbuf && o.sendbuf != nullptr;
    if (inPlace && o.sendCounts != o.recvCounts) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": in place (sendbuf == recvbuf) needs sendCounts == recvCounts");
    }
    if (!inPlace && coll::overlaps(o.sendbuf, sendBytes, o.recvbuf, recvBytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": sendbuf and recvbuf overlap without being equal");
    }
    if (o.sendCounts[r] != o.recvCounts[r]) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": sendCounts[", r, "]=", o.sendCounts[r],
               " differs from recvCounts[", r, "]=", o.recvCounts[r], " (what a rank sends itself)");
    }
    // Each message carries the check word of its own count.
    const uint64_t tag = coll::begin(comm, {.kind = coll::Kind::kAlltoall}).tag(0);
    auto checkFor = [&](size_t count) {
      return coll::packCheck({.kind = coll::Kind::kAlltoall, .dtype = o.dtype, .count = count});
    };
    auto* dst = static_cast<std::byte*>(o.recvbuf);
    const std::byte* src = static_cast<const std::byte*>(o.sendbuf);
    if (inPlace && n > 1 && sendBytes > 0) {
      // Blocks arrive before the block in their place has left: send from a copy.
      std::byte* copy = comm.scratch(sendBytes);
      std::memcpy(copy, src, sendBytes);
      src = copy;
    }
    if (!inPlace && o.sendCounts[r] > 0) {
      std::memcpy(dst + recvOff[r] * es, src + sendOff[r] * es, o.sendCounts[r] * es);
    }
    if (n == 1) return;
    coll::Flight flight(comm, n - 1, n - 1);
    auto& srcRegion = flight.region(src, sendBytes);
    auto& dstRegion = flight.region(dst, recvBytes);
    for (int i = 1; i < n; ++i) {
      const int p = sched::mod(r - i, n);
      flight.postRecv(i - 1, p, dstRegion, recvOff[p] * es, o.recvCounts[p] * es, tag, checkFor(o.recvCounts[p]));
    }
    for (int i = 1; i < n; ++i) {
      const int p = sched::mod(r + i, n);
      flight.postSend(p, srcRegion, sendOff[p] * es, o.sendCounts[p] * es, tag, checkFor(o.sendCounts[p]));
    }
    for (int i = 1; i < n; ++i) flight.waitRecv(i - 1);
    flight.waitAllSends();
  });
}

std::vector<size_t> alltoallExchangeCounts(Communicator& comm, const std::vector<size_t>& sendCounts) {
  std::vector<size_t> recvCounts(comm.size(), 0);
  coll::run(comm, "alltoall count exchange", [&] {
    const int n = comm.size(), r = comm.rank();
    if (sendCounts.size() != static_cast<size_t>(n)) {
      RF_THROW(InvalidArgument, "alltoallExchangeCounts on rank ", r, ": sendCounts has ", sendCounts.size(),
               " entries for ", n, " ranks");
    }
    const coll::Call call = coll::begin(comm, {.kind = coll::Kind::kAlltoallCounts, .count = static_cast<uint64_t>(n)});
    const uint64_t tag = call.tag(0), check = call.check;
    // In scratch, not on this stack: on failure the device is aborted after unwinding, and a
    // receive must not land in memory that is already gone.
    auto* out = reinterpret_cast<uint64_t*>(comm.scratch(2 * n * sizeof(uint64_t)));
    uint64_t* in = out + n;
    for (int p = 0; p < n; ++p) out[p] = sendCounts[p];
    in[r] = out[r];
    if (n > 1) {
      coll::Flight flight(comm, n - 1, n - 1);
      auto& outRegion = flight.region(out, n * sizeof(uint64_t));
      auto& inRegion = flight.region(in, n * sizeof(uint64_t));
      for (int i = 1; i < n; ++i) {
        const int p = sched::mod(r - i, n);
        flight.postRecv(i - 1, p, inRegion, p * sizeof(uint64_t), sizeof(uint64_t), tag, check);
      }
      for (int i = 1; i < n; ++i) {
        const int p = sched::mod(r + i, n);
        flight.postSend(p, outRegion, p * sizeof(uint64_t), sizeof(uint64_t), tag, check);
      }
      for (int i = 1; i < n; ++i) flight.waitRecv(i - 1);
      flight.waitAllSends();
    }
    for (int p = 0; p < n; ++p) recvCounts[p] = static_cast<size_t>(in[p]);
  });
  return recvCounts;
}

}  // namespace ringfold
