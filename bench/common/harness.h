// The nccl-tests driver for ringfold collectives. A bench program describes its collective as
// a BenchCollective and calls benchMain(); the driver does the rest, as nccl-tests does:
//
//   for each type (-d) x op (-o) x root (-r):
//     warm up (-w) at every power-of-two size from -b to -e
//     for each size: out-of-place, then in-place:
//       one untimed run, barrier, -n x -m timed runs (offsets rotate through the buffers),
//       time per run combined over ranks per -a; then -c checked runs on fresh data, each
//       compared element by element with the independently computed result (data.h), the
//       wrong counts summed over ranks into #wrong
//
// Vocabulary (nccl-tests'): for a row of `size` bytes, count = size / element size, and the
// collective's counts() give the elements of the send and receive buffers, the count passed
// to the call (param), and where the in-place input and output sit inside the receive buffer
// (offset x rank). algbw = algBytes / time; busbw = algbw x busFactor.
//
// Out-of-bounds values (footer): bytes changed in the guard regions around the buffers, bytes
// outside a checked run's input and output that changed, out-of-place inputs that changed, plus
// (as nccl-tests counts it) one per row whose #wrong is not 0. Any of them fails the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace ringfold::bench {

struct CollCounts {
  size_t send = 0;               // elements in the send buffer
  size_t recv = 0;               // elements in the receive buffer
  size_t param = 0;              // the count the collective is called with
  size_t sendInplaceOffset = 0;  // in place, input at recvbuf + this x rank (elements)
  size_t recvInplaceOffset = 0;  // in place, output at recvbuf + this x rank (elements)
};

struct CheckContext {
  DataType dtype;
  ReduceOp op;
  int root;
  int rank;
  int nranks;
  uint64_t seed;
  CollCounts counts;
};

class BenchCollective {
 public:
  // The redop column: "none" (copy collectives), the reduction used, or (sendrecv, as in
  // nccl-tests) the op iterated over without being used.
  enum class OpColumn { kNone, kReduce, kUnused };

  virtual ~BenchCollective() = default;
  virtual std::string program() const = 0;
  virtual OpColumn opColumn() const = 0;
  virtual bool rooted() const { return false; }
  virtual CollCounts counts(size_t count, int nranks) const = 0;
  // Bytes S in algbw = S / time.
  virtual double algBytes(const CollCounts& c, size_t elemSize, int nranks) const = 0;
  virtual double busFactor(int nranks) const = 0;
  virtual void run(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count,
                   DataType dtype, ReduceOp op, int root) = 0;

  // Checking. fillInput writes this rank's counts.send input elements; checkOutput counts the
  // wrong elements among the counts.recv outputs.
  virtual bool hasInput(const CheckContext& c) const { return true; }
  virtual void fillInput(const CheckContext& c, void* input) const = 0;
  virtual int64_t checkOutput(const CheckContext& c, const void* output) const = 0;
  // False where nccl-tests prints N/A for the in-place column (sendrecv).
  virtual bool checkedInPlace() const { return true; }
  // Extra "#  ..." header lines for these sizes (all_reduce_perf: the model and the algorithm
  // chosen for each size), printed by rank 0 after the device lines.
  virtual std::vector<std::string> headerLines(Communicator&, const std::vector<size_t>& /*bytes*/) const { return {}; }
};

// Runs the benchmark described by `coll` on Communicator::fromEnvironment(). Returns the exit
// status: 0 when every check passed, 1 on wrong results or out-of-bounds writes, 2 on a bad
// command line or an error (printed to stderr with the rank).
int benchMain(int argc, char** argv, BenchCollective& coll);

}  // namespace ringfold::bench
