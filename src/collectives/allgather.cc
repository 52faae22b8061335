// allgather / allgatherv: argument checks, then sched::RingAllgatherSchedule run by the
// executor. Blocks land straight in recvbuf and are forwarded from there; this rank's own block
// is sent from sendbuf.
#include "collectives/allgather.h"

#include <cstring>

#include "collectives/collective_schedules.h"
#include "collectives/executor.h"

namespace ringfold {

namespace {

void ringAllgatherv(Communicator& comm, const char* name, const void* sendbuf, void* recvbuf,
                    const std::vector<size_t>& counts, DataType dtype, coll::Kind kind, uint64_t countField) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = coll::byteSize(name, r, 1, dtype);
  std::vector<size_t> offsets(n + 1, 0);
  for (int c = 0; c < n; ++c) {
    coll::byteSize(name, r, counts[c], dtype);
    offsets[c + 1] = offsets[c] + counts[c];
    if (offsets[c + 1] < offsets[c]) RF_THROW(InvalidArgument, name, " on rank ", r, ": counts overflow");
  }
  const size_t totalBytes = coll::byteSize(name, r, offsets[n], dtype);
  const size_t ownBytes = counts[r] * es;
  coll::requireBuffer(name, r, sendbuf, ownBytes, "sendbuf");
  coll::requireBuffer(name, r, recvbuf, totalBytes, "recvbuf");
  const auto* src = static_cast<const std::byte*>(sendbuf);
  auto* dst = static_cast<std::byte*>(recvbuf);
  const bool inPlace = dst != nullptr && src == dst + offsets[r] * es;
  if (!inPlace && coll::overlaps(src, ownBytes, dst, totalBytes)) {
    RF_THROW(InvalidArgument, name, " on rank ", r,
             ": sendbuf and recvbuf overlap, but in place needs sendbuf == recvbuf + this rank's offset");
  }
  coll::Operands a;
  a.src = src;
  a.srcShift = offsets[r];
  a.srcElems = counts[r];
  a.dst = dst;
  a.dstElems = offsets[n];
  a.elemSize = es;
  a.dtype = dtype;
  a.call = coll::begin(comm, {.kind = kind, .dtype = dtype, .count = countField});

  if (!inPlace && ownBytes > 0) std::memcpy(dst + offsets[r] * es, src, ownBytes);
  if (n == 1) return;
  std::vector<sched::Range> blocks(n);
  for (int c = 0; c < n; ++c) blocks[c] = sched::Range{offsets[c], counts[c]};
  const sched::RingAllgatherSchedule schedule(r, std::move(blocks), sched::segmentElems(comm.segmentBytes(), es));
  coll::execute(comm, schedule, a);
}

}  // namespace

void allgather(Communicator& comm, const AllgatherOptions& o) {
  coll::run(comm, "allgather", [&] {
    const std::vector<size_t> counts(comm.size(), o.sendCount);
    ringAllgatherv(comm, "allgather", o.sendbuf, o.recvbuf, counts, o.dtype, coll::Kind::kAllgather, o.sendCount);
  });
}

void allgatherv(Communicator& comm, const AllgathervOptions& o) {
  coll::run(comm, "allgatherv", [&] {
    if (o.recvCounts.size() != static_cast<size_t>(comm.size())) {
      RF_THROW(InvalidArgument, "allgatherv on rank ", comm.rank(), ": recvCounts has ", o.recvCounts.size(),
               " entries for ", comm.size(), " ranks");
    }
    ringAllgatherv(comm, "allgatherv", o.sendbuf, o.recvbuf, o.recvCounts, o.dtype, coll::Kind::kAllgatherv,
                   coll::hashCounts(o.recvCounts));
  });
}

}  // namespace ringfold
