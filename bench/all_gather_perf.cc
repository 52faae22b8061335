// all_gather_perf: nccl-tests' AllGather benchmark on ringfold::allgather.
// count column = elements per rank; busbw = algbw x (n-1)/n, algbw = count x n x size / time.
#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"

namespace ringfold::bench {
namespace {

class AllGatherBench final : public BenchCollective {
 public:
  std::string program() const override { return "all_gather_perf"; }
  OpColumn opColumn() const override { return OpColumn::kNone; }
  CollCounts counts(size_t count, int n) const override {
    const size_t per = count / n;
    return {per, per * n, per, per, 0};
  }
  double algBytes(const CollCounts& c, size_t ws, int n) const override {
    return static_cast<double>(c.param * ws * n);
  }
  double busFactor(int n) const override { return static_cast<double>(n - 1) / n; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp,
           int) override {
    AllgatherOptions o;
    o.sendbuf = send;
    o.recvbuf = recv;
    o.sendCount = count;
    o.dtype = t;
    allgather(comm, o);
  }
  void fillInput(const CheckContext& c, void* in) const override {
    fillCopyInput(c.dtype, in, c.counts.send, 0, c.rank, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    const size_t bytes = c.counts.param * dataTypeSize(c.dtype);
    int64_t wrong = 0;
    for (int src = 0; src < c.nranks; ++src) {
      wrong += checkCopyOutput(c.dtype, static_cast<const char*>(out) + src * bytes,
                               c.counts.param, 0, src, c.seed);
    }
    return wrong;
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::AllGatherBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
