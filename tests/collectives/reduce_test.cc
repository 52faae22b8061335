// reduce (to one root) over the loopback transport, ranks as threads: every reducible dtype x
// op x rank count {1,2,3,4,5,7} x root x count (reduce_check.h), in and out of place, bitwise
// against the chain-order reference; scales; ranks that disagree (root, count, dtype, op, or
// another collective) and bad arguments, which must fail every rank with the same error.
// collectives_shm_test and collectives_rdma_test compile the matrix part again, over the shm
// transport (RF_MATRIX_SHM: folds straight from the ring) and the rdma fake fabric
// (RF_MATRIX_RDMA_FAKE), with the environments matrix_test.cc sets up in those binaries.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "reduce_check.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;
using namespace std::chrono_literals;

const std::vector<int> kReduceRankCounts = {1, 2, 3, 4, 5, 7};


// Roots 0, the last rank and one in between (distinct).
std::vector<int> rootsFor(int n) {
  std::vector<int> roots = {0};
  if (n > 1) roots.push_back(n - 1);
  if (n > 2) roots.push_back(n / 2);
  return roots;
}

class ReduceMatrix : public ::testing::TestWithParam<int> {};

// Every reducible dtype (fp8 included once it is reducible: the list comes from isReducible())
// x every op x the counts of reduceCounts().
TEST_P(ReduceMatrix, EveryDtypeOpRootAndCount) {
  const int n = GetParam();
  const GroupOptions group = matrixGroup();
  FailureLog log;
  for (DataType t : reducibleTypes()) {
    checkReduce(n, t, reduceCases(allOps(), reduceCounts(t, group.segmentBytes)), rootsFor(n), group, log);
  }
  log.report();
}

// preScale and postScale (avg's division included) on every dtype.
TEST_P(ReduceMatrix, Scales) {
  const int n = GetParam();
  const GroupOptions group = matrixGroup();
  FailureLog log;
  for (DataType t : reducibleTypes()) {
    const size_t seg = group.segmentBytes / dataTypeSize(t);
    std::vector<ReduceCase> cases;
    for (size_t count : {size_t{7}, 5 * seg + 1}) {
      cases.push_back({ReduceOp::kSum, count, 0.5, 3.0});
      cases.push_back({ReduceOp::kAvg, count, 1.0, 1.0});
      cases.push_back({ReduceOp::kAvg, count, 2.0, 0.25});
      cases.push_back({ReduceOp::kMax, count, -1.5, 1.0});
      cases.push_back({ReduceOp::kProd, count, 1.0, -2.0});
    }
    checkReduce(n, t, cases, rootsFor(n), group, log);
  }
  log.report();
}

INSTANTIATE_TEST_SUITE_P(RF_MATRIX_SUITE, ReduceMatrix, ::testing::ValuesIn(kReduceRankCounts),
                         [](const ::testing::TestParamInfo<int>& i) { return "ranks" + std::to_string(i.param); });

#if !defined(RF_MATRIX_SHM) && !defined(RF_MATRIX_RDMA_FAKE)  // the rest: once, over loopback

// The bitwise comparison can tell fold orders apart: for these inputs, the chain's order
// (from root+1) and rank order (from 0) give different float sums, so a reduce that folded
// like the direct allreduce would fail the matrix above.
TEST(ReduceReference, ChainOrderDiffersFromRankOrder) {
  auto red = makeCpuReducer();
  const int n = 5, root = 2;
  const size_t count = 4097;
  std::vector<testref::Bytes> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(testref::makeInput(DataType::kFloat32, count, r, 701));
  const testref::Bytes chain = referenceReduce(*red, inputs, count, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, root);
  testref::Bytes rankOrder(count * 4);
  testref::foldRange(*red, inputs, 0, count, 0, DataType::kFloat32, ReduceOp::kSum, 1.0, rankOrder.data());
  EXPECT_GE(firstDifference(chain.data(), rankOrder.data(), count, 4), 0);
}

// ---- failures: every rank throws the same error, and its next call throws it again ----

struct Outcome {
  std::vector<std::exception_ptr> errors;  // the first call's, or the next call's if it returned
  std::vector<std::string> again;          // what a call after the failure threw
};

// Runs `body` on n ranks. A rank whose call returns normally (a rank that needs nothing from
// the rank that disagrees, e.g. the chain's head, may finish first: collectives.h) must fail
// at its next call; a rank that throws must throw the same at its next call, at once. The
// timeout is long: a mismatch is caught by a check word, not by waiting (a wait that ran out
// would be an IoError, which the tests below reject).
Outcome runFailing(int n, const std::function<void(Communicator&)>& body) {
  Outcome out;
  out.again.resize(n);
  GroupOptions g;
  g.timeout = 20s;
  out.errors = runRanks(n, [&](Communicator& comm) {
    try {
      body(comm);
    } catch (const Error&) {
      try {
        barrier(comm);
        out.again[comm.rank()] = "second call did not throw";
      } catch (const Error& e) {
        out.again[comm.rank()] = e.what();
      }
      throw;
    }
    barrier(comm);  // returned normally: this must throw the group's error
    out.again[comm.rank()] = "returned normally, and so did the next call";
  }, g);
  return out;
}

template <typename E>
void expectSameError(const Outcome& o, std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(o.errors.empty());
  const std::string first = describe(o.errors[0]);
  for (size_t r = 0; r < o.errors.size(); ++r) {
    ASSERT_TRUE(o.errors[r]) << "rank " << r << " did not fail: " << o.again[r];
    EXPECT_TRUE(holds<E>(o.errors[r])) << "rank " << r << ": " << describe(o.errors[r]);
    EXPECT_EQ(describe(o.errors[r]), first) << "rank " << r;
    if (!o.again[r].empty()) {
      EXPECT_EQ(o.again[r], first) << "rank " << r << "'s next call";
    }
  }
  for (const char* f : fragments) EXPECT_NE(first.find(f), std::string::npos) << "'" << f << "' not in: " << first;
}

void reduceWith(Communicator& comm, size_t count, DataType t, ReduceOp op, int root) {
  std::vector<double> send(count + 1, 1.0), recv(count + 1);
  ReduceOptions o;
  o.sendbuf = send.data();
  o.recvbuf = recv.data();
  o.count = count;
  o.dtype = t;
  o.op = op;
  o.root = root;
  reduce(comm, o);
}

// Every way one rank can get the root wrong: it believes itself root, or the root's
// neighbour, or another rank; with enough segments to fill the chain's windows.
TEST(ReduceMismatch, Root) {
  const int n = 4;
  for (int odd = 0; odd < n; ++odd) {
    for (int wrongRoot : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << "rank " << odd << " passes root " << wrongRoot);
      auto o = runFailing(n, [&](Communicator& comm) {
        reduceWith(comm, 3000, DataType::kFloat32, ReduceOp::kSum, comm.rank() == odd ? wrongRoot : 0);
      });
      expectSameError<MismatchError>(o, {"reduce arguments differ between ranks", "root=0", "root="});
    }
  }
}

TEST(ReduceMismatch, CountDtypeOp) {
  for (int n : {2, 3, 5}) {
    auto o = runFailing(n, [&](Communicator& comm) {
      reduceWith(comm, comm.rank() == 1 ? 2001 : 2000, DataType::kFloat32, ReduceOp::kSum, 0);
    });
    expectSameError<MismatchError>(o, {"reduce arguments differ", "count=2001", "count=2000 dtype=float op=sum root=0"});
  }
  auto d = runFailing(3, [&](Communicator& comm) {
    reduceWith(comm, 64, comm.rank() == 2 ? DataType::kFloat64 : DataType::kFloat32, ReduceOp::kSum, 1);
  });
  expectSameError<MismatchError>(d, {"reduce arguments differ", "dtype=double", "dtype=float"});
  auto p = runFailing(4, [&](Communicator& comm) {
    reduceWith(comm, 64, DataType::kFloat32, comm.rank() == 3 ? ReduceOp::kMax : ReduceOp::kAvg, 2);
  });
  expectSameError<MismatchError>(p, {"reduce arguments differ", "op=max", "op=avg"});
  auto z = runFailing(3, [&](Communicator& comm) {
    reduceWith(comm, comm.rank() == 0 ? 0 : 5, DataType::kInt32, ReduceOp::kSum, 2);
  });
  expectSameError<MismatchError>(z, {"count=0", "count=5"});
}

// One rank calls another collective at the same point (each position of it in the chain).
TEST(ReduceMismatch, AnotherCollective) {
  const int n = 3;
  for (int odd = 0; odd < n; ++odd) {
    for (int other = 0; other < 4; ++other) {
      SCOPED_TRACE(::testing::Message() << "rank " << odd << " calls collective " << other);
      auto o = runFailing(n, [&](Communicator& comm) {
        std::vector<float> send(3 * 600, 1.0f), recv(3 * 600);
        if (comm.rank() != odd) return reduceWith(comm, 600, DataType::kFloat32, ReduceOp::kSum, 1);
        switch (other) {
          case 0: {
            AllreduceOptions a;
            a.sendbuf = send.data();
            a.recvbuf = recv.data();
            a.count = 600;
            return allreduce(comm, a);
          }
          case 1: {
            BroadcastOptions b;
            b.sendbuf = b.recvbuf = send.data();
            b.count = 600;
            b.root = 1;
            return broadcast(comm, b);
          }
          case 2: {
            ReduceScatterOptions s;
            s.sendbuf = send.data();
            s.recvbuf = recv.data();
            s.recvCount = 600;
            return reduceScatter(comm, s);
          }
          default: return barrier(comm);
        }
      });
      expectSameError<MismatchError>(o, {"collectives differ between ranks", "reduce(count=600"});
    }
  }
}

// A bad argument on one rank: every rank throws its InvalidArgument, which names it.
TEST(ReduceInvalidArgument, NamesTheArgument) {
  struct Bad {
    const char* text;
    std::function<void(ReduceOptions&)> spoil;
  };
  const std::vector<Bad> bads = {
      {"reduce on rank 2: root 7 is not a rank of this communicator (size 3)",
       [](ReduceOptions& o) { o.root = 7; }},
      {"reduce on rank 2: root -1 is not a rank", [](ReduceOptions& o) { o.root = -1; }},
      {"reduce on rank 2: sendbuf is null", [](ReduceOptions& o) { o.sendbuf = nullptr; }},
      {"reduce on rank 2: dtype bool cannot be reduced",
       [](ReduceOptions& o) { o.dtype = DataType::kBool; }},
      {"reduce on rank 2: unknown op 9", [](ReduceOptions& o) { o.op = static_cast<ReduceOp>(9); }},
      {"reduce on rank 2: unknown dtype", [](ReduceOptions& o) { o.dtype = static_cast<DataType>(99); }},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.text);
    auto o = runFailing(3, [&](Communicator& comm) {
      std::vector<float> send(16, 1.0f), recv(16);
      ReduceOptions opt;
      opt.sendbuf = send.data();
      opt.recvbuf = recv.data();
      opt.count = 16;
      opt.root = 1;
      if (comm.rank() == 2) bad.spoil(opt);
      reduce(comm, opt);
    });
    expectSameError<InvalidArgument>(o, {bad.text});
  }
}

// The root's buffers: recvbuf null, or overlapping sendbuf without being equal.
TEST(ReduceInvalidArgument, RootBuffers) {
  auto nullRecv = runFailing(3, [&](Communicator& comm) {
    std::vector<float> send(16, 1.0f);
    ReduceOptions opt;
    opt.sendbuf = send.data();
    opt.count = 16;
    opt.root = 0;  // recvbuf null everywhere: only the root's is wrong
    reduce(comm, opt);
  });
  expectSameError<InvalidArgument>(nullRecv, {"reduce on rank 0: recvbuf (at the root) is null"});
  auto overlap = runFailing(2, [&](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    ReduceOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = buf.data() + 1;  // overlapping everywhere: only the root's counts
    opt.count = 32;
    opt.root = 1;
    reduce(comm, opt);
  });
  expectSameError<InvalidArgument>(overlap, {"reduce on rank 1: sendbuf and recvbuf overlap without being equal"});
}

// A non-root's recvbuf is not looked at: overlapping or null there is fine, and the call works.
TEST(ReduceArguments, NonRootRecvbufIsIgnored) {
  auto errors = runRanks(3, [&](Communicator& comm) {
    std::vector<int32_t> buf(64, comm.rank() + 1);
    ReduceOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = comm.rank() == 0 ? static_cast<void*>(buf.data() + 32)
                                   : comm.rank() == 1 ? static_cast<void*>(buf.data() + 1) : nullptr;
    opt.count = 32;
    opt.dtype = DataType::kInt32;
    opt.root = 0;
    reduce(comm, opt);
    if (comm.rank() == 0) {
      for (int i = 32; i < 64; ++i) EXPECT_EQ(buf[i], 6) << i;
    } else {
      for (int v : buf) EXPECT_EQ(v, comm.rank() + 1);
    }
  });
  expectAllOk(errors);
}

#endif  // loopback only

}  // namespace
