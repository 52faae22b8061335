// failure_cause.h: a rank's error line from its stderr, whether it blames a peer, and which
// rank's failure came first.
#include <gtest/gtest.h>

#include "launcher/failure_cause.h"

namespace ringfold::launcher {
namespace {

ErrorLines feed(std::initializer_list<const char*> lines) {
  ErrorLines e;
  int64_t t = 1;
  for (const char* l : lines) e.feed(l, t++);
  return e;
}

TEST(FailureCause, ErrorLineIsTheLastTracebacksException) {
  ErrorLines e = feed({"epoch 1", "Traceback (most recent call last):", "  File \"x.py\", line 5, in <module>",
                       "    raise ValueError(\"boom\")", "ValueError: boom", "[ringfold 1 W 00:00:00.000 x.cc:1] bye"});
  EXPECT_TRUE(e.raised());
  EXPECT_EQ(e.errorLine(), "ValueError: boom");
  EXPECT_EQ(e.raisedAtNs(), 5);
  ErrorLines plain = feed({"starting", "starter_rank failed: something broke", ""});
  EXPECT_FALSE(plain.raised());
  EXPECT_EQ(plain.errorLine(), "starter_rank failed: something broke");
}

TEST(FailureCause, ErrorsThatNameAnotherRankOrAtLeastOneRankBlameAPeer) {
  EXPECT_FALSE(blameOf("ValueError: boom on rank 1", 1, 3).peer);
  EXPECT_FALSE(blameOf("all_reduce_perf: rank 0: invalid count", 0, 3).peer);
  Blame crashed = blameOf("HorovodInternalError: allreduce: the process of rank 2 exited or crashed", 0, 3);
  EXPECT_TRUE(crashed.peer);
  EXPECT_EQ(crashed.rank, 2);
  Blame relayed = blameOf("allreduce failed on rank 1: connection to rank 2 reset", 0, 3);
  EXPECT_EQ(relayed.rank, 2);  // the last rank named is the one the failure started at
  EXPECT_EQ(blameOf("allreduce failed on rank 1: bad input", 0, 3).rank, 1);
  EXPECT_FALSE(blameOf("allreduce failed on rank 1: bad input", 1, 3).peer);  // its own
  Blame shutdown = blameOf("ringfold.exceptions.HorovodInternalError: ringfold was shut down "
                           "(shutdown() was called on at least one rank) before this operation ran", 0, 3);
  EXPECT_TRUE(shutdown.peer);
  EXPECT_EQ(shutdown.rank, -1);
  EXPECT_FALSE(blameOf("rank 7 is not in this job of 3", 0, 3).peer);  // out of range
  EXPECT_FALSE(blameOf("my_rank 2 and franks 1", 0, 3).peer);          // not the word "rank"
  // Its own link, or a store nobody reached: not the peer it waited for.
  EXPECT_FALSE(blameOf("allreduce failed on rank 2: rank 1 sent nothing for 5.0 s; no rank's host has acknowledged "
                       "anything this rank (2) sent for 5.0 s (4 retransmissions): this rank's own network link "
                       "is likely down", 2, 4).peer);
  EXPECT_FALSE(blameOf("ringfold_init: no other rank reached the rendezvous store at 10.0.0.1:29500 (hosted by this "
                       "rank) within 8000 ms: rank 1 did not publish its host identity (rf/host/1) within 8000 ms",
                       0, 4).peer);
}

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kFirstExit = 1000 * kSecond;  // when the first failed exit was seen

RankOutcome failed(int rank, int seq, const std::string& line, bool raised = false) {
  return {rank, seq, false, line, raised, raised ? kFirstExit - kSecond / 10 : 0};
}
RankOutcome stopped(int rank, const std::string& line, bool raised = false, int64_t at = 0) {
  return {rank, -1, true, line, raised, at};
}

const char* kShutDown = "HorovodInternalError: ringfold was shut down (shutdown() was called on at least one rank)";

TEST(FailureCause, TheRankThatRaisedIsTheCauseNotTheVictimThatExitedFirst) {
  // Rank 1 raised and was still in its exit handlers when ranks 0 and 2 exited.
  Cause c = chooseCause({failed(0, 0, kShutDown, true), stopped(1, "ValueError: boom", true, kFirstExit - kSecond),
                         failed(2, 1, kShutDown, true)}, 3, kFirstExit);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.rule, 2);
  // Of two stopped ranks that printed an exception, the later one (before the first exit): an
  // earlier traceback was handled and the rank went on.
  c = chooseCause({failed(0, 0, kShutDown, true), stopped(1, "KeyError: 'x'", true, kFirstExit - 20 * kSecond),
                   stopped(2, "ValueError: boom", true, kFirstExit - kSecond / 2)}, 3, kFirstExit);
  EXPECT_EQ(c.rank, 2);
  // One long before the first failure is old news: not the cause.
  c = chooseCause({failed(0, 0, kShutDown, true), stopped(1, "KeyError: 'x'", true, kFirstExit - 300 * kSecond)},
                  2, kFirstExit);
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.rule, 4);
  // It exited on its own, after a victim: still the cause.
  c = chooseCause({failed(0, 0, kShutDown, true), failed(1, 1, "ValueError: boom", true), stopped(2, "")}, 3,
                  kFirstExit);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.rule, 1);
  // A crash without output, the others naming it.
  c = chooseCause({failed(0, 0, "the process of rank 2 exited or crashed"), stopped(1, ""), failed(2, 1, "")}, 3,
                  kFirstExit);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.rule, 1);
}

TEST(FailureCause, FallsBackToTheBlamedRankThenToTheFirstFailure) {
  // Rank 2 froze: it never failed; the others time out naming it.
  Cause c = chooseCause({failed(0, 0, "rank 2 sent nothing for 60 s"), failed(1, 1, "rank 2 sent nothing for 60 s"),
                         stopped(2, "")}, 3, kFirstExit);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.rule, 3);
  c = chooseCause({failed(0, 1, kShutDown), failed(1, 0, kShutDown), stopped(2, "loading data")}, 3, kFirstExit);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.rule, 4);
  EXPECT_EQ(chooseCause({stopped(0, ""), stopped(1, "")}, 2, kFirstExit).rank, -1);
}

}  // namespace
}  // namespace ringfold::launcher
