// Point to point (sendrecv.h).
#include "collectives/sendrecv.h"

#include "collectives/pipeline.h"

namespace ringfold {

namespace {

// Point-to-point messages take no sequence number (check.h), only a check word.
uint64_t checkFor(size_t count, DataType dtype) {
  return coll::packCheck({.kind = coll::Kind::kSendRecv, .dtype = dtype, .count = count});
}

void requirePeer(const char* name, Communicator& comm, int peer) {
  if (peer < 0 || peer >= comm.size() || peer == comm.rank()) {
    RF_THROW(InvalidArgument, name, " on rank ", comm.rank(), ": peer ", peer, " is not another rank (size ",
             comm.size(), ")");
  }
}

}  // namespace

void send(Communicator& comm, const void* buf, size_t count, DataType dtype, int peer) {
  coll::run(comm, "send", [&] {
    requirePeer("send", comm, peer);
    const size_t bytes = coll::byteSize("send", comm.rank(), count, dtype);
    coll::requireBuffer("send", comm.rank(), buf, bytes, "buf");
    coll::Flight flight(comm, 0, 1);
    flight.postSend(peer, flight.region(buf, bytes), 0, bytes, coll::kSendRecvTag, checkFor(count, dtype));
    flight.waitAllSends();
  });
}

void recv(Communicator& comm, void* buf, size_t count, DataType dtype, int peer) {
  coll::run(comm, "recv", [&] {
    requirePeer("recv", comm, peer);
    const size_t bytes = coll::byteSize("recv", comm.rank(), count, dtype);
    coll::requireBuffer("recv", comm.rank(), buf, bytes, "buf");
    coll::Flight flight(comm, 1, 1);
    flight.postRecv(0, peer, flight.region(buf, bytes), 0, bytes, coll::kSendRecvTag, checkFor(count, dtype));
    flight.waitRecv(0);
  });
}

}  // namespace ringfold
