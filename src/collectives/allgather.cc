// allgather / allgatherv: pipelined ring (schedules.h). Blocks land straight in recvbuf and are
// forwarded from there; this rank's own block is sent from sendbuf.
#include "collectives/allgather.h"

#include <cstring>

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

namespace {

constexpr size_t kRecvSlots = 4;
constexpr size_t kSendWindow = 16;

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
  const uint64_t sequence = comm.nextSequence();
  coll::CheckFields fields;
  fields.kind = kind;
  fields.dtype = dtype;
  fields.count = countField;
  const uint64_t check = coll::packCheck(fields);

  if (!inPlace && ownBytes > 0) std::memcpy(dst + offsets[r] * es, src, ownBytes);
  if (n == 1) return;

  const int left = sched::mod(r - 1, n), right = sched::mod(r + 1, n);
  const size_t segE = sched::segmentElems(comm.segmentBytes(), es);
  coll::Flight flight(comm, kRecvSlots, kSendWindow);
  auto& srcRegion = flight.region(src, ownBytes);
  auto& dstRegion = flight.region(dst, totalBytes);
  auto blockOf = [&](int c) { return sched::Range{offsets[c], counts[c]}; };
  auto tagOf = [&](int s) { return coll::collectiveTag(sequence, s); };

  struct Unit {
    int s = 0;
    size_t k = 0;
  };
  auto advance = [&](Unit& u) {
    if (++u.k == sched::segmentCount(counts[sched::ringGatherRecvChunk(r, u.s, n)], segE)) {
      u.k = 0;
      ++u.s;
    }
  };
  const sched::Range own = blockOf(r);
  const size_t segments0 = sched::segmentCount(own.length, segE);
  size_t sent0 = 0, posted = 0, processed = 0;
  Unit post, proc;
  auto topUpStep0 = [&](bool all = false) {
    while (sent0 < segments0 && (all || sent0 < processed + kRecvSlots)) {
      const sched::Range sg = sched::segment(own, segE, sent0);
      flight.postSend(right, srcRegion, (sg.offset - own.offset) * es, sg.length * es, tagOf(0), check);
      ++sent0;
    }
  };
  auto postReceives = [&] {
    while (post.s < n - 1 && posted < processed + kRecvSlots) {
      const sched::Range sg = sched::segment(blockOf(sched::ringGatherRecvChunk(r, post.s, n)), segE, post.k);
      flight.postRecv(posted % kRecvSlots, left, dstRegion, sg.offset * es, sg.length * es, tagOf(post.s), check);
      advance(post);
      ++posted;
    }
  };
  topUpStep0();
  postReceives();
  while (proc.s < n - 1) {
    const sched::Range sg = sched::segment(blockOf(sched::ringGatherRecvChunk(r, proc.s, n)), segE, proc.k);
    flight.waitRecv(processed % kRecvSlots);
    if (proc.s < n - 2) {
      flight.postSend(right, dstRegion, sg.offset * es, sg.length * es, tagOf(proc.s + 1), check);
    }
    advance(proc);
    ++processed;
    topUpStep0();
    postReceives();
  }
  topUpStep0(true);  // a block with more segments than this rank receives
    flight.waitAllSends();
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
