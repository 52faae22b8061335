// Failures: ranks that disagree (count, dtype, op, root, counts, collective), a bad argument on
// one rank, a silent rank. Every rank must throw the same error, of the right type, quickly,
// and every later call must throw it again at once.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "test_util.h"

namespace {

using namespace ringfold;
using namespace ringfold::rftest;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Runs `body` on n ranks; each rank's error and the time it took. Then checks every rank's
// next call fails at once with the same error.
struct Outcome {
  std::vector<std::exception_ptr> errors;
  std::vector<std::string> again;  // what a second call threw
  std::vector<int> late;            // 1: the first call returned, the next one threw
  double seconds = 0;
};

Outcome runFailing(int n, const std::function<void(Communicator&)>& body, std::chrono::milliseconds timeout = 5s) {
  Outcome out;
  out.again.resize(n);
  out.late.resize(n, 0);
  GroupOptions g;
  g.timeout = timeout;
  const auto start = Clock::now();
  out.errors = runRanks(n, [&](Communicator& comm) {
    try {
      body(comm);
      // Returned normally: its next call must fail with the group's error.
      out.late[comm.rank()] = 1;
      barrier(comm);
    } catch (const Error&) {
      const auto t0 = Clock::now();
      try {
        barrier(comm);
        out.again[comm.rank()] = "second call did not throw";
      } catch (const Error& e) {
        out.again[comm.rank()] = e.what();
        if (Clock::now() - t0 > 1s) out.again[comm.rank()] += " (slowly)";
      }
      throw;
    }
  }, g);
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

template <typename E>
void expectSameError(const Outcome& o, std::initializer_list<const char*> fragments, bool allowLate = false) {
  ASSERT_FALSE(o.errors.empty());
  const std::string first = describe(o.errors[0]);
  for (size_t r = 0; r < o.errors.size(); ++r) {
    ASSERT_TRUE(o.errors[r]) << "rank " << r << " did not fail";
    EXPECT_TRUE(holds<E>(o.errors[r])) << "rank " << r << ": " << describe(o.errors[r]);
    EXPECT_EQ(describe(o.errors[r]), first) << "rank " << r;
    EXPECT_EQ(o.again[r], first) << "rank " << r << "'s next call";
    if (!allowLate) {
      EXPECT_EQ(o.late[r], 0) << "rank " << r << " returned normally first";
    }
  }
  for (const char* f : fragments) EXPECT_NE(first.find(f), std::string::npos) << "'" << f << "' not in: " << first;
}

void allreduceWith(Communicator& comm, size_t count, DataType t, ReduceOp op, AllreduceAlgorithm algo) {
  std::vector<double> send(count + 1, 1.0), recv(count + 1);
  AllreduceOptions o;
  o.sendbuf = send.data();
  o.recvbuf = recv.data();
  o.count = count;
  o.dtype = t;
  o.op = op;
  o.algorithm = algo;
  allreduce(comm, o);
}

class AllreduceMismatch : public ::testing::TestWithParam<AllreduceAlgorithm> {};

TEST_P(AllreduceMismatch, CountOnOneRank) {
  for (int n : {2, 3, 5}) {
    auto o = runFailing(n, [&](Communicator& comm) {
      allreduceWith(comm, comm.rank() == 1 ? 101 : 100, DataType::kFloat32, ReduceOp::kSum, GetParam());
    });
    expectSameError<MismatchError>(o, {"allreduce arguments differ between ranks", "rank 1 passed count=101",
                                       "passed count=100 dtype=float op=sum"});
    EXPECT_LT(o.seconds, 4.0);
  }
}

TEST_P(AllreduceMismatch, DtypeOnOneRank) {
  auto o = runFailing(3, [&](Communicator& comm) {
    allreduceWith(comm, 64, comm.rank() == 2 ? DataType::kFloat64 : DataType::kFloat32, ReduceOp::kSum, GetParam());
  });
  expectSameError<MismatchError>(o, {"allreduce arguments differ", "dtype=double", "dtype=float"});
  EXPECT_LT(o.seconds, 4.0);
}

TEST_P(AllreduceMismatch, OpOnOneRank) {
  auto o = runFailing(4, [&](Communicator& comm) {
    allreduceWith(comm, 64, DataType::kFloat32, comm.rank() == 0 ? ReduceOp::kMax : ReduceOp::kSum, GetParam());
  });
  expectSameError<MismatchError>(o, {"allreduce arguments differ", "op=max", "op=sum"});
}

TEST_P(AllreduceMismatch, CountZeroOnOneRank) {
  auto o = runFailing(3, [&](Communicator& comm) {
    allreduceWith(comm, comm.rank() == 1 ? 0 : 5, DataType::kInt32, ReduceOp::kSum, GetParam());
  });
  expectSameError<MismatchError>(o, {"count=0", "count=5"});
}

INSTANTIATE_TEST_SUITE_P(Loopback, AllreduceMismatch,
                         ::testing::Values(AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect));

TEST(Mismatch, AlgorithmsDiffer) {
  auto o = runFailing(3, [&](Communicator& comm) {
    allreduceWith(comm, 64, DataType::kFloat32, ReduceOp::kSum,
                  comm.rank() == 1 ? AllreduceAlgorithm::kDirect : AllreduceAlgorithm::kRing);
  });
  expectSameError<MismatchError>(o, {"allreduce algorithms differ between ranks"});
}

TEST(Mismatch, ReduceScatterCount) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<float> send(3 * 11), recv(11);
    ReduceScatterOptions opt;
    opt.sendbuf = send.data();
    opt.recvbuf = recv.data();
    opt.recvCount = comm.rank() == 2 ? 10 : 11;
    reduceScatter(comm, opt);
  });
  expectSameError<MismatchError>(o, {"reduce_scatter arguments differ", "count=10", "count=11"});
}

TEST(Mismatch, AllgatherCount) {
  auto o = runFailing(4, [&](Communicator& comm) {
    std::vector<int32_t> send(9), recv(4 * 9);
    AllgatherOptions opt;
    opt.sendbuf = send.data();
    opt.recvbuf = recv.data();
    opt.sendCount = comm.rank() == 3 ? 8 : 9;
    opt.dtype = DataType::kInt32;
    allgather(comm, opt);
  });
  expectSameError<MismatchError>(o, {"allgather arguments differ", "count=8", "count=9"});
}

TEST(Mismatch, AllgathervCounts) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<size_t> counts = {1, 2, 3};
    if (comm.rank() == 0) counts[2] = 4;
    std::vector<uint8_t> send(counts[comm.rank()]), recv(10);
    AllgathervOptions opt;
    opt.sendbuf = send.data();
    opt.recvbuf = recv.data();
    opt.recvCounts = counts;
    opt.dtype = DataType::kUint8;
    allgatherv(comm, opt);
  });
  expectSameError<MismatchError>(o, {"allgatherv arguments differ", "recvCounts#"});
}

TEST(Mismatch, BroadcastRoot) {
  // Every way one rank can get the root wrong: it believes itself root, or believes another.
  for (int odd = 0; odd < 4; ++odd) {
    for (int wrongRoot : {1, 3}) {
      auto o = runFailing(4, [&](Communicator& comm) {
        std::vector<float> buf(100, 1.0f);
        BroadcastOptions opt;
        opt.sendbuf = buf.data();
        opt.recvbuf = buf.data();
        opt.count = buf.size();
        opt.root = comm.rank() == odd ? wrongRoot : 0;
        broadcast(comm, opt);
      });
      // Ranks whose neighbours agree with them may finish first and fail at the next call.
      expectSameError<MismatchError>(o, {"broadcast arguments differ", "root=0"}, true);
    }
  }
}

TEST(Mismatch, BroadcastCount) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<float> buf(2000, 1.0f);
    BroadcastOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = buf.data();
    opt.count = comm.rank() == 2 ? 1999 : 2000;
    opt.root = 1;
    broadcast(comm, opt);
  });
  // The root's neighbour agrees with it: the root may finish and fail at its next call.
  expectSameError<MismatchError>(o, {"broadcast arguments differ", "count=1999", "count=2000"}, true);
}

TEST(Mismatch, AlltoallCounts) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<size_t> send = {2, 2, 2}, recv = {2, 2, 2};
    if (comm.rank() == 1) recv[0] = 3;  // rank 0 sends 2 to rank 1
    std::vector<float> a(10), b(10);
    AlltoallOptions opt;
    opt.sendbuf = a.data();
    opt.recvbuf = b.data();
    opt.sendCounts = send;
    opt.recvCounts = recv;
    alltoall(comm, opt);
  });
  expectSameError<MismatchError>(
      o, {"alltoall arguments differ between ranks: rank 0 sends count=2 dtype=float to rank 1, rank 1 expects "
          "count=3 dtype=float from rank 0"},
      true);  // rank 2's exchanges all agree: it may finish and fail at its next call
}

TEST(Mismatch, DifferentCollectives) {
  auto o = runFailing(3, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      barrier(comm);
    } else {
      allreduceWith(comm, 8, DataType::kFloat32, ReduceOp::kSum, AllreduceAlgorithm::kRing);
    }
  });
  expectSameError<MismatchError>(o, {"collectives differ between ranks", "barrier", "allreduce"});
}

TEST(Mismatch, SendRecvCount) {
  auto o = runFailing(2, [&](Communicator& comm) {
    std::vector<int64_t> buf(10);
    if (comm.rank() == 0) {
      send(comm, buf.data(), 10, DataType::kInt64, 1);
      barrier(comm);  // rank 0's send completes; it learns of the failure here
    } else {
      recv(comm, buf.data(), 9, DataType::kInt64, 0);
    }
  });
  expectSameError<MismatchError>(o, {"send/recv arguments differ: rank 0 sent count=10 dtype=int64, rank 1 expected "
                                     "count=9 dtype=int64"});
}

// A bad argument on one rank only: the others must not hang; all throw its InvalidArgument.
TEST(InvalidArgumentOnOneRank, NullBuffer) {
  auto o = runFailing(5, [&](Communicator& comm) {
    std::vector<float> buf(1000, 1.0f);
    AllreduceOptions opt;
    opt.sendbuf = comm.rank() == 3 ? nullptr : buf.data();
    opt.recvbuf = buf.data();
    opt.count = buf.size();
    allreduce(comm, opt);
  });
  expectSameError<InvalidArgument>(o, {"allreduce on rank 3: sendbuf is null"});
  EXPECT_LT(o.seconds, 4.0);
}

TEST(InvalidArgumentOnOneRank, BoolInReduction) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<uint8_t> buf(16);
    AllreduceOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = buf.data();
    opt.count = buf.size();
    opt.dtype = comm.rank() == 0 ? DataType::kBool : DataType::kUint8;
    allreduce(comm, opt);
  });
  expectSameError<InvalidArgument>(o, {"allreduce on rank 0: dtype bool cannot be reduced"});
}

TEST(InvalidArgumentOnOneRank, RootOutOfRange) {
  auto o = runFailing(3, [&](Communicator& comm) {
    std::vector<float> buf(16);
    BroadcastOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = buf.data();
    opt.count = buf.size();
    opt.root = comm.rank() == 2 ? 7 : 0;
    broadcast(comm, opt);
  });
  // Rank 1 needs nothing from rank 2: it may finish and fail at its next call.
  expectSameError<InvalidArgument>(o, {"broadcast on rank 2: root 7 is not a rank"}, true);
}

TEST(InvalidArgumentOnOneRank, BadInPlaceLayout) {
  auto o = runFailing(2, [&](Communicator& comm) {
    std::vector<float> buf(64);
    AllreduceOptions opt;
    opt.sendbuf = buf.data();
    opt.recvbuf = comm.rank() == 1 ? buf.data() + 1 : buf.data();
    opt.count = 32;
    allreduce(comm, opt);
  });
  expectSameError<InvalidArgument>(o, {"allreduce on rank 1: sendbuf and recvbuf overlap"});
}

// A rank that never calls: the others fail with IoError naming a peer, within the timeout.
TEST(SilentRank, OthersTimeOut) {
  for (auto algo : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect}) {
    std::vector<std::string> texts(3);
    GroupOptions g;
    g.timeout = 300ms;
    const auto start = Clock::now();
    auto errors = runRanks(3, [&](Communicator& comm) {
      if (comm.rank() == 2) return;
      allreduceWith(comm, 5000, DataType::kFloat32, ReduceOp::kSum, algo);
    }, g);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(seconds, 3.0);
    EXPECT_FALSE(errors[2]);
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(holds<IoError>(errors[r])) << describe(errors[r]);
      EXPECT_NE(describe(errors[r]).find("timed out"), std::string::npos) << describe(errors[r]);
    }
    EXPECT_EQ(describe(errors[0]), describe(errors[1]));
  }
}

// requestAbort() from another thread (ncclCommAbort): a rank blocked on a silent peer fails at
// once with the reason, long before its timeout, and tells the peer that then calls; a
// communicator asked to abort while idle fails its next call the same way.
TEST(AbortRequest, FromAnotherThreadEndsABlockedCollectiveWithItsReason) {
  GroupOptions g;
  g.timeout = 30s;
  std::vector<double> seconds(2, 0);
  auto errors = runRanks(2, [&](Communicator& comm) {
    comm.watchAbortRequests();
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(300ms);  // rank 0 is blocked by now; rank 1 then hears of it
      allreduceWith(comm, 5000, DataType::kFloat32, ReduceOp::kSum, AllreduceAlgorithm::kRing);
      return;
    }
    std::thread stopper([&] {
      std::this_thread::sleep_for(100ms);
      comm.requestAbort("stopped from another thread");
    });
    const auto start = Clock::now();
    try {
      allreduceWith(comm, 5000, DataType::kFloat32, ReduceOp::kSum, AllreduceAlgorithm::kRing);
    } catch (...) {
      seconds[0] = std::chrono::duration<double>(Clock::now() - start).count();
      stopper.join();
      throw;
    }
    stopper.join();
  }, g);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(holds<IoError>(errors[r])) << describe(errors[r]);
    EXPECT_NE(describe(errors[r]).find("stopped from another thread"), std::string::npos) << describe(errors[r]);
  }
  EXPECT_LT(seconds[0], 5.0);  // bounded far below the 30 s timeout (not a speed check)
  // Idle: the next call fails, telling its peer.
  errors = runRanks(2, [&](Communicator& comm) {
    if (comm.rank() == 0) comm.requestAbort("stopped while idle");
    barrier(comm);
  }, g);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(describe(errors[r]).find("stopped while idle"), std::string::npos) << describe(errors[r]);
  }
}

// A peer's failure reaches a rank that is between collectives: its next call throws at once.
TEST(IdleRank, LearnsOfPeerFailure) {
  std::vector<std::string> texts(3);
  auto errors = runRanks(3, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      AllreduceOptions opt;
      opt.count = 4;  // null buffers
      allreduce(comm, opt);
    } else {
      std::this_thread::sleep_for(200ms);
      barrier(comm);
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(holds<InvalidArgument>(errors[r])) << describe(errors[r]);
    EXPECT_EQ(describe(errors[r]), describe(errors[0]));
  }
}

// A group made by split() names ranks by their job numbers in its errors: ranks 2 and 3 form a
// group (its ranks 0 and 1), rank 2 never calls, and rank 3's timeout names rank 2, not 0.
TEST(SplitGroup, ErrorsNameTheJobsRanks) {
  GroupOptions g;
  g.timeout = 300ms;
  std::string text, renamed;
  auto errors = runRanks(4, [&](Communicator& comm) {
    if (comm.rank() < 2) return;
    auto group = comm.split({2, 3}, "g");
    EXPECT_EQ(group->jobRank(group->rank()), comm.rank());
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(2s);  // keeps its end open, never calls
      return;
    }
    renamed = group->inJobRanks("rank 0 and rank (1); ranks 0; frank 1; rank 10; rank 1's; rank x; job rank 1");
    try {
      allreduceWith(*group, 5000, DataType::kFloat32, ReduceOp::kSum, AllreduceAlgorithm::kRing);
    } catch (const std::exception& e) {
      text = e.what();
    }
  }, g);
  EXPECT_EQ(renamed, "rank 2 and rank (3); ranks 0; frank 1; rank 10; rank 3's; rank x; job rank 1");
  EXPECT_NE(text.find("failed on rank 3"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 0"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 1"), std::string::npos) << text;
}

}  // namespace
