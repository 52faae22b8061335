// alltoall_perf: nccl-tests' AlltoAll benchmark on ringfold::alltoall with equal blocks.
// count column = elements per destination; busbw = algbw x (n-1)/n with
// algbw = count x n x size / time. Unlike nccl-tests, the in-place column is checked too
// (ringfold supports in-place alltoall).
#include <vector>

#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "bench/common/harness.h"

namespace ringfold::bench {
namespace {

class AlltoAllBench final : public BenchCollective {
 public:
  std::string program() const override { return "alltoall_perf"; }
  OpColumn opColumn() const override { return OpColumn::kNone; }
  CollCounts counts(size_t count, int n) const override {
    const size_t per = count / n;
    return {per * n, per * n, per, 0, 0};
  }
  double algBytes(const CollCounts& c, size_t ws, int n) const override {
    return static_cast<double>(c.param * ws * n);
  }
  double busFactor(int n) const override { return static_cast<double>(n - 1) / n; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp,
           int) override {
    // Reuse the option vectors: the timed loop should not allocate.
    if (opts_.sendCounts.size() != static_cast<size_t>(comm.size()) || opts_.sendCounts[0] != count) {
      opts_.sendCounts.assign(comm.size(), count);
      opts_.recvCounts.assign(comm.size(), count);
    }
    opts_.sendbuf = send;
    opts_.recvbuf = recv;
    opts_.dtype = t;
    alltoall(comm, opts_);
  }
  void fillInput(const CheckContext& c, void* in) const override {
    const size_t per = c.counts.param;
    const size_t bytes = per * dataTypeSize(c.dtype);
    for (int dst = 0; dst < c.nranks; ++dst) {
      fillCopyInput(c.dtype, static_cast<char*>(in) + dst * bytes, per, dst * per, c.rank, c.seed);
    }
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    const size_t per = c.counts.param;
    const size_t bytes = per * dataTypeSize(c.dtype);
    int64_t wrong = 0;
    for (int src = 0; src < c.nranks; ++src) {
      wrong += checkCopyOutput(c.dtype, static_cast<const char*>(out) + src * bytes, per,
                               c.rank * per, src, c.seed);
    }
    return wrong;
  }

 private:
  AlltoallOptions opts_;
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::AlltoAllBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
