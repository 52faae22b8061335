#include "bench/common/harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/collectives.h"
#include "bench/common/data.h"
#include "common/error.h"
#include "bench/common/flags.h"
#include "bench/common/guarded_buffer.h"
#include "bench/common/nccl_format.h"
#include "rendezvous/bootstrap.h"

#ifndef RINGFOLD_VERSION_STRING
#define RINGFOLD_VERSION_STRING "0.0.0"
#endif
#ifndef RINGFOLD_VERSION_CODE
#define RINGFOLD_VERSION_CODE 0
#endif

namespace ringfold::bench {
namespace {

constexpr unsigned char kUntouched = 0xEE;  // sentinel byte of memory nobody should write
constexpr size_t kDeviceLineBytes = 512;

// nccl-tests' order for -d all.
const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                              DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                              DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                              DataType::kBfloat16};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kAvg};

class Runner {
 public:
  Runner(BenchCollective& coll, const BenchFlags& flags, Communicator& comm)
      : coll_(coll), f_(flags), comm_(comm), rank_(comm.rank()), nranks_(comm.size()) {}

  int run();

 private:
  struct Place {
    const std::byte* send;
    std::byte* recv;
  };

  std::vector<DataType> types() const;
  std::vector<ReduceOp> ops() const;
  std::vector<int> roots() const;
  void printDevices();
  void timeTest(DataType t, ReduceOp op, int root);
  void benchTime(size_t size, DataType t, ReduceOp op, int root, bool inPlace);
  Place place(const CollCounts& c, size_t ws, bool inPlace, size_t shift) const;
  void runOnce(const Place& p, size_t count, DataType t, ReduceOp op, int root);
  int64_t checkOnce(const CollCounts& c, DataType t, ReduceOp op, int root, bool inPlace);
  double combineTime(double seconds);
  int64_t sumOverRanks(int64_t v);

  BenchCollective& coll_;
  const BenchFlags& f_;
  Communicator& comm_;
  int rank_;
  int nranks_;
  std::unique_ptr<GuardedBuffer> send_;
  std::unique_ptr<GuardedBuffer> recv_;
  std::vector<std::byte> scratch_;  // regenerated input, to see whether it was overwritten
  uint64_t rep_ = 0;
  double bwSum_ = 0;
  int bwCount_ = 0;
  int64_t wrongRows_ = 0;
  int64_t localOutOfBounds_ = 0;
};

std::vector<DataType> Runner::types() const {
  if (f_.datatype == "all") return {std::begin(kAllTypes), std::end(kAllTypes)};
  const auto t = parseDataType(f_.datatype);
  if (!t) RF_THROW(InvalidArgument, "unknown data type '", f_.datatype, "' for -d");
  if (*t == DataType::kBool && coll_.opColumn() == BenchCollective::OpColumn::kReduce) {
    RF_THROW(InvalidArgument, "-d bool: ", coll_.program(), " reduces, and bool cannot be reduced");
  }
  return {*t};
}

std::vector<ReduceOp> Runner::ops() const {
  if (coll_.opColumn() == BenchCollective::OpColumn::kNone) return {ReduceOp::kSum};
  if (f_.op == "all") return {std::begin(kAllOps), std::end(kAllOps)};
  const auto op = parseReduceOp(f_.op);
  if (!op) RF_THROW(InvalidArgument, "unknown reduction '", f_.op, "' for -o (sum prod max min avg all)");
  return {*op};
}

std::vector<int> Runner::roots() const {
  if (!coll_.rooted()) return {-1};
  if (f_.root == -1) {
    std::vector<int> all(nranks_);
    for (int r = 0; r < nranks_; ++r) all[r] = r;
    return all;
  }
  if (f_.root < 0 || f_.root >= nranks_) {
    RF_THROW(InvalidArgument, "-r ", f_.root, " is not a rank of this ", nranks_, "-rank job");
  }
  return {f_.root};
}

int64_t Runner::sumOverRanks(int64_t v) {
  int64_t out = 0;
  AllreduceOptions o;
  o.sendbuf = &v;
  o.recvbuf = &out;
  o.count = 1;
  o.dtype = DataType::kInt64;
  o.op = ReduceOp::kSum;
  allreduce(comm_, o);
  return out;
}

// nccl-tests -a: 0 rank 0's time, 1 the mean, 2 the minimum, 3 the maximum.
double Runner::combineTime(double seconds) {
  double in = seconds;
  double out = 0;
  AllreduceOptions o;
  o.sendbuf = &in;
  o.recvbuf = &out;
  o.count = 1;
  o.dtype = DataType::kFloat64;
  switch (f_.average) {
    case 0: o.op = ReduceOp::kSum; in = rank_ == 0 ? seconds : 0.0; break;
    case 1: o.op = ReduceOp::kSum; break;
    case 2: o.op = ReduceOp::kMin; break;
    default: o.op = ReduceOp::kMax; break;
  }
  allreduce(comm_, o);
  return f_.average == 1 ? out / nranks_ : out;
}

void Runner::printDevices() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const auto boot = rendezvous::bootstrapFromEnvironment();
  // "cpu rdma [ofi tcp;ofi_rxm on lo]", "cpu per_peer(shm+tcp_uring) [shm: memfd rings ...]":
  // the backend(s) joining this rank to its peers, and what each runs on.
  const std::string what = comm_.device().describe();
  const std::string name =
      std::string("cpu ") + comm_.device().name() + (what.empty() ? "" : " [" + what + "]");
  std::string line = deviceLine(rank_, 0, static_cast<int>(getpid()), host, boot.localRank,
                                "0000:00:00", name);
  std::vector<char> mine(kDeviceLineBytes, '\0');
  std::memcpy(mine.data(), line.data(), std::min(line.size(), kDeviceLineBytes - 1));
  std::vector<char> all(kDeviceLineBytes * nranks_);
  AllgatherOptions o;
  o.sendbuf = mine.data();
  o.recvbuf = all.data();
  o.sendCount = kDeviceLineBytes;
  o.dtype = DataType::kUint8;
  allgather(comm_, o);
  if (rank_ == 0) {
    for (int r = 0; r < nranks_; ++r) std::printf("%s\n", all.data() + r * kDeviceLineBytes);
  }
}

Runner::Place Runner::place(const CollCounts& c, size_t ws, bool inPlace, size_t shift) const {
  std::byte* recv = recv_->data() + shift;
  if (!inPlace) return {send_->data() + shift, recv};
  return {recv + c.sendInplaceOffset * ws * rank_, recv + c.recvInplaceOffset * ws * rank_};
}

void Runner::runOnce(const Place& p, size_t count, DataType t, ReduceOp op, int root) {
  coll_.run(comm_, p.send, p.recv, count, t, op, root);
  if (f_.blocking == 1) barrier(comm_);
}

void Runner::timeTest(DataType t, ReduceOp op, int root) {
  const size_t ws = dataTypeSize(t);
  barrier(comm_);
  for (size_t size : sizeSeries(f_.minBytes, f_.maxBytes, 0, 2)) {
    const CollCounts c = coll_.counts(size / ws, nranks_);
    for (int i = 0; i < f_.warmupIters; ++i) runOnce(place(c, ws, false, 0), c.param, t, op, root);
  }
  std::string opName = "none";
  if (coll_.opColumn() != BenchCollective::OpColumn::kNone) opName = reduceOpName(op);
  for (size_t size : f_.sizes()) {
    const CollCounts c = coll_.counts(size / ws, nranks_);
    if (rank_ == 0) {
      printRowPrefix(stdout, std::max(c.send, c.recv) * ws, c.param, dataTypeName(t), opName, root);
    }
    benchTime(size, t, op, root, false);
    benchTime(size, t, op, root, true);
    if (rank_ == 0) {
      printRowEnd(stdout);
      std::fflush(stdout);
    }
  }
}

void Runner::benchTime(size_t size, DataType t, ReduceOp op, int root, bool inPlace) {
  const size_t ws = dataTypeSize(t);
  const CollCounts c = coll_.counts(size / ws, nranks_);
  if (f_.check > 0) {
    const CheckContext ctx{t, op, root, rank_, nranks_, 0, c};
    if (coll_.hasInput(ctx)) coll_.fillInput(ctx, const_cast<std::byte*>(place(c, ws, inPlace, 0).send));
  }
  runOnce(place(c, ws, inPlace, 0), c.param, t, op, root);
  barrier(comm_);

  // Successive runs move through the buffers, as nccl-tests does, so that small sizes do not
  // always hit the same cache lines.
  const size_t stride = std::max(c.send, c.recv) * ws;
  const size_t steps = stride ? std::max<size_t>(1, send_->capacity() / stride) : 1;
  const int total = f_.iters * f_.aggIters;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < total; ++i) {
    runOnce(place(c, ws, inPlace, stride * (static_cast<size_t>(i) % steps)), c.param, t, op, root);
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  const double seconds = combineTime(elapsed.count() / total);

  const double algBw = seconds > 0 ? coll_.algBytes(c, ws, nranks_) / 1.0e9 / seconds : 0.0;
  const double busBw = algBw * coll_.busFactor(nranks_);

  std::optional<int64_t> shown;
  if (f_.check > 0) {
    int64_t wrong = 0;
    for (int k = 0; k < f_.check; ++k) wrong += checkOnce(c, t, op, root, inPlace);
    wrong = sumOverRanks(wrong);
    if (!inPlace || coll_.checkedInPlace()) {
      shown = wrong;
      if (wrong != 0) ++wrongRows_;
    }
  }
  if (rank_ == 0) printRowBody(stdout, seconds * 1.0e6, algBw, busBw, shown);
  bwSum_ += busBw;
  ++bwCount_;
}

// One run on fresh data at offset 0: returns this rank's wrong elements, and adds to
// localOutOfBounds_ every byte written where nothing should have been.
int64_t Runner::checkOnce(const CollCounts& c, DataType t, ReduceOp op, int root, bool inPlace) {
  const size_t ws = dataTypeSize(t);
  const CheckContext ctx{t, op, root, rank_, nranks_, ++rep_, c};
  const bool hasInput = coll_.hasInput(ctx);
  send_->fill(kUntouched);
  recv_->fill(kUntouched);
  const Place p = place(c, ws, inPlace, 0);
  if (hasInput) coll_.fillInput(ctx, const_cast<std::byte*>(p.send));
  runOnce(p, c.param, t, op, root);
  int64_t wrong = 0;
  if (!inPlace || coll_.checkedInPlace()) wrong = coll_.checkOutput(ctx, p.recv);

  const size_t inBytes = hasInput ? c.send * ws : 0;
  const size_t outBytes = c.recv * ws;
  const size_t cap = recv_->capacity();
  int64_t oob = 0;
  if (!inPlace) {
    if (inBytes) {
      scratch_.resize(inBytes);
      coll_.fillInput(ctx, scratch_.data());
      for (size_t k = 0; k < inBytes; ++k) oob += scratch_[k] != p.send[k] ? 1 : 0;
    }
    oob += countNotEqual(send_->data() + inBytes, cap - inBytes, kUntouched);
    oob += countNotEqual(recv_->data() + outBytes, cap - outBytes, kUntouched);
  } else {
    // The input may be used as scratch in place; only memory outside input and output counts.
    const size_t inOff = c.sendInplaceOffset * ws * rank_;
    const size_t outOff = c.recvInplaceOffset * ws * rank_;
    const size_t lo = hasInput ? std::min(inOff, outOff) : outOff;
    const size_t hi = hasInput ? std::max(inOff + inBytes, outOff + outBytes) : outOff + outBytes;
    oob += countNotEqual(send_->data(), cap, kUntouched);
    oob += countNotEqual(recv_->data(), lo, kUntouched);
    oob += countNotEqual(recv_->data() + hi, cap - hi, kUntouched);
  }
  if (oob) {
    std::fprintf(stderr, "rank %d: %lld bytes written outside the buffers of %s (%s, %s)\n", rank_,
                 static_cast<long long>(oob), coll_.program().c_str(), dataTypeName(t),
                 inPlace ? "in place" : "out of place");
  }
  localOutOfBounds_ += oob;
  return wrong;
}

int Runner::run() {
  const auto typeList = types();
  const auto opList = ops();
  const auto rootList = roots();
  const auto sizes = f_.sizes();

  size_t capacity = 0;
  for (DataType t : typeList) {
    const size_t ws = dataTypeSize(t);
    for (size_t size : sizeSeries(f_.minBytes, f_.maxBytes, 0, 2)) {
      const CollCounts c = coll_.counts(size / ws, nranks_);
      capacity = std::max({capacity, c.send * ws, c.recv * ws});
    }
    for (size_t size : sizes) {
      const CollCounts c = coll_.counts(size / ws, nranks_);
      capacity = std::max({capacity, c.send * ws, c.recv * ws});
    }
  }
  send_ = std::make_unique<GuardedBuffer>(capacity);
  recv_ = std::make_unique<GuardedBuffer>(capacity);
  send_->fill(kUntouched);
  recv_->fill(kUntouched);

  if (rank_ == 0) {
    RunHeader h;
    h.program = coll_.program();
    h.version = std::string("ringfold-") + RINGFOLD_VERSION_STRING;
    h.versionCode = RINGFOLD_VERSION_CODE;
    h.minBytes = f_.minBytes;
    h.maxBytes = f_.maxBytes;
    h.stepBytes = f_.stepBytes;
    h.stepFactor = f_.stepFactor;
    h.warmupIters = f_.warmupIters;
    h.iters = f_.iters;
    h.aggIters = f_.aggIters;
    h.validation = f_.check;
    h.blocking = f_.blocking;
    printPreamble(stdout, h);
  }
  printDevices();
  if (rank_ == 0) {
    for (const std::string& line : coll_.headerLines(comm_, f_.sizes())) std::printf("#  %s\n", line.c_str());
    printResultHeader(stdout, f_.reportCpuTime != 0);
  }

  for (DataType t : typeList) {
    for (ReduceOp op : opList) {
      for (int root : rootList) timeTest(t, op, root);
    }
  }

  localOutOfBounds_ += send_->guardDamage() + recv_->guardDamage();
  const int64_t outOfBounds = sumOverRanks(localOutOfBounds_) + wrongRows_;
  if (rank_ == 0) {
    printFooter(stdout, outOfBounds, bwCount_ ? bwSum_ / bwCount_ : 0.0, coll_.program());
  }
  return outOfBounds == 0 ? 0 : 1;
}

}  // namespace

int benchMain(int argc, char** argv, BenchCollective& coll) {
  setlinebuf(stdout);
  FlagParser parser(coll.program(), "ringfold " + coll.program() + ": nccl-tests-compatible benchmark");
  try {
    if (!parser.parse(argc, argv)) return 0;
  } catch (const FlagError& e) {
    std::fprintf(stderr, "%s: %s\n", coll.program().c_str(), e.what());
    return 2;
  }
  int rank = -1;
  try {
    auto comm = Communicator::fromEnvironment();
    rank = comm->rank();
    if (parser.flags().timeoutSec > 0) {
      comm->setTimeout(std::chrono::seconds(parser.flags().timeoutSec));
    }
    Runner runner(coll, parser.flags(), *comm);
    return runner.run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (rank < 0) {
      // Failed before the communicator existed (e.g. the store was unreachable): the rank is
      // the one the environment names, if it names one.
      try {
        rank = rendezvous::bootstrapFromEnvironment().rank;
      } catch (const std::exception&) {
      }
    }
    if (rank < 0) {
      std::fprintf(stderr, "%s: %s\n", coll.program().c_str(), e.what());
    } else {
      std::fprintf(stderr, "%s: rank %d: %s\n", coll.program().c_str(), rank, e.what());
    }
    return 2;
  }
}

}  // namespace ringfold::bench
