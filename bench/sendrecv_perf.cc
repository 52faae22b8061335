// sendrecv_perf: nccl-tests' SendRecv benchmark. Every rank sends `count` elements to rank+1
// and at the same time receives as many from rank-1 (a ring shift), through the
// communicator's transport connections: both transfers are posted before either is waited on.
// busbw = algbw = count x size / time. As in nccl-tests, the in-place column (sending from and
// receiving into the same buffer) is timed but not checked (#wrong N/A), and the redop column
// iterates over -o without using it.
#include <cstring>
#include <memory>

#include "collectives/check.h"
#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"
#include "transport/connection.h"
#include "transport/device.h"

namespace ringfold::bench {
namespace {

class SendRecvBench final : public BenchCollective {
 public:
  std::string program() const override { return "sendrecv_perf"; }
  OpColumn opColumn() const override { return OpColumn::kUnused; }
  CollCounts counts(size_t count, int) const override { return {count, count, count, 0, 0}; }
  double algBytes(const CollCounts& c, size_t ws, int) const override {
    return static_cast<double>(c.param * ws);
  }
  double busFactor(int) const override { return 1.0; }
  bool checkedInPlace() const override { return false; }

  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp,
           int) override {
    const size_t bytes = count * dataTypeSize(t);
    const int n = comm.size();
    const int rank = comm.rank();
    // A sequence number of its own, so no collective's messages can pair up with these, and
    // the library's check word, so ranks that disagree on the count are caught.
    const uint64_t tag = coll::collectiveTag(comm.nextSequence(), 0);
    const uint64_t check = coll::packCheck({coll::Kind::kSendRecv, t, ReduceOp::kSum, 0, count});
    if (n == 1) {
      if (send != recv && bytes) std::memmove(recv, send, bytes);
      return;
    }
    if (bytes == 0) return;
    comm.guarded("sendrecv", [&] {
      auto& device = comm.device();
      auto sendRegion = device.registerMemory(const_cast<void*>(send), bytes);
      auto recvRegion = device.registerMemory(recv, bytes);
      auto recvReq = comm.peer((rank - 1 + n) % n).irecv(*recvRegion, 0, bytes, tag, check);
      auto sendReq = comm.peer((rank + 1) % n).isend(*sendRegion, 0, bytes, tag, check);
      recvReq->wait(comm.timeout());
      sendReq->wait(comm.timeout());
    });
  }
  void fillInput(const CheckContext& c, void* in) const override {
    fillCopyInput(c.dtype, in, c.counts.send, 0, c.rank, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    return checkCopyOutput(c.dtype, out, c.counts.recv, 0, (c.rank - 1 + c.nranks) % c.nranks,
                           c.seed);
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::SendRecvBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
