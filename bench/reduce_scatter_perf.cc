// reduce_scatter_perf: nccl-tests' ReduceScatter benchmark on ringfold::reduceScatter.
// count column = elements each rank receives; busbw = algbw x (n-1)/n with
// algbw = count x n x size / time.
#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"

namespace ringfold::bench {
namespace {

class ReduceScatterBench final : public BenchCollective {
 public:
  std::string program() const override { return "reduce_scatter_perf"; }
  OpColumn opColumn() const override { return OpColumn::kReduce; }
  CollCounts counts(size_t count, int n) const override {
    const size_t per = count / n;
    return {per * n, per, per, 0, per};
  }
  double algBytes(const CollCounts& c, size_t ws, int n) const override {
    return static_cast<double>(c.param * ws * n);
  }
  double busFactor(int n) const override { return static_cast<double>(n - 1) / n; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp op,
           int) override {
    ReduceScatterOptions o;
    o.sendbuf = send;
    o.recvbuf = recv;
    o.recvCount = count;
    o.dtype = t;
    o.op = op;
    reduceScatter(comm, o);
  }
  void fillInput(const CheckContext& c, void* in) const override {
    fillReduceInput(c.dtype, c.op, in, c.counts.send, 0, c.rank, c.nranks, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    return checkReduceOutput(c.dtype, c.op, out, c.counts.recv, c.rank * c.counts.recv, c.nranks,
                             c.seed);
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::ReduceScatterBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
