// all_reduce_perf: nccl-tests' AllReduce benchmark on ringfold::allreduce.
// busbw = algbw x 2(n-1)/n, algbw = count x element size / time.
#include "collectives/allreduce.h"
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
  // "Allreduce model: local_alpha=..." and "Algorithm: 8B direct, ..., 64M ring" (runs of equal
  // choices folded into ranges).
  std::vector<std::string> headerLines(Communicator& comm, const std::vector<size_t>& sizes) const override {
    std::vector<std::string> out;
    out.push_back("Allreduce model: " + comm.model().text() + " (RINGFOLD_ALGO=" + comm.tuning().allreduceAlgorithm + ")");
    std::string line = "Algorithm by size:";
    std::string last;
    size_t first = 0, prev = 0;
    auto flush = [&] {
      if (last.empty()) return;
      line += " " + formatBytes(first) + (prev != first ? "-" + formatBytes(prev) : "") + " " + last + ";";
    };
    for (size_t bytes : sizes) {
      const coll::AllreduceChoice c = resolveAllreduce(comm, AllreduceAlgorithm::kAuto, bytes);
      std::string what = algorithmName(c.algorithm);
      if (c.algorithm == AllreduceAlgorithm::kHierarchical) what += "(" + std::string(algorithmName(c.cross)) + ")";
      if (c.algorithm == AllreduceAlgorithm::kTree || (c.algorithm == AllreduceAlgorithm::kHierarchical && c.cross == AllreduceAlgorithm::kTree)) {
        what += " seg " + formatBytes(c.treeSegmentBytes);
      }
      if (c.algorithm == AllreduceAlgorithm::kRing || (c.algorithm == AllreduceAlgorithm::kHierarchical && c.cross == AllreduceAlgorithm::kRing)) {
        what += " chunk " + formatBytes(c.ringChunkBytes);
      }
      if (what != last) {
        flush();
        last = what;
        first = bytes;
      }
      prev = bytes;
    }
    flush();
    out.push_back(line);
    return out;
  }

 private:
  static std::string formatBytes(size_t b) {
    if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return std::to_string(b >> 30) + "G";
    if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + "M";
    if (b >= (size_t{1} << 10) && b % (size_t{1} << 10) == 0) return std::to_string(b >> 10) + "K";
    return std::to_string(b);
  }
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::AllReduceBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
