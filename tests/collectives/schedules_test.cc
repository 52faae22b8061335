// The pure index math (schedules.h) and the check words (check.h), alone.
#include <gtest/gtest.h>

#include "collectives/check.h"
#include "collectives/schedules.h"

namespace {

using namespace ringfold;

TEST(Schedules, ChunksTileTheBufferInOrder) {
  for (size_t count : {0, 1, 2, 7, 8, 9, 100, 4097}) {
    for (int n : {1, 2, 3, 5, 8, 13}) {
      size_t next = 0, smallest = SIZE_MAX, largest = 0;
      for (int c = 0; c < n; ++c) {
        auto ch = sched::chunk(count, n, c);
        EXPECT_EQ(ch.offset, next) << count << "/" << n << " chunk " << c;
        next += ch.length;
        smallest = std::min(smallest, ch.length);
        largest = std::max(largest, ch.length);
        if (c > 0) {
          EXPECT_LE(ch.length, sched::chunk(count, n, c - 1).length);  // remainders first
        }
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(largest - smallest, 1u);
    }
  }
  EXPECT_EQ(sched::chunk(7, 8, 7).length, 0u);  // count < n: trailing chunks are empty
  EXPECT_EQ(sched::chunk(10, 3, 0).length, 4u);
  EXPECT_EQ(sched::chunk(10, 3, 2).offset, 7u);
}

TEST(Schedules, Segments) {
  EXPECT_EQ(sched::segmentElems(4096, 4), 1024u);
  EXPECT_EQ(sched::segmentElems(3, 8), 1u);
  EXPECT_EQ(sched::segmentCount(0, 10), 1u);  // an empty chunk still carries one message
  EXPECT_EQ(sched::segmentCount(10, 10), 1u);
  EXPECT_EQ(sched::segmentCount(11, 10), 2u);
  sched::Range r{100, 25};
  auto s0 = sched::segment(r, 10, 0), s2 = sched::segment(r, 10, 2);
  EXPECT_EQ(s0.offset, 100u);
  EXPECT_EQ(s0.length, 10u);
  EXPECT_EQ(s2.offset, 120u);
  EXPECT_EQ(s2.length, 5u);
  EXPECT_EQ(sched::segment(sched::Range{5, 0}, 10, 0).length, 0u);
}

TEST(Schedules, RingEndsWithOwnChunk) {
  for (int n : {2, 3, 5, 8}) {
    for (int r = 0; r < n; ++r) {
      // The chunk received at step s is the one sent at step s+1; the last received is r's own.
      for (int s = 0; s + 1 < n - 1; ++s) {
        EXPECT_EQ(sched::ringReduceRecvChunk(r, s, n), sched::ringReduceSendChunk(r, s + 1, n));
      }
      EXPECT_EQ(sched::ringReduceRecvChunk(r, n - 2, n), r);
      // What r sends at step s is what r+1 receives at step s.
      for (int s = 0; s < n - 1; ++s) {
        EXPECT_EQ(sched::ringReduceSendChunk(r, s, n), sched::ringReduceRecvChunk((r + 1) % n, s, n));
        EXPECT_EQ(sched::ringGatherSendChunk(r, s, n), sched::ringGatherRecvChunk((r + 1) % n, s, n));
      }
      EXPECT_EQ(sched::ringGatherSendChunk(r, 0, n), r);
      EXPECT_EQ(sched::ringFoldFirst(r, n), (r + 1) % n);
    }
  }
}

TEST(Schedules, DisseminationRounds) {
  EXPECT_EQ(sched::disseminationRounds(1), 0);
  EXPECT_EQ(sched::disseminationRounds(2), 1);
  EXPECT_EQ(sched::disseminationRounds(3), 2);
  EXPECT_EQ(sched::disseminationRounds(8), 3);
  EXPECT_EQ(sched::disseminationRounds(9), 4);
}

TEST(Schedules, FinalScale) {
  EXPECT_EQ(sched::finalScale(ReduceOp::kAvg, 1.0, 4), 0.25);
  EXPECT_EQ(sched::finalScale(ReduceOp::kSum, 3.0, 4), 3.0);
  EXPECT_EQ(sched::finalScale(ReduceOp::kAvg, 2.0, 8), 0.25);
}

TEST(Schedules, DirectMaxBytesIsTheCostModelCrossover) {
  sched::CostModel m;
  for (int n : {2, 3, 4, 8, 16}) {
    const size_t x = sched::directMaxBytes(n);
    EXPECT_GT(x, 16u << 10) << n;  // small messages go direct
    EXPECT_LT(x, 4u << 20) << n;
    EXPECT_LE(m.direct(x, n), m.ring(x, n));
    EXPECT_GT(m.direct(x + 1024, n), m.ring(x + 1024, n));
  }
  // At 2 ranks the crossover is where ring's halved reduction pays for its extra message:
  // between the 128 KiB where the two were level and the 256 KiB where the ring led (measured).
  EXPECT_NEAR(static_cast<double>(sched::directMaxBytes(2)), 2 * m.alpha / m.gamma, 2.0);
  EXPECT_GT(sched::directMaxBytes(2), 128u << 10);
  EXPECT_LT(sched::directMaxBytes(2), 256u << 10);
  EXPECT_EQ(sched::directMaxBytes(1), 0u);
  sched::CostModel slow;
  slow.alpha = 1.0;  // a crossover past the scratch cap is capped
  EXPECT_EQ(sched::directMaxBytes(2, slow), 4u << 20);
}

TEST(Schedules, RingRoundElems) {
  constexpr size_t K = 1024;
  // n chunks of chunkBytes per round; the whole buffer when it fits or when chunkBytes is 0.
  EXPECT_EQ(sched::ringRoundElems(1000000, 4, 256 * K, 4), 4 * 64 * K);
  EXPECT_EQ(sched::ringRoundElems(100, 4, 256 * K, 4), 100u);
  EXPECT_EQ(sched::ringRoundElems(1000000, 4, 0, 4), 1000000u);
  EXPECT_EQ(sched::ringRoundElems(0, 4, 256 * K, 4), 0u);
  // A chunk smaller than an element still holds one.
  EXPECT_EQ(sched::ringRoundElems(1000, 3, 2, 8), 3u);
}

TEST(Schedules, DirectSegmentBytes) {
  constexpr size_t K = 1024;
  EXPECT_EQ(sched::directSegmentBytes(512 * K, 1024 * K), 256 * K);  // a quarter of the buffer
  EXPECT_EQ(sched::directSegmentBytes(512 * K, 64 * 1024 * K), 512 * K);  // capped at the segment
  EXPECT_EQ(sched::directSegmentBytes(512 * K, 100 * K), 64 * K);  // not below 64 KiB
  EXPECT_EQ(sched::directSegmentBytes(512 * K, 0), 64 * K);
  EXPECT_EQ(sched::directSegmentBytes(4 * K, 1024 * K), 4 * K);  // a smaller segment setting wins
}

TEST(Check, PackUnpackRoundTrip) {
  coll::CheckFields f;
  f.kind = coll::Kind::kBroadcast;
  f.dtype = DataType::kBfloat16;
  f.op = ReduceOp::kMin;
  f.root = 4095;
  f.count = (uint64_t{1} << 40) - 1;
  auto g = coll::unpackCheck(coll::packCheck(f));
  EXPECT_EQ(g.kind, f.kind);
  EXPECT_EQ(g.dtype, f.dtype);
  EXPECT_EQ(g.op, f.op);
  EXPECT_EQ(g.root, f.root);
  EXPECT_EQ(g.count, f.count);
  f.count = 100;
  auto h = f;
  h.count = 101;
  EXPECT_NE(coll::packCheck(f), coll::packCheck(h));
  EXPECT_NE(coll::hashCounts({1, 2, 3}), coll::hashCounts({1, 2, 4}));
  EXPECT_NE(coll::hashCounts({1, 2}), coll::hashCounts({2, 1}));
}

TEST(Check, TagsKeepPointToPointApart) {
  EXPECT_EQ(coll::collectiveTag(0, 0) >> 63, 0u);
  EXPECT_EQ(coll::collectiveTag(~uint64_t{0}, 5) >> 63, 0u);
  EXPECT_EQ(coll::kSendRecvTag >> 63, 1u);
  EXPECT_NE(coll::collectiveTag(1, 0), coll::collectiveTag(0, 1));
}

TEST(Check, DescribesTheOtherSide) {
  coll::CheckFields mine, theirs;
  mine.kind = theirs.kind = coll::Kind::kAllreduceRing;
  mine.dtype = theirs.dtype = DataType::kFloat32;
  mine.count = 100;
  theirs.count = 101;
  transport::CheckMismatch m(1, 7, 200, 204, coll::packCheck(mine), coll::packCheck(theirs));
  EXPECT_EQ(coll::describeMismatch(m, 0),
            "allreduce arguments differ between ranks: rank 1 passed count=101 dtype=float op=sum, rank 0 passed "
            "count=100 dtype=float op=sum");
}

}  // namespace
