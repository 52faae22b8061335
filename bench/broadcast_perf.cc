// broadcast_perf: nccl-tests' Broadcast benchmark on ringfold::broadcast (-r root, -1: all).
// busbw = algbw = count x size / time.
#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"

namespace ringfold::bench {
namespace {

class BroadcastBench final : public BenchCollective {
 public:
  std::string program() const override { return "broadcast_perf"; }
  OpColumn opColumn() const override { return OpColumn::kNone; }
  bool rooted() const override { return true; }
  CollCounts counts(size_t count, int) const override { return {count, count, count, 0, 0}; }
  double algBytes(const CollCounts& c, size_t ws, int) const override {
    return static_cast<double>(c.param * ws);
  }
  double busFactor(int) const override { return 1.0; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp,
           int root) override {
    BroadcastOptions o;
    o.sendbuf = send;
    o.recvbuf = recv;
    o.count = count;
    o.dtype = t;
    o.root = root;
    broadcast(comm, o);
  }
  bool hasInput(const CheckContext& c) const override { return c.rank == c.root; }
  void fillInput(const CheckContext& c, void* in) const override {
    fillCopyInput(c.dtype, in, c.counts.send, 0, c.root, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    return checkCopyOutput(c.dtype, out, c.counts.recv, 0, c.root, c.seed);
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::BroadcastBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
