// broadcast: pipelined chain root -> root+1 -> ... -> root-1, after an empty hello from every
// rank to the next (schedules.h explains why).
#include "collectives/broadcast.h"

#include <cstring>

#include "collectives/pipeline.h"
#include "collectives/schedules.h"

namespace ringfold {

namespace {
constexpr size_t kRecvSlots = 4;
constexpr size_t kSendWindow = 16;
}  // namespace

void broadcast(Communicator& comm, const BroadcastOptions& o) {
  coll::run(comm, "broadcast", [&] {
    const char* name = "broadcast";
    const int n = comm.size(), r = comm.rank();
    if (o.root < 0 || o.root >= n) {
      RF_THROW(InvalidArgument, name, " on rank ", r, ": root ", o.root, " is not a rank of this communicator (size ",
               n, ")");
    }
    const size_t bytes = coll::byteSize(name, r, o.count, o.dtype);
    const bool isRoot = r == o.root;
    if (isRoot) coll::requireBuffer(name, r, o.sendbuf, bytes, "sendbuf (at the root)");
    coll::requireBuffer(name, r, o.recvbuf, bytes, "recvbuf");
    if (isRoot && o.sendbuf != o.recvbuf && coll::overlaps(o.sendbuf, bytes, o.recvbuf, bytes)) {
      RF_THROW(InvalidArgument, name, " on rank ", r,
               ": sendbuf and recvbuf overlap without being equal (in place needs sendbuf == recvbuf)");
    }
    const coll::Call call = coll::begin(
        comm, {.kind = coll::Kind::kBroadcast, .dtype = o.dtype, .root = static_cast<uint32_t>(o.root), .count = o.count});
    const uint64_t check = call.check;
    const uint64_t tag = call.tag(0);
    auto* dst = static_cast<std::byte*>(o.recvbuf);
    const auto* src = static_cast<const std::byte*>(o.sendbuf);

    if (isRoot && src != dst && bytes > 0) std::memcpy(dst, src, bytes);
    if (n == 1) return;

    const size_t es = dataTypeSize(o.dtype);
    const size_t segE = sched::segmentElems(comm.segmentBytes(), es);
    const size_t segments = sched::segmentCount(o.count, segE);
    const sched::Range all{0, o.count};
    const int position = sched::mod(r - o.root, n);
    const int next = sched::mod(r + 1, n), prev = sched::mod(r - 1, n);
    coll::Flight flight(comm, kRecvSlots, kSendWindow);
    auto& empty = flight.region(nullptr, 0);

    // Every rank first sends an empty hello to rank+1 and receives one from rank-1, so each
    // rank compares its arguments with its neighbour's before anything else (a root that
    // believes it is not the root would otherwise leave every rank waiting for data).
    flight.postRecv(0, prev, empty, 0, 0, tag, check);
    flight.postSend(next, empty, 0, 0, tag, check);
    if (isRoot) {
      auto& srcRegion = flight.region(src, bytes);
      for (size_t k = 0; k < segments; ++k) {
        const sched::Range sg = sched::segment(all, segE, k);
        flight.postSend(next, srcRegion, sg.offset * es, sg.length * es, tag, check);
      }
      flight.waitRecv(0);
      flight.waitAllSends();
      return;
    }
    flight.waitRecv(0);
    auto& dstRegion = flight.region(dst, bytes);
    const bool last = position == n - 1;
    size_t posted = 0;
    auto postReceives = [&](size_t processed) {
      while (posted < segments && posted < processed + kRecvSlots) {
        const sched::Range sg = sched::segment(all, segE, posted);
        flight.postRecv(posted % kRecvSlots, prev, dstRegion, sg.offset * es, sg.length * es, tag, check);
        ++posted;
      }
    };
    postReceives(0);
    for (size_t k = 0; k < segments; ++k) {
      flight.waitRecv(k % kRecvSlots);
      if (!last) {
        const sched::Range sg = sched::segment(all, segE, k);
        flight.postSend(next, dstRegion, sg.offset * es, sg.length * es, tag, check);
      }
      postReceives(k + 1);
    }
    flight.waitAllSends();
  });
}

}  // namespace ringfold
