// The pure index math (schedules.h) and the check words (check.h), alone.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/check.h"
#include "collectives/collective_schedules.h"
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

// ---- schedules as descriptions (collective_schedules.h) ----

using Messages = std::map<std::tuple<int, int, uint32_t>, std::vector<std::pair<size_t, size_t>>>;

// Every message a rank's schedule sends (own sends and forwards) and receives, keyed by
// (from, to, tag step), in the order the executor posts them within that key.
void collect(const sched::Schedule& s, int rank, Messages& sent, Messages& received) {
  for (size_t i = 0; i < s.ownSends(); ++i) {
    const sched::OwnSend o = s.ownSend(i);
    sent[{rank, o.peer, o.sub}].push_back({o.range.offset, o.range.length});
  }
  for (int l = 0; l < s.lanes(); ++l) {
    const sched::Lane lane = s.lane(l);
    for (size_t u = 0; u < lane.units; ++u) {
      const sched::Unit un = s.unit(l, u);
      const size_t receives = un.receives == sched::kLaneGroup ? lane.group : un.receives;
      EXPECT_LE(receives, lane.group);
      for (size_t i = 0; i < receives; ++i) {
        received[{s.peer(l, u, i), rank, un.sub}].push_back({un.range.offset, un.range.length});
      }
      if (un.forwardTo >= 0) sent[{rank, un.forwardTo, un.forwardSub}].push_back({un.range.offset, un.range.length});
      if (un.forwardAlso >= 0) {
        EXPECT_GE(un.forwardTo, 0);
        sent[{rank, un.forwardAlso, un.forwardSub}].push_back({un.range.offset, un.range.length});
      }
      if (un.into == sched::Place::kSlot) {
        EXPECT_GT(lane.slotElems, 0u);
        EXPECT_LE(un.range.length, lane.slotElems);
      }
    }
  }
}

// Every send is received, with the same range, in order (the transport pairs equal tags FIFO).
template <typename Make>
void expectMessagesPairUp(int n, Make make) {
  Messages sent, received;
  for (int r = 0; r < n; ++r) collect(*make(r), r, sent, received);
  EXPECT_EQ(sent, received) << "n=" << n;
}

TEST(Schedules, RingAllreduceMessagesPairUp) {
  for (int n : {2, 3, 5}) {
    for (size_t count : {0, 1, 7, 100, 1000}) {
      for (size_t seg : {1, 3, 64}) {
        expectMessagesPairUp(n, [&](int r) {
          return std::make_unique<sched::RingAllreduceSchedule>(r, n, count, seg, false, false);
        });
      }
    }
  }
}

TEST(Schedules, RingReduceScatterAndAllgatherMessagesPairUp) {
  for (int n : {2, 3, 5}) {
    for (size_t block : {0, 1, 10, 33}) {
      for (size_t seg : {1, 4, 64}) {
        std::vector<sched::Range> even;
        for (int c = 0; c < n; ++c) even.push_back({c * block, block});
        expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::RingReduceScatterSchedule>(r, even, seg); });
        std::vector<sched::Range> blocks;
        for (int c = 0, off = 0; c < n; ++c) {  // allgatherv: uneven blocks, some empty
          const size_t len = (block + c * 7) % 23;
          blocks.push_back({static_cast<size_t>(off), len});
          off += static_cast<int>(len);
        }
        expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::RingAllgatherSchedule>(r, blocks, seg); });
        expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::RingReduceScatterSchedule>(r, blocks, seg); });
      }
    }
  }
}

// Chain broadcast: the hello and the segments pair up along the chain for every root; only the
// root sends segments of its own, the last rank of the chain forwards nothing, and no data
// receive is posted before the hello has been received.
TEST(Schedules, ChainBroadcastMessagesPairUp) {
  constexpr size_t kSeg = 4;
  for (int n : {2, 3, 5}) {
    for (int root = 0; root < n; ++root) {
      for (size_t count : {size_t{0}, size_t{1}, sched::ChainBroadcastSchedule::kWindow * kSeg + kSeg + 1}) {
        expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::ChainBroadcastSchedule>(r, n, root, count, kSeg); });
        const size_t segments = sched::segmentCount(count, kSeg);
        for (int r = 0; r < n; ++r) {
          const sched::ChainBroadcastSchedule s(r, n, root, count, kSeg);
          ASSERT_EQ(s.ownSends(), r == root ? 1 + segments : 1u);
          EXPECT_EQ(s.ownSend(0).range.length, 0u);  // the hello
          EXPECT_EQ(s.lane(0).units, 1u);
          EXPECT_EQ(s.unit(0, 0).range.length, 0u);
          EXPECT_EQ(s.lane(1).units, r == root ? 0u : segments);
          EXPECT_EQ(s.lane(1).window, sched::ChainBroadcastSchedule::kWindow);
          EXPECT_EQ(s.pacing().sendWindow, sched::ChainBroadcastSchedule::kSendWindow);
          const bool last = sched::mod(r - root, n) == n - 1;
          for (size_t k = 0; k < s.lane(1).units; ++k) {
            const sched::Unit un = s.unit(1, k);
            EXPECT_EQ(un.into, sched::Place::kDst);
            EXPECT_EQ(un.ownAt, -1);
            EXPECT_EQ(un.forwardTo, last ? -1 : (r + 1) % n);
            if (k == 0) {
              EXPECT_EQ(un.gate.kind, sched::Gate::kForward);
              EXPECT_EQ(un.gate.index, 0u);
            }
          }
        }
      }
    }
  }
}

// Chain reduce, n = 1..9, every root, counts around the slot window (awkward counts and
// segments): the hello and the segments pair up along the chain root+1 -> ... -> root; only
// the head sends segments of its own, only the root folds into recvbuf (with the final scale,
// each element once) and forwards nothing, interior ranks fold in the slot and forward it, a
// slot is reused only after the forward that read it, and following the messages down the
// chain gives every segment the fold order root+1, root+2, ..., root.
TEST(Schedules, ChainReduceMessagesPairUpAndFoldInChainOrder) {
  constexpr size_t W = sched::ChainReduceSchedule::kWindow;
  for (int n = 1; n <= 9; ++n) {
    for (int root = 0; root < n; ++root) {
      for (size_t seg : {size_t{1}, size_t{3}, size_t{4}}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, W * seg + seg + 1, (2 * W + 1) * seg - 1}) {
          expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::ChainReduceSchedule>(r, n, root, count, seg); });
          const size_t segments = sched::segmentCount(count, seg);
          std::vector<int> cover(count, 0);
          // Per segment, the ranks folded into each message in flight, FIFO per (from, to).
          std::map<std::pair<int, int>, std::vector<std::vector<int>>> wire;
          std::vector<std::vector<int>> result(segments);
          for (int p = 0; p < n; ++p) {  // ranks in chain order: root+1 first, the root last
            const int r = (root + 1 + p) % n;
            const sched::ChainReduceSchedule s(r, n, root, count, seg);
            SCOPED_TRACE(::testing::Message() << "n=" << n << " root=" << root << " count=" << count << " seg=" << seg
                                              << " rank=" << r);
            EXPECT_EQ(s.position(), p);
            ASSERT_EQ(s.lanes(), 1);
            const sched::Lane lane = s.lane(0);
            EXPECT_EQ(s.pacing().sendWindow, sched::ChainReduceSchedule::kSendWindow);
            if (n == 1) {  // no messages: own, scaled, into recvbuf
              EXPECT_EQ(s.ownSends(), 0u);
              ASSERT_EQ(lane.units, segments);
              for (size_t u = 0; u < lane.units; ++u) {
                const sched::Unit un = s.unit(0, u);
                EXPECT_EQ(un.receives, 0u);
                EXPECT_EQ(un.ownAt, 0);
                EXPECT_TRUE(un.last);
                EXPECT_EQ(un.foldInto, sched::Place::kDst);
                for (size_t e = 0; e < un.range.length; ++e) ++cover[un.range.offset + e];
              }
              continue;
            }
            const bool head = p == 0, isRoot = r == root;
            ASSERT_EQ(s.ownSends(), head ? 1 + segments : 1u);
            EXPECT_EQ(s.ownSend(0).range.length, 0u);  // the hello, to rank+1
            EXPECT_EQ(s.ownSend(0).peer, (r + 1) % n);
            EXPECT_EQ(s.ownSend(0).sub, s.unit(0, 0).sub);
            EXPECT_EQ(s.unit(0, 0).range.length, 0u);  // the hello from rank-1
            EXPECT_EQ(s.unit(0, 0).ownAt, -1);
            EXPECT_EQ(s.unit(0, 0).forwardTo, -1);
            EXPECT_EQ(s.peer(0, 0, 0), sched::mod(r - 1, n));
            ASSERT_EQ(lane.units, head ? 1u : 1 + segments);
            EXPECT_EQ(lane.window, W);
            EXPECT_EQ(lane.group, 1u);
            if (head) {
              for (size_t k = 0; k < segments; ++k) {
                const sched::OwnSend o = s.ownSend(1 + k);
                EXPECT_TRUE(o.stage);  // preScaled
                EXPECT_EQ(o.peer, (r + 1) % n);
                wire[{r, o.peer}].push_back({r});
              }
              continue;
            }
            for (size_t u = 1; u < lane.units; ++u) {
              const sched::Unit un = s.unit(0, u);
              const size_t k = u - 1;
              EXPECT_EQ(un.into, sched::Place::kSlot);
              EXPECT_EQ(un.ownAt, 1);  // acc = received op own
              EXPECT_EQ(un.last, isRoot);
              auto& in = wire[{sched::mod(r - 1, n), r}];
              ASSERT_FALSE(in.empty());
              std::vector<int> acc = in.front();
              in.erase(in.begin());
              acc.push_back(r);
              if (isRoot) {
                EXPECT_EQ(un.foldInto, sched::Place::kDst);
                EXPECT_EQ(un.forwardTo, -1);
                EXPECT_EQ(un.gate.kind, sched::Gate::kNone);
                for (size_t e = 0; e < un.range.length; ++e) ++cover[un.range.offset + e];
                result[k] = acc;
                continue;
              }
              EXPECT_EQ(un.foldInto, sched::Place::kSlot);
              EXPECT_EQ(un.forwardFrom, sched::Place::kSlot);
              EXPECT_EQ(un.forwardTo, (r + 1) % n);
              wire[{r, un.forwardTo}].push_back(acc);
              if (u > W) {  // the slot's previous user forwarded from it: that send must be done
                EXPECT_EQ(un.gate.kind, sched::Gate::kForward);
                EXPECT_EQ(un.gate.index % W, u % W);
                EXPECT_EQ(un.gate.index, u - W);
                EXPECT_TRUE(un.gate.retire);
              }
            }
          }
          for (size_t e = 0; e < count; ++e) EXPECT_EQ(cover[e], 1) << "n=" << n << " root=" << root << " e=" << e;
          if (n == 1) continue;
          std::vector<int> order;
          for (int p = 0; p < n; ++p) order.push_back((root + 1 + p) % n);
          for (size_t k = 0; k < segments; ++k) EXPECT_EQ(result[k], order) << "segment " << k;
          for (const auto& [link, left] : wire) EXPECT_TRUE(left.empty()) << link.first << "->" << link.second;
        }
      }
    }
  }
}

// The double binary tree: each tree holds every rank once, with one root, parents and children
// that agree, depth ceil(log2 n); leaves of one tree are interior in the other (at odd n one
// rank is interior in both, no more).
TEST(Schedules, DoubleBinaryTreeShape) {
  for (int n = 1; n <= 130; ++n) {
    const int depth = n == 1 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(n - 1));  // ceil(log2 n)
    std::vector<int> interior(n, 0), leaves(n, 0);
    for (int t = 0; t < 2; ++t) {
      int roots = 0, deepest = 0;
      for (int r = 0; r < n; ++r) {
        const sched::TreeNode node = sched::treeNode(r, n, t);
        if (node.parent < 0) ++roots;
        for (int c : node.child) {
          if (c < 0) continue;
          ASSERT_LT(c, n);
          EXPECT_EQ(sched::treeNode(c, n, t).parent, r) << "n=" << n << " tree " << t;
        }
        if (node.child[1] >= 0) {
          EXPECT_GE(node.child[0], 0);
        }
        if (node.parent >= 0) {
          const sched::TreeNode up = sched::treeNode(node.parent, n, t);
          EXPECT_TRUE(up.child[0] == r || up.child[1] == r) << "n=" << n << " rank " << r;
        }
        (node.children() > 0 ? interior : leaves)[r] += n > 1 ? 1 : 0;
        int d = 0;  // depth of r: walk up (at most n steps)
        for (int at = r; sched::treeNode(at, n, t).parent >= 0 && d <= n; ++d) at = sched::treeNode(at, n, t).parent;
        deepest = std::max(deepest, d);
        EXPECT_EQ(sched::treeDepth(r, n, t), d) << "n=" << n << " rank " << r << " tree " << t;
        if (n > 1 && node.parent >= 0) {
          // The broadcast lane of tree t says how late its segments come: this rank's depth.
          const sched::TreeAllreduceSchedule tree(r, n, 1024, 64, false);
          EXPECT_EQ(tree.lane(1 + t).lateness, d) << "n=" << n << " rank " << r << " tree " << t;
        }
      }
      EXPECT_EQ(roots, 1) << "n=" << n;
      EXPECT_EQ(deepest, depth) << "n=" << n << " tree " << t;
    }
    if (n == 1) continue;
    int both = 0;
    for (int r = 0; r < n; ++r) {
      both += interior[r] == 2;
      if (n % 2 == 0) {
        EXPECT_EQ(leaves[r], 1) << "n=" << n << " rank " << r;
      }
    }
    EXPECT_LE(both, n % 2) << "n=" << n;
  }
}

// Tree allreduce: messages pair up; every segment is folded once at its tree's root with the
// final scale; broadcast receives are gated on the send that reads the same place.
TEST(Schedules, TreeAllreduceMessagesPairUp) {
  for (int n : {2, 3, 4, 5, 7, 8, 13}) {
    for (size_t count : {0, 1, 2, 7, 100, 1000}) {
      for (size_t seg : {1, 3, 64}) {
        expectMessagesPairUp(n, [&](int r) { return std::make_unique<sched::TreeAllreduceSchedule>(r, n, count, seg, r % 2 == 0); });
        std::map<std::pair<size_t, size_t>, int> lastFolds;
        for (int r = 0; r < n; ++r) {
          const sched::TreeAllreduceSchedule s(r, n, count, seg, true);
          EXPECT_EQ(s.ownSend(0).range.length, 0u);  // the hello
          EXPECT_EQ(s.peer(0, 0, 0), sched::mod(r - 1, n));
          for (size_t u = 1; u < s.lane(0).units; ++u) {
            const sched::Unit un = s.unit(0, u);
            EXPECT_GE(un.receives, 1u);
            EXPECT_EQ(un.ownAt, 0);
            if (un.last && un.range.length > 0) ++lastFolds[{un.range.offset, un.range.length}];
          }
          ASSERT_EQ(s.lanes(), 3);
          EXPECT_TRUE(s.pacing().interleaveLanes);
          for (int l = 1; l < 3; ++l) {
            for (size_t u = 0; u < s.lane(l).units; ++u) {
              const sched::Unit un = s.unit(l, u);
              EXPECT_EQ(s.peer(l, u, 0), sched::treeNode(r, n, l - 1).parent);
              EXPECT_NE(un.gate.kind, sched::Gate::kNone);
              EXPECT_TRUE(un.gate.retire);
              if (un.gate.kind == sched::Gate::kForward) {
                EXPECT_EQ(s.unit(0, un.gate.index).range.offset, un.range.offset);
              } else {
                EXPECT_EQ(s.ownSend(un.gate.index).range.offset, un.range.offset);
              }
            }
          }
        }
        size_t covered = 0;
        for (const auto& [range, folds] : lastFolds) {
          EXPECT_EQ(folds, 1);
          covered += range.second;
        }
        EXPECT_EQ(covered, count) << "n=" << n << " count=" << count << " seg=" << seg;
      }
    }
  }
}

TEST(Schedules, DirectMessagesPairUpAndFoldInRankOrder) {
  for (int n : {2, 3, 4}) {
    for (size_t count : {0, 5, 100}) {
      expectMessagesPairUp(n, [&](int r) {
        return std::make_unique<sched::DirectAllreduceSchedule>(r, n, count, 16, false, false);
      });
      for (int r = 0; r < n; ++r) {
        const sched::DirectAllreduceSchedule s(r, n, count, 16, false, true);
        const sched::Lane lane = s.lane(0);
        ASSERT_EQ(lane.group, static_cast<size_t>(n - 1));
        for (size_t k = 0; k < lane.units; ++k) {
          const sched::Unit un = s.unit(0, k);
          // Operands in rank order: the receives from every other rank, own at position r.
          EXPECT_EQ(un.ownAt, r);
          for (size_t i = 0; i < lane.group; ++i) EXPECT_EQ(s.peer(0, k, i), static_cast<int>(i) < r ? static_cast<int>(i) : static_cast<int>(i) + 1);
          EXPECT_TRUE(un.last);
          // In place, the fold waits for the segment's last own send.
          ASSERT_NE(un.foldAfterOwn, sched::kNoSend);
          for (size_t i = 0; i < s.ownSends(); ++i) {
            const sched::Range sent = s.ownSend(i).range;
            if (sent.offset == un.range.offset && sent.length == un.range.length) {
              EXPECT_LE(i, un.foldAfterOwn);
            }
          }
          EXPECT_EQ(s.ownSend(un.foldAfterOwn).range.offset, un.range.offset);
        }
      }
    }
  }
}

// Ring allreduce: each rank's reduce-scatter ends with the folds of its own chunk (with the final
// scale), an allgather receive is gated on the send that read the same range, and every element
// of the buffer is either folded last here or received by the allgather, once.
TEST(Schedules, RingAllreduceGatesAndCoverage) {
  for (int n : {2, 3, 4}) {
    for (size_t count : {1, 10, 101}) {
      for (int r = 0; r < n; ++r) {
        for (bool inPlace : {false, true}) {
          const sched::RingAllreduceSchedule s(r, n, count, 4, false, inPlace);
          std::vector<int> cover(count, 0);
          for (size_t u = 0; u < s.lane(0).units; ++u) {
            const sched::Unit un = s.unit(0, u);
            EXPECT_EQ(un.ownAt, 1);
            if (!un.last) continue;
            const sched::Range own = sched::chunk(count, n, r);
            EXPECT_GE(un.range.offset, own.offset);
            EXPECT_LE(un.range.offset + un.range.length, own.offset + own.length);
            for (size_t e = 0; e < un.range.length; ++e) ++cover[un.range.offset + e];
          }
          for (size_t u = 0; u < s.lane(1).units; ++u) {
            const sched::Unit un = s.unit(1, u);
            EXPECT_EQ(un.into, sched::Place::kDst);
            EXPECT_EQ(un.ownAt, -1);
            for (size_t e = 0; e < un.range.length; ++e) ++cover[un.range.offset + e];
            const sched::Range read = un.gate.kind == sched::Gate::kOwnSend ? s.ownSend(un.gate.index).range
                                                                               : s.unit(0, un.gate.index).range;
            ASSERT_NE(un.gate.kind, sched::Gate::kNone);
            EXPECT_EQ(read.offset, un.range.offset);
            EXPECT_EQ(read.length, un.range.length);
            EXPECT_EQ(un.gate.retire, un.gate.kind == sched::Gate::kForward || inPlace);
          }
          for (size_t e = 0; e < count; ++e) EXPECT_EQ(cover[e], 1) << "n=" << n << " r=" << r << " e=" << e;
        }
      }
    }
  }
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

TEST(Check, DescribesAReduceMismatch) {
  coll::CheckFields mine, theirs;
  mine.kind = theirs.kind = coll::Kind::kReduce;
  mine.dtype = theirs.dtype = DataType::kFloat32;
  mine.op = theirs.op = ReduceOp::kMax;
  mine.count = theirs.count = 10;
  theirs.root = 2;
  const auto back = coll::unpackCheck(coll::packCheck(theirs));
  EXPECT_EQ(back.kind, coll::Kind::kReduce);
  EXPECT_EQ(back.root, 2u);
  transport::CheckMismatch m(1, 7, 0, 0, coll::packCheck(mine), coll::packCheck(theirs));
  EXPECT_EQ(coll::describeMismatch(m, 0),
            "reduce arguments differ between ranks: rank 1 passed count=10 dtype=float op=max root=2, rank 0 passed "
            "count=10 dtype=float op=max root=0");
  coll::CheckFields other = mine;
  other.kind = coll::Kind::kBroadcast;
  transport::CheckMismatch k(1, 7, 0, 0, coll::packCheck(mine), coll::packCheck(other));
  EXPECT_EQ(coll::describeMismatch(k, 0),
            "collectives differ between ranks: rank 1 called broadcast(count=10 dtype=float root=0), rank 0 called "
            "reduce(count=10 dtype=float op=max root=0)");
}

}  // namespace
