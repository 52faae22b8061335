// The staged (GPU) collectives' schedule, on the CPU: blocks tile the buffer in whole elements,
// every block goes copy-in, exchange, copy-out in order, the next copy-in starts before the
// current exchange, and no slot is refilled before its previous block's copy-out was waited for.
#include <gtest/gtest.h>

#include <map>

#include "collectives/staging_schedule.h"
#include "common/error.h"

namespace ringfold::sched {
namespace {

using S = StagingStep;

void checkSchedule(size_t bytes, size_t es, size_t blockBytes, size_t slots) {
  SCOPED_TRACE(::testing::Message() << bytes << " bytes, elem " << es << ", block " << blockBytes << ", slots " << slots);
  StagingSchedule s(bytes, es, blockBytes, slots);
  // Blocks tile [0, bytes) with whole elements.
  size_t next = 0;
  for (size_t b = 0; b < s.blocks(); ++b) {
    const StagingBlock blk = s.block(b);
    ASSERT_EQ(next, blk.offset);
    ASSERT_GT(blk.bytes, 0u);
    ASSERT_LE(blk.bytes, s.blockBytes());
    ASSERT_EQ(0u, blk.bytes % es);
    ASSERT_EQ(b % slots, blk.slot);
    next += blk.bytes;
  }
  ASSERT_EQ(bytes, next);
  // Position of each step; each exactly once.
  std::map<std::pair<int, size_t>, size_t> at;
  for (size_t i = 0; i < s.steps().size(); ++i) {
    const S& st = s.steps()[i];
    ASSERT_LT(st.block, s.blocks());
    ASSERT_TRUE(at.emplace(std::pair{static_cast<int>(st.kind), st.block}, i).second) << "step repeated";
  }
  ASSERT_EQ(5 * s.blocks(), s.steps().size());
  auto pos = [&](S::Kind k, size_t b) { return at.at({static_cast<int>(k), b}); };
  for (size_t b = 0; b < s.blocks(); ++b) {
    ASSERT_LT(pos(S::kCopyIn, b), pos(S::kWaitCopyIn, b));
    ASSERT_LT(pos(S::kWaitCopyIn, b), pos(S::kExchange, b));
    ASSERT_LT(pos(S::kExchange, b), pos(S::kCopyOut, b));
    ASSERT_LT(pos(S::kCopyOut, b), pos(S::kWaitCopyOut, b));
    if (b > 0) {
      ASSERT_LT(pos(S::kExchange, b - 1), pos(S::kExchange, b));
    }
    if (b + 1 < s.blocks()) {
      ASSERT_LT(pos(S::kCopyIn, b + 1), pos(S::kExchange, b)) << "no copy-in overlap";
    }
    if (b >= slots) {
      ASSERT_LT(pos(S::kWaitCopyOut, b - slots), pos(S::kCopyIn, b)) << "slot refilled too early";
    }
    if (slots >= 3 && b + 1 < s.blocks()) {
      ASSERT_GT(pos(S::kWaitCopyOut, b), pos(S::kExchange, b + 1)) << "copy-out does not overlap the next exchange";
    }
  }
}

TEST(StagingSchedule, OrderingAndOverlapInvariants) {
  for (size_t slots : {2, 3, 4}) {
    for (size_t es : {1, 2, 4, 8}) {
      for (size_t bytes : {size_t{0}, es, 7 * es, 1000 * es, 4096 * es + es}) {
        for (size_t blockBytes : {es, 3 * es + 1, size_t{1024}, size_t{1} << 20}) checkSchedule(bytes, es, blockBytes, slots);
      }
    }
  }
}

TEST(StagingSchedule, ThreeBlocksInThreeSlots) {
  StagingSchedule s(30, 2, 10, 3);
  ASSERT_EQ(3u, s.blocks());
  const std::vector<S> want = {{S::kCopyIn, 0},  {S::kWaitCopyIn, 0}, {S::kCopyIn, 1},      {S::kExchange, 0},
                               {S::kCopyOut, 0}, {S::kWaitCopyIn, 1}, {S::kCopyIn, 2},      {S::kExchange, 1},
                               {S::kCopyOut, 1}, {S::kWaitCopyIn, 2}, {S::kExchange, 2},    {S::kCopyOut, 2},
                               {S::kWaitCopyOut, 0}, {S::kWaitCopyOut, 1}, {S::kWaitCopyOut, 2}};
  EXPECT_EQ(want, s.steps());
  EXPECT_EQ(9u, StagingSchedule(30, 3, 10).blockBytes());  // rounded down to whole elements
  EXPECT_TRUE(StagingSchedule(0, 4, 16).steps().empty());
  EXPECT_THROW(StagingSchedule(10, 4, 16), InvalidArgument);
  EXPECT_THROW(StagingSchedule(16, 4, 16, 1), InvalidArgument);
}

}  // namespace
}  // namespace ringfold::sched
