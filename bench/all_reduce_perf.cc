// all_reduce_perf: nccl-tests' AllReduce benchmark on ringfold::allreduce.
// busbw = algbw x 2(n-1)/n, algbw = count x element size / time.
#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"

namespace ringfold::bench {
namespace {

class AllReduceBench final : public BenchCollective {
 public:
  std::string program() const override { return "all_reduce_perf"; }
  OpColumn opColumn() const override { return OpColumn::kReduce; }
  CollCounts counts(size_t count, int) const override { return {count, count, count, 0, 0}; }
  double algBytes(const CollCounts& c, size_t ws, int) const override {
    return static_cast<double>(c.param * ws);
  }
  double busFactor(int n) const override { return 2.0 * (n - 1) / n; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp op,
           int) override {
    AllreduceOptions o;
    o.sendbuf = send;
    o.recvbuf = recv;
    o.count = count;
    o.dtype = t;
    o.op = op;
    allreduce(comm, o);
  }
  void fillInput(const CheckContext& c, void* in) const override {
    fillReduceInput(c.dtype, c.op, in, c.counts.send, 0, c.rank, c.nranks, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    return checkReduceOutput(c.dtype, c.op, out, c.counts.recv, 0, c.nranks, c.seed);
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::AllReduceBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
