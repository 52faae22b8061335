// The schedules ringfold runs (vocabulary in schedule.h, index math in schedules.h). Each is
// built for one rank and one call (or one round of a call) and answers from small tables.
#pragma once

#include <vector>

#include "collectives/schedule.h"

namespace ringfold::sched {

// Ring steps over n chunks (arbitrary ranges), cut into segments of segElems: flat unit numbers
// of the steps s = 0..n-2, where step s moves chunk `chunkOf(s)`.
class RingSteps {
 public:
  // gather: allgather steps (chunk r-s-1 at step s), else reduce-scatter (chunk r-s-2).
  RingSteps(const std::vector<Range>& chunks, size_t segElems, int rank, bool gather);
  size_t units() const { return start_.back(); }
  size_t index(int s, size_t k) const { return start_[s] + k; }
  int step(size_t u) const;
  Range range(size_t u) const;

 private:
  size_t segElems_;
  std::vector<Range> chunk_;   // chunk of each step
  std::vector<size_t> start_;  // first unit of each step, then the total
};

// What the ring schedules share: rank r receives from r-1 and sends to r+1.
class RingSchedule : public Schedule {
 public:
  int peer(int, size_t, size_t) const override { return mod(rank_ - 1, n_); }

 protected:
  RingSchedule(int rank, int n) : rank_(rank), n_(n) {}
  int right() const { return mod(rank_ + 1, n_); }
  int rank_, n_;
};

// Ring allreduce, one round: lane 0 reduce-scatter (rank r's own contribution to chunk r-1 goes
// out first, then each received segment is folded as acc = received op own into recvbuf and
// sent on), lane 1 allgather (received straight into recvbuf and sent on). An allgather receive
// overwrites what the reduce-scatter sent from that place, so it is posted once that send has
// completed (out of place, step 0 sent from sendbuf and there is nothing to wait for).
//   kReduceWindow: wider than the sender's lead, so segments rarely arrive before their receive
//     (a copy out of the transport's unexpected buffer), and wide enough that neighbours
//     drifting apart at 4 ranks still find their receive posted;
//   kLead: a short lead keeps socket buffers and scratch small and cache-hot;
//   kGatherWindow: allgather receives land in recvbuf and need no scratch, so they are posted
//     as early as their region allows, not queued behind the reduce-scatter ones.
// (docs/performance.md has the measurements behind these values.)
class RingAllreduceSchedule final : public RingSchedule {
 public:
  // preStaged: own sends go out from a staged (preScaled) copy; inPlace: sendbuf == recvbuf.
  RingAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool preStaged, bool inPlace);
  static constexpr size_t kReduceWindow = 32, kGatherWindow = 128, kLead = 1, kSendWindow = 16;
  int lanes() const override { return 2; }
  Lane lane(int l) const override;
  size_t ownSends() const override;
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;

 private:
  size_t segElems_;
  bool retireOwn_;
  std::vector<Range> chunks_;
  RingSteps reduce_, gather_;
};

// Ring reduce-scatter of n blocks (blocks[c]: the elements rank c ends with; they may differ in
// length): the partial folds of other ranks' blocks are made in the receive slot (acc =
// received op own) and sent on from there, so a slot is reused once its forward has completed;
// the last step folds into recvbuf (block `rank`). 4 slots and a lead of 4 keep the scratch to
// a few segments.
class RingReduceScatterSchedule final : public RingSchedule {
 public:
  RingReduceScatterSchedule(int rank, std::vector<Range> blocks, size_t segElems);
  int lanes() const override { return 1; }
  Lane lane(int l) const override;
  size_t ownSends() const override;
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;

  static constexpr size_t kWindow = 4, kSendWindow = 16;

 private:
  size_t segElems_;
  std::vector<Range> blocks_;
  RingSteps steps_;
};

// Ring allgather(v): block c (chunks[c]) is received straight into its place and sent on from
// there; this rank's own block goes out first, kLead segments ahead of the receives.
class RingAllgatherSchedule final : public RingSchedule {
 public:
  RingAllgatherSchedule(int rank, std::vector<Range> blocks, size_t segElems);
  static constexpr size_t kWindow = 4, kLead = 4, kSendWindow = 16;
  int lanes() const override { return 1; }
  Lane lane(int l) const override;
  size_t ownSends() const override;
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;

 private:
  size_t segElems_;
  std::vector<Range> blocks_;
  RingSteps steps_;
};

// Direct allreduce: every rank sends its whole buffer to every other rank, segment by segment,
// all at once (receives first), and folds segment k in rank order 0..n-1 as soon as every peer's
// copy of it has arrived (one unit per segment, a group of n-1 receives). In place without a
// staged copy of its own contribution, a rank waits for its own sends of a segment before
// folding into it.
class DirectAllreduceSchedule final : public Schedule {
 public:
  // ownStaged: the own contribution is sent from (and folded from) a staged copy.
  DirectAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool ownStaged, bool inPlace);
  int lanes() const override { return 1; }
  Lane lane(int l) const override;
  size_t ownSends() const override { return segments_ * (n_ - 1); }
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;
  int peer(int, size_t, size_t i) const override { return static_cast<int>(i) < rank_ ? static_cast<int>(i) : static_cast<int>(i) + 1; }

 private:
  int rank_, n_;
  size_t count_, segElems_, segments_;
  bool waitOwn_;
};

// Double binary tree allreduce (sched::treeNode): the buffer's two halves go through the two
// trees, cut into segments taken alternately from each half. Per segment, a rank reduces up its
// tree (receive from its children, fold own op child0 op child1 into recvbuf, forward to the
// parent; a leaf's own segment is an own send to its parent) and then receives the result from
// the parent into recvbuf and forwards it to its children; the root's fold is `last` (the final
// scale) and goes straight down. Lanes: 0 = the hello (unit 0) and the reduce-up units of the
// segments where this rank has children; 1 and 2 = the broadcast-down units of tree 0's and
// tree 1's segments where it has a parent, each gated on the send that reads the same place (the
// forward up, or the leaf's own send when that reads recvbuf). The broadcast lanes are
// interleaved (Pacing::interleaveLanes): a segment that came down one tree is forwarded at once,
// not after the other tree's previous segment (in one lane, a rank's forwards down its interior
// tree waited on its leaf tree: a third of the ring's bandwidth on 8 emulated hosts). Every rank first sends an empty hello to rank+1 (own send
// 0) and receives one from rank-1 (lane 0, unit 0), so that a rank running another collective
// at the same sequence meets a check word at once (schedules.h). Tags: hello 0, tree t's reduce
// 1 + 2t and broadcast 2 + 2t.
//   kLead: own sends (a leaf's segments) are paced by this rank's folds, kLead ahead;
//   kUpWindow: reduce-up receives posted ahead (two slots each);
//   kDownWindow: broadcast receives land in recvbuf and need no scratch.
class TreeAllreduceSchedule final : public Schedule {
 public:
  // ownReadsDst: own sends read recvbuf (in place, or preScaled into it).
  TreeAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool ownReadsDst);
  static constexpr size_t kLead = 8, kUpWindow = 8, kDownWindow = 32, kSendWindow = 16;
  int lanes() const override { return 3; }
  Lane lane(int l) const override;
  size_t ownSends() const override { return 1 + own_.size(); }
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;
  int peer(int l, size_t u, size_t i) const override;

 private:
  struct Segment {
    int tree;
    Range range;
    size_t up;  // lane-0 unit (interior) or own send (leaf) of this segment here
  };
  static uint32_t upSub(int tree) { return 1 + 2 * static_cast<uint32_t>(tree); }
  static uint32_t downSub(int tree) { return 2 + 2 * static_cast<uint32_t>(tree); }
  int rank_, n_;
  size_t slotElems_ = 1;
  bool retireOwn_;
  TreeNode node_[2];
  std::vector<Segment> segments_;
  std::vector<size_t> up_, own_, down_[2];  // segment of each lane-0 unit (after the hello), own send, down unit per tree
};

// Chain broadcast root -> root+1 -> ... -> root-1. Every rank first sends an empty hello to
// rank+1 (own send 0) and receives one from rank-1 (lane 0, one empty unit), so each rank
// compares its arguments with its neighbour's before any data moves (a root that believes it
// is not the root would otherwise leave every rank waiting for data). The root then sends its
// segments from sendbuf (own sends 1.., all at once through the send window); every other rank
// receives segment k straight into recvbuf (lane 1, unit k, gated on the hello having been
// received) and forwards it to rank+1 unless it is the last of the chain. kWindow receives are
// posted ahead; kSendWindow sends are in flight at most.
class ChainBroadcastSchedule final : public Schedule {
 public:
  ChainBroadcastSchedule(int rank, int n, int root, size_t count, size_t segElems);
  static constexpr size_t kWindow = 4, kSendWindow = 16;
  int lanes() const override { return 2; }
  Lane lane(int l) const override;
  size_t ownSends() const override { return isRoot() ? 1 + segments_ : 1; }
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;
  int peer(int, size_t, size_t) const override { return mod(rank_ - 1, n_); }

 private:
  bool isRoot() const { return rank_ == root_; }
  int next() const { return mod(rank_ + 1, n_); }
  int rank_, n_, root_;
  size_t count_, segElems_, segments_;
};

// Chain reduce to `root`: root+1 -> root+2 -> ... -> root, the mirror of the chain broadcast,
// folding on the way. Chain position p = rank - root - 1 (mod n): the head (p = 0, root+1)
// starts every segment's fold, the root (p = n-1) ends it, so segment k's result is
// ((x[root+1] op x[root+2]) op ...) op x[root]: each element folded in that fixed order, as
// a ring reduce-scatter folds chunk `root` (schedules.h), bit-identical from run to run.
// Every rank first sends an empty hello to rank+1 (own send 0, sub 0) and receives one from
// rank-1 (lane 0, unit 0), so each rank compares its arguments with its neighbour's whatever
// it believes the root to be. Then, in segments of segElems (sub 1):
//   head    : own sends 1.. are its segments (staged: preScaled), all posted at once through
//             the send window; its lane has the hello only;
//   interior: unit 1+k receives segment k from rank-1 into a slot, folds acc = received op own
//             in the slot and forwards the slot to rank+1; a slot is reused once the forward
//             of the unit that used it before has completed (kWindow slots);
//   root    : unit 1+k folds acc = received op own into recvbuf with the final scale (`last`);
//             it forwards nothing.
// Only the root's recvbuf is written: the other ranks fold in scratch. n = 1: no messages, the
// lane holds one unit per segment that scales own into recvbuf (the executor is not needed
// for it, but the description stays true). Each link carries the buffer once.
class ChainReduceSchedule final : public Schedule {
 public:
  ChainReduceSchedule(int rank, int n, int root, size_t count, size_t segElems);
  static constexpr size_t kWindow = 4, kSendWindow = 16;
  static constexpr uint32_t kHelloSub = 0, kDataSub = 1;
  int lanes() const override { return 1; }
  Lane lane(int l) const override;
  size_t ownSends() const override;
  OwnSend ownSend(size_t i) const override;
  Unit unit(int l, size_t u) const override;
  int peer(int, size_t, size_t) const override { return mod(rank_ - 1, n_); }

  // Position in the chain: 0 for the head (root+1), n-1 for the root.
  int position() const { return mod(rank_ - root_ - 1, n_); }

 private:
  bool isRoot() const { return rank_ == root_; }
  bool isHead() const { return n_ > 1 && position() == 0; }
  int next() const { return mod(rank_ + 1, n_); }
  int rank_, n_, root_;
  size_t count_, segElems_, segments_;
};

}  // namespace ringfold::sched
