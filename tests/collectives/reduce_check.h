// The reduce-to-root check shared by the loopback suite (reduce_test.cc) and the tcp_uring suite
// (reduce_tcp_uring_test.cc): one group of `ranks` threads performs every case for every root,
// in place and out of place, and each result is compared bitwise with a sequential reference
// folded in the chain's order root+1, root+2, ..., root (testref::foldRange from root+1): the
// order an allreduce uses is a different one, and floats would differ in the last bits. Also:
// no rank writes outside its buffers, sendbuf stays as it was (but for the root in place), and
// a non-root's recvbuf is left alone (poisoned bytes stay; every other case passes null there).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "matrix.h"
#include "reduce/cpu_reducer.h"
#include "reference.h"
#include "test_util.h"

namespace ringfold::rftest {

// The root's result of a reduce of `inputs` (one per rank): preScaled contributions folded from
// root+1 on, the final scale in the last fold.
inline testref::Bytes referenceReduce(Reducer& red, const std::vector<testref::Bytes>& inputs, size_t count, DataType t,
                                      ReduceOp op, double preScale, double postScale, int root) {
  const int n = static_cast<int>(inputs.size());
  auto contributions = testref::preScaled(red, inputs, t, preScale);
  testref::Bytes out(count * dataTypeSize(t));
  testref::foldRange(red, contributions, 0, count, (root + 1) % n, t, op, testref::finalScaleOf(op, postScale, n),
                     out.data());
  return out;
}

// Counts for `t` with segments of `segmentBytes`: empty, one element, fewer than some rank counts,
// one short of and one past a segment, and enough segments that the chain's receive slots are
// reused (sched::ChainReduceSchedule::kWindow) with a short last segment.
inline std::vector<size_t> reduceCounts(DataType t, size_t segmentBytes) {
  const size_t seg = segmentBytes / dataTypeSize(t);
  return {0, 1, 7, seg - 1, seg + 1, 6 * seg + 3};
}

inline void checkReduce(int n, DataType t, const std::vector<ReduceCase>& cases, const std::vector<int>& roots,
                        const GroupOptions& group, FailureLog& log) {
  auto red = makeCpuReducer();
  const size_t es = dataTypeSize(t);
  struct Prepared {
    std::vector<testref::Bytes> inputs;   // per rank
    std::vector<testref::Bytes> results;  // per root
  };
  std::vector<Prepared> prep(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const ReduceCase& c = cases[i];
    for (int r = 0; r < n; ++r) {
      prep[i].inputs.push_back(testref::makeInput(t, c.count, r, 701 + i, c.op == ReduceOp::kProd));
    }
    for (int root : roots) {
      prep[i].results.push_back(referenceReduce(*red, prep[i].inputs, c.count, t, c.op, c.preScale, c.postScale, root));
    }
  }
  auto errors = runRanks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const ReduceCase& c = cases[i];
      const testref::Bytes& input = prep[i].inputs[r];
      const size_t bytes = c.count * es;
      for (size_t ri = 0; ri < roots.size(); ++ri) {
        const int root = roots[ri];
        for (bool inPlace : {false, true}) {
          const std::string what =
              detail::concat("reduce ranks=", n, " dtype=", dataTypeName(t), " op=", reduceOpName(c.op),
                             " count=", c.count, " pre=", c.preScale, " post=", c.postScale, " root=", root,
                             " inplace=", inPlace, " rank=", r);
          GuardedBuffer send(bytes), recv(bytes);
          send.fill(input);
          recv.poison();
          const bool nullRecv = r != root && !inPlace && (i + ri) % 2 == 1;  // allowed off the root
          ReduceOptions o;
          o.sendbuf = send.data();
          o.recvbuf = inPlace ? send.data() : nullRecv ? nullptr : recv.data();
          o.count = c.count;
          o.dtype = t;
          o.op = c.op;
          o.root = root;
          o.preScale = c.preScale;
          o.postScale = c.postScale;
          reduce(comm, o);
          if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
          if (r == root) {
            const auto* got = static_cast<const std::byte*>(o.recvbuf);
            const long long e = firstDifference(got, prep[i].results[ri].data(), c.count, es);
            if (e >= 0) log.note(what, ": element ", e, " of ", c.count, " differs from the chain-order reference");
          }
          if (!(r == root && inPlace) && firstDifference(send.data(), input.data(), c.count, es) >= 0) {
            log.note(what, ": modified sendbuf");
          }
          if (r != root && !inPlace) {
            GuardedBuffer untouched(bytes);
            untouched.poison();
            if (firstDifference(recv.data(), untouched.data(), c.count, es) >= 0) {
              log.note(what, ": wrote recvbuf on a rank that is not the root");
            }
          }
        }
      }
    }
  }, group);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r]) {
      log.note("reduce ranks=", n, " dtype=", dataTypeName(t), " rank ", r, " threw: ", describe(errors[r]));
    }
  }
}

}  // namespace ringfold::rftest
