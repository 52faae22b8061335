// liveness::Monitor alone, over a fake Links (the interface every backend implements): blame
// following WAITING notices, notices withdrawn or overtaken, ranks waiting on each other,
// aborts (the first wins), and the kernel's view in the blame text. The same Monitor code runs
// inside tcp_uring (transport_tcp_uring_failure_test / _process_test hold it end to end).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "transport/liveness/monitor.h"

namespace ringfold::transport::liveness {
namespace {

using namespace std::chrono_literals;

struct FakeLinks : Links {
  std::vector<std::pair<int, Notice>> notices;
  std::vector<std::pair<int, std::string>> aborts;
  std::map<int, Unacknowledged> unacked;
  std::map<int, int> pids;
  void sendNotice(int peer, const Notice& n) override { notices.emplace_back(peer, n); }
  void sendAbort(int peer, ErrorKind, const std::string& text) override { aborts.emplace_back(peer, text); }
  Unacknowledged unacknowledged(int peer) const override {
    auto it = unacked.find(peer);
    return it == unacked.end() ? Unacknowledged{} : it->second;
  }
  int pid(int peer) const override {
    auto it = pids.find(peer);
    return it == pids.end() ? 0 : it->second;
  }
};

Notice says(uint32_t seq, int waitedOn, std::chrono::milliseconds waited = 5000ms,
            std::chrono::milliseconds silent = 4000ms, uint64_t firstLater = 10) {
  Notice n;
  n.seq = seq;
  n.waitedOn = waitedOn;
  n.waited = waited;
  n.silent = silent;
  n.firstLaterMessage = firstLater;
  return n;
}

// This rank is 0 of 4; `links` reaches ranks 1 to 3.
struct TransportLiveness : ::testing::Test {
  FakeLinks links;
  Monitor monitor;
  void SetUp() override { monitor.attach(links, 0, 4, {false, true, true, true}); }
};

TEST_F(TransportLiveness, BlameFollowsNoticesThroughAChain) {
  monitor.onNotice(1, says(1, 2, 5000ms));
  monitor.onNotice(2, says(1, 3, 4000ms, 3000ms));
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 3);
  EXPECT_EQ(what,
            "rank 1 is alive but said it had waited 5.0 s for rank 2; rank 2 is alive but said it had waited 4.0 s "
            "for rank 3; rank 3 sent nothing for 3.0 s (the time since rank 2 last received anything from rank 3)");
}

TEST_F(TransportLiveness, WithdrawnNoticeIsNotFollowed) {
  monitor.onNotice(1, says(1, 2));
  monitor.onNotice(1, says(2, -1));  // the wait ended
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_EQ(what.rfind("rank 1 sent nothing for 0.0 s (nothing at all since the connection was set up)", 0), 0u)
      << what;
}

TEST_F(TransportLiveness, ALaterMessageWithdrawsANoticeAndAnEarlierOneDoesNot) {
  monitor.onNotice(1, says(1, 2, 5000ms, 4000ms, /*firstLater=*/10));
  monitor.onMessage(1, 9);  // sent before the notice, overtaken on another socket
  EXPECT_EQ(monitor.notice(1).waitedOn, 2);
  monitor.heard(1);
  monitor.onMessage(1, 10);
  EXPECT_EQ(monitor.notice(1).waitedOn, -1);
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_EQ(what, "rank 1 sent nothing for 0.0 s");
}

TEST_F(TransportLiveness, NoticesOutOfOrderAreIgnored) {
  monitor.onNotice(1, says(2, 3));
  monitor.onNotice(1, says(1, -1));  // older: overtaken by notice 2
  EXPECT_EQ(monitor.notice(1).waitedOn, 3);
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 3);
}

TEST_F(TransportLiveness, RanksWaitingOnEachOther) {
  monitor.onNotice(1, says(1, 0));
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_EQ(what,
            "rank 1 is alive but said it had waited 5.0 s for this rank (0), which waits for it: the ranks are "
            "running different collectives, or the same ones in a different order");
  monitor.onNotice(1, says(2, 2));
  monitor.onNotice(2, says(1, 1));
  what.clear();
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_NE(what.find("the ranks wait for each other in a cycle: they are running different collectives"),
            std::string::npos)
      << what;
}

TEST_F(TransportLiveness, AnnounceAndWithdrawReachEveryPeerNumbered) {
  monitor.announce(2, 1500ms);
  monitor.withdraw();
  ASSERT_EQ(links.notices.size(), 6u);
  EXPECT_EQ(links.notices[0].first, 1);
  EXPECT_EQ(links.notices[0].second.seq, 1u);
  EXPECT_EQ(links.notices[0].second.waitedOn, 2);
  EXPECT_EQ(links.notices[0].second.waited, 1500ms);
  EXPECT_EQ(links.notices[1].first, 2);
  EXPECT_EQ(links.notices[3].second.seq, 2u);
  EXPECT_EQ(links.notices[3].second.waitedOn, -1);
}

// One monitor shared by two backends (a composite device's children): rank 0 reaches rank 1
// through `local` and ranks 2, 3 through `remote`. Notices go out through each peer's backend,
// blame follows a notice that came on one backend to a rank reached by the other, and each
// backend aborts on its own.
TEST(TransportLivenessShared, NoticesAndBlameCrossBackends) {
  FakeLinks local, remote;
  Monitor monitor;
  monitor.attach(local, 0, 4, {false, true, false, false});
  monitor.attach(remote, 0, 4, {false, false, true, true});
  monitor.announce(1, 2000ms);
  ASSERT_EQ(local.notices.size(), 1u);
  EXPECT_EQ(local.notices[0].first, 1);
  ASSERT_EQ(remote.notices.size(), 2u);
  EXPECT_EQ(remote.notices[0].first, 2);
  EXPECT_EQ(remote.notices[1].first, 3);
  monitor.onNotice(1, says(1, 3, 6000ms, 5000ms));  // arrived over `local`, names a `remote` rank
  remote.pids[3] = 0;
  remote.unacked[3] = {true, 3, 7000ms};
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 3);
  EXPECT_EQ(what.rfind("rank 1 is alive but said it had waited 6.0 s for rank 3; rank 3 sent nothing for 5.0 s", 0),
            0u)
      << what;
  EXPECT_NE(what.find("its host has acknowledged nothing this rank sent for 7.0 s (3 retransmissions)"),
            std::string::npos)
      << what;
  ASSERT_NE(monitor.abort(local, ErrorKind::kIo, "local gave up"), nullptr);
  EXPECT_EQ(local.aborts.size(), 1u);
  EXPECT_TRUE(remote.aborts.empty());
  EXPECT_TRUE(monitor.aborted(local));
  EXPECT_FALSE(monitor.aborted(remote));
  EXPECT_NE(monitor.onAbort(2, ErrorKind::kIo, "remote's peer gave up"), nullptr);
  EXPECT_TRUE(monitor.aborted(remote));
}

TEST_F(TransportLiveness, TheFirstAbortWins) {
  std::exception_ptr mine = monitor.abort(links, ErrorKind::kMismatch, "ranks disagree");
  ASSERT_NE(mine, nullptr);
  EXPECT_TRUE(monitor.aborted(links));
  EXPECT_EQ(links.aborts.size(), 3u);
  EXPECT_THROW(std::rethrow_exception(mine), MismatchError);
  EXPECT_EQ(monitor.onAbort(2, ErrorKind::kIo, "late"), nullptr);
  EXPECT_EQ(monitor.abort(links, ErrorKind::kIo, "again"), nullptr);
  EXPECT_EQ(links.aborts.size(), 3u);
}

TEST_F(TransportLiveness, APeersAbortNamesItsRank) {
  std::exception_ptr e = monitor.onAbort(2, ErrorKind::kIo, "rank 2 gave up");
  ASSERT_NE(e, nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const IoError& x) {
    EXPECT_EQ(x.peerRank(), 2);
  }
  EXPECT_TRUE(links.aborts.empty());
}

TEST_F(TransportLiveness, KernelViewJoinsTheBlame) {
  links.unacked[1] = {true, 4, 6000ms};
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_NE(what.find("; its host has acknowledged nothing this rank sent for 6.0 s (4 retransmissions): the network "
                      "between this rank and rank 1 is down, or its host is"),
            std::string::npos)
      << what;
  links.unacked[2] = links.unacked[3] = {true, 2, 5000ms};
  what.clear();
  monitor.blame(1, what);
  // The time since any host acknowledged anything: the least of them.
  EXPECT_NE(what.find("; no rank's host has acknowledged anything this rank (0) sent for 5.0 s (4 retransmissions): "
                      "this rank's own network link is likely down"),
            std::string::npos)
      << what;
}

// A rank cut off while it only waited to receive: its WAITING notices (half way to the timeout)
// are the only data it sent, queued and never acknowledged by any peer's host (tcp_uring reports
// them from TCP_INFO's window probes; tcp_uring_process_test holds that part). It names its own
// link, and still the rank it waited on, last, for ringfoldrun's summary.
TEST_F(TransportLiveness, CutOffRankWithNothingInFlightNamesItsOwnLink) {
  for (int p = 1; p < 4; ++p) links.unacked[p] = {true, 3, 2500ms, true};
  links.pids[1] = getpid();  // running
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_EQ(what,
            "rank 1 sent nothing for 0.0 s (nothing at all since the connection was set up); no rank's host "
            "has acknowledged anything this rank (0) sent for 2.5 s (3 retransmissions): this rank's own "
            "network link is likely down; the process of rank 1 (pid " +
                std::to_string(getpid()) + ") is running");
}

// The same rank reached through a notice: the silent rank at the end of the chain.
TEST_F(TransportLiveness, CutOffRankNamesItsOwnLinkAtTheEndOfAChain) {
  monitor.onNotice(1, says(1, 3, 3000ms, 2000ms));
  for (int p = 1; p < 4; ++p) links.unacked[p] = {true, 2, 2600ms, true};
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 3);
  EXPECT_NE(what.find("rank 3 sent nothing for 2.0 s (the time since rank 1 last received anything from rank 3); "
                      "no rank's host has acknowledged anything this rank (0) sent for 2.6 s (2 retransmissions): "
                      "this rank's own network link is likely down"),
            std::string::npos)
      << what;
}

// A peer whose host alone went silent, the others acknowledging: that peer and the network to it
// are named, never this rank's own link.
TEST_F(TransportLiveness, APeerAloneSilentIsNamedNotThisRanksLink) {
  links.unacked[1] = {true, 4, 4000ms, true};
  links.unacked[2] = links.unacked[3] = {false, 0, 10ms, true};
  std::string what;
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_NE(what.find("; its host has acknowledged nothing this rank sent for 4.0 s (4 retransmissions): the network "
                      "between this rank and rank 1 is down, or its host is"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find("own network link"), std::string::npos) << what;
  EXPECT_FALSE(monitor.othersUnacknowledged(1));
  // Rank 1's host answers while the others do not: their hosts (or the way to them) failed,
  // not this rank's link, and rank 1 is only silent.
  links.unacked[1] = {false, 0, 10ms, true};
  links.unacked[2] = links.unacked[3] = {true, 4, 4000ms, true};
  what.clear();
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_EQ(what, "rank 1 sent nothing for 0.0 s (nothing at all since the connection was set up)");
}

// Same-host peers (shared memory, Unix sockets: no kernel view, not tracked). Two hosts, this
// rank (0) and rank 1 on one, ranks 2 and 3 on the other: the other host's silence is its own
// link's as much as this one's, so the network to it is named (fault matrix cell 119's live
// host), unless the data never left this host (the cut host's side): then this rank's own link,
// whichever rank it waited on.
TEST(TransportLivenessShared, SameHostPeersNameTheLinkOnlyWhenDataCannotLeaveThisHost) {
  FakeLinks local, remote;
  Monitor monitor;
  monitor.attach(local, 0, 4, {false, true, false, false});
  monitor.attach(remote, 0, 4, {false, false, true, true});
  remote.unacked[2] = remote.unacked[3] = {true, 3, 3000ms, true, /*unsent=*/false};
  EXPECT_FALSE(monitor.othersUnacknowledged(2));
  std::string what;
  EXPECT_EQ(monitor.blame(2, what), 2);
  EXPECT_NE(what.find("the network between this rank and rank 2 is down, or its host is"), std::string::npos) << what;
  EXPECT_EQ(what.find("own network link"), std::string::npos) << what;

  remote.unacked[2] = remote.unacked[3] = {true, 3, 3000ms, true, /*unsent=*/true};
  EXPECT_TRUE(monitor.othersUnacknowledged(2));
  what.clear();
  EXPECT_EQ(monitor.blame(2, what), 2);
  EXPECT_NE(what.find("no rank's host has acknowledged anything this rank (0) sent for 3.0 s (3 retransmissions): "
                      "this rank's own network link is likely down"),
            std::string::npos)
      << what;
  // Waiting on the silent same-host rank: every other host is silent too, so the link is named.
  what.clear();
  EXPECT_EQ(monitor.blame(1, what), 1);
  EXPECT_NE(what.find("this rank's own network link is likely down"), std::string::npos) << what;
  // The data to the rank waited on alone never left: that is evidence enough.
  remote.unacked[3].unsent = false;
  EXPECT_TRUE(monitor.othersUnacknowledged(2));
  remote.unacked[2].unsent = false;
  EXPECT_FALSE(monitor.othersUnacknowledged(2));
}

// Without same-host peers, every other host silent is enough (fault matrix cell 46: a rank per
// host), and with no other tracked peer there is nothing to compare with.
TEST(TransportLivenessShared, OneRankPerHost) {
  FakeLinks one, remote;
  Monitor alone;
  alone.attach(one, 0, 3, {false, true, false});
  alone.attach(remote, 0, 3, {false, false, true});
  remote.unacked[2] = {true, 3, 3000ms, true};
  EXPECT_FALSE(alone.othersUnacknowledged(2));  // rank 1 is on this host
  one.unacked[1] = {false, 0, 10ms, true};      // rank 1 is on a host of its own, which answers
  EXPECT_FALSE(alone.othersUnacknowledged(2));
  one.unacked[1] = {true, 2, 2000ms, true};  // and then does not
  EXPECT_TRUE(alone.othersUnacknowledged(2));
  std::string what;
  EXPECT_EQ(alone.blame(2, what), 2);
  EXPECT_NE(what.find("no rank's host has acknowledged anything this rank (0) sent for 2.0 s (3 retransmissions): "
                      "this rank's own network link is likely down"),
            std::string::npos)
      << what;
}

TEST_F(TransportLiveness, AnExitedProcessIsNamed) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  links.pids[1] = child;
  std::string what;
  monitor.blame(1, what);
  EXPECT_NE(what.find("; the process of rank 1 (pid " + std::to_string(child) + ") has exited"), std::string::npos)
      << what;
}

// A group inside another (a hierarchical allreduce's host group inside the job's communicator):
// this rank is job rank 1, group rank 1 of the host group {job 0, job 1}. Its waits are
// announced to the job's peers too, in the job's numbers; and a group peer that said nothing in
// the group but, in the job's communicator, that it waits for a rank outside the group is
// followed there: the frozen rank is named as "job rank N", and the culprit is outside (-1).
struct NestedLiveness : ::testing::Test {
  FakeLinks groupLinks, jobLinks;
  Monitor group;
  std::shared_ptr<Monitor> job = std::make_shared<Monitor>();
  void SetUp() override {
    group.attach(groupLinks, 1, 2, {true, false});
    job->attach(jobLinks, 1, 4, {true, false, true, true});
    group.setOuter(job, {0, 1}, {});
  }
};

TEST_F(NestedLiveness, AWaitIsAnnouncedAndWithdrawnInTheEnclosingGroupToo) {
  group.announce(0, 1500ms);
  ASSERT_EQ(groupLinks.notices.size(), 1u);
  EXPECT_EQ(groupLinks.notices[0].second.waitedOn, 0);
  ASSERT_EQ(jobLinks.notices.size(), 3u);  // job ranks 0, 2, 3
  EXPECT_EQ(jobLinks.notices[0].first, 0);
  EXPECT_EQ(jobLinks.notices[2].first, 3);
  EXPECT_EQ(jobLinks.notices[2].second.waitedOn, 0);
  EXPECT_EQ(jobLinks.notices[2].second.waited, 1500ms);
  group.withdraw();
  ASSERT_EQ(jobLinks.notices.size(), 6u);
  EXPECT_EQ(jobLinks.notices[5].second.waitedOn, -1);
  EXPECT_EQ(jobLinks.notices[5].second.seq, 2u);
}

TEST_F(NestedLiveness, BlameFollowsWhatAPeerSaidInTheEnclosingGroup) {
  std::string what;
  EXPECT_EQ(group.blame(0, what), 0);  // nothing said anywhere: the peer itself
  EXPECT_EQ(what.rfind("rank 0 sent nothing for", 0), 0u) << what;
  job->onNotice(0, says(1, 2, 2500ms, 2600ms));  // job rank 0 waits for job rank 2 (cross-host)
  jobLinks.pids[2] = getpid();                   // a running process, not named
  what.clear();
  EXPECT_EQ(group.blame(0, what), -1);
  EXPECT_EQ(what,
            "job rank 0 is alive but said it had waited 2.5 s for job rank 2; job rank 2 sent nothing for 2.6 s (the "
            "time since job rank 0 last received anything from job rank 2)");
  // What the group's peer says in the group comes first.
  group.onNotice(0, says(1, 1, 2500ms));
  what.clear();
  EXPECT_EQ(group.blame(0, what), 0);
  EXPECT_NE(what.find("this rank (1), which waits for it"), std::string::npos) << what;
}

TEST(NestedLivenessNumbers, ARankFoundOutsideIsNamedByItsJobNumberAndOneInsideByItsGroupNumber) {
  // The enclosing group is a process set of job ranks {4, 5, 6, 7}; this group is its ranks
  // {1, 3, 0} (job 5, 7, 4), and this rank is the group's rank 0 (set rank 1, job 5).
  FakeLinks groupLinks, setLinks;
  Monitor group;
  auto set = std::make_shared<Monitor>();
  group.attach(groupLinks, 0, 3, {false, true, true});
  set->attach(setLinks, 1, 4, {true, false, true, true});
  group.setOuter(set, {1, 3, 0}, {4, 5, 6, 7});
  set->onNotice(3, says(1, 2, 3000ms, 2000ms));  // set rank 3 (group rank 1) waits for set rank 2
  std::string what;
  EXPECT_EQ(group.blame(1, what), -1);
  EXPECT_EQ(what.rfind("job rank 7 is alive but said it had waited 3.0 s for job rank 6; job rank 6 sent nothing", 0),
            0u)
      << what;
  set->onNotice(3, says(2, 0, 3000ms, 2000ms));  // now for set rank 0: the group's rank 2
  what.clear();
  EXPECT_EQ(group.blame(1, what), 2);
  EXPECT_NE(what.find("job rank 4 sent nothing for 2.0 s"), std::string::npos) << what;
  EXPECT_THROW(group.setOuter(set, {1, 3}, {}), Error);           // one outer rank per group rank
  EXPECT_THROW(group.setOuter(set, {1, 3, 9}, {}), Error);        // out of the outer's range
  EXPECT_THROW(group.setOuter(set, {1, 3, 0}, {4, 5}), Error);    // one job rank per outer rank
}

}  // namespace
}  // namespace ringfold::transport::liveness
