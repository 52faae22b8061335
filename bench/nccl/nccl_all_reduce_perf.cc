// all_reduce_perf through the NCCL API: nccl-tests' AllReduce benchmark (bench/common/harness.h:
// same flags, output and checks as bench/all_reduce_perf.cc) whose timed call is ncclAllReduce
// of ringfold's libnccl.so.2 on host buffers. Built as bench/nccl/all_reduce_perf so that the
// nccl-tests output check (bench/test/check_bench.py) runs it unchanged.
//
// The harness's communicator (Communicator::fromEnvironment, under ringfoldrun) only carries
// the ncclUniqueId from rank 0 to the others (a broadcast); every timed call goes through
// ncclAllReduce on the NCCL communicator made from it.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/common/data.h"
#include "bench/common/harness.h"
#include "collectives/broadcast.h"
#include "common/error.h"

namespace ringfold::bench {
namespace {

class NcclAllReduceBench final : public BenchCollective {
 public:
  ~NcclAllReduceBench() override {
    if (nccl_) ncclCommDestroy(nccl_);
  }
  std::string program() const override { return "all_reduce_perf"; }
  OpColumn opColumn() const override { return OpColumn::kReduce; }
  CollCounts counts(size_t count, int) const override { return {count, count, count, 0, 0}; }
  double algBytes(const CollCounts& c, size_t ws, int) const override { return static_cast<double>(c.param * ws); }
  double busFactor(int n) const override { return 2.0 * (n - 1) / n; }
  void run(Communicator& comm, const void* send, void* recv, size_t count, DataType t, ReduceOp op, int) override {
    if (!nccl_) connect(comm);
    // ringfold's DataType and ReduceOp values are NCCL's (common/dtype.h).
    const ncclResult_t r = ncclAllReduce(send, recv, count, static_cast<ncclDataType_t>(t), static_cast<ncclRedOp_t>(op),
                                         nccl_, nullptr);
    if (r != ncclSuccess) RF_THROW(Error, "ncclAllReduce: ", ncclGetErrorString(r), ": ", ncclGetLastError(nccl_));
  }
  void fillInput(const CheckContext& c, void* in) const override {
    fillReduceInput(c.dtype, c.op, in, c.counts.send, 0, c.rank, c.nranks, c.seed);
  }
  int64_t checkOutput(const CheckContext& c, const void* out) const override {
    return checkReduceOutput(c.dtype, c.op, out, c.counts.recv, 0, c.nranks, c.seed);
  }
  std::vector<std::string> headerLines(Communicator&, const std::vector<size_t>&) const override {
    int v = 0;
    ncclGetVersion(&v);
    return {"Through the NCCL API: ringfold's libnccl.so.2 (ncclGetVersion " + std::to_string(v) + "), host buffers"};
  }

 private:
  void connect(Communicator& comm) {
    ncclUniqueId id{};
    if (comm.rank() == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) RF_THROW(Error, "ncclGetUniqueId: ", ncclGetLastError(nullptr));
    }
    BroadcastOptions b;
    b.sendbuf = &id;
    b.recvbuf = &id;
    b.count = sizeof id;
    b.dtype = DataType::kUint8;
    broadcast(comm, b);
    const ncclResult_t r = ncclCommInitRank(&nccl_, comm.size(), id, comm.rank());
    if (r != ncclSuccess) RF_THROW(Error, "ncclCommInitRank: ", ncclGetLastError(nullptr));
  }
  ncclComm_t nccl_ = nullptr;
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  ringfold::bench::NcclAllReduceBench coll;
  return ringfold::bench::benchMain(argc, argv, coll);
}
