#include "collectives/collective_schedules.h"

#include <algorithm>

#include "common/error.h"

namespace ringfold::sched {

RingSteps::RingSteps(const std::vector<Range>& chunks, size_t segElems, int rank, bool gather)
    : segElems_(segElems), start_{0} {
  const int n = static_cast<int>(chunks.size());
  for (int s = 0; s < n - 1; ++s) {
    chunk_.push_back(chunks[gather ? ringGatherRecvChunk(rank, s, n) : ringReduceRecvChunk(rank, s, n)]);
    start_.push_back(start_.back() + segmentCount(chunk_.back().length, segElems));
  }
}

int RingSteps::step(size_t u) const {
  return static_cast<int>(std::upper_bound(start_.begin(), start_.end(), u) - start_.begin()) - 1;
}

Range RingSteps::range(size_t u) const {
  const int s = step(u);
  return segment(chunk_[s], segElems_, u - start_[s]);
}

namespace {
std::vector<Range> evenChunks(size_t count, int n) {
  std::vector<Range> chunks(n);
  for (int c = 0; c < n; ++c) chunks[c] = chunk(count, n, c);
  return chunks;
}
}  // namespace

// ---- ring allreduce ----

RingAllreduceSchedule::RingAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool preStaged,
                                             bool inPlace)
    : RingSchedule(rank, n), segElems_(segElems), retireOwn_(preStaged || inPlace), chunks_(evenChunks(count, n)),
      reduce_(chunks_, segElems, rank, false), gather_(chunks_, segElems, rank, true) {
  pacing_.lead = kLead;
  pacing_.sendWindow = kSendWindow;
}

Lane RingAllreduceSchedule::lane(int l) const {
  if (l == 0) return Lane{reduce_.units(), kReduceWindow, 1, std::max<size_t>(1, std::min(segElems_, chunks_[0].length))};
  return Lane{gather_.units(), kGatherWindow, 1, 0};
}

size_t RingAllreduceSchedule::ownSends() const {
  return segmentCount(chunks_[ringReduceSendChunk(rank_, 0, n_)].length, segElems_);
}

OwnSend RingAllreduceSchedule::ownSend(size_t i) const {
  return OwnSend{right(), 0, segment(chunks_[ringReduceSendChunk(rank_, 0, n_)], segElems_, i), true};
}

Unit RingAllreduceSchedule::unit(int l, size_t u) const {
  Unit un;
  const uint32_t gatherSub = static_cast<uint32_t>(n_ - 1);
  un.forwardTo = right();
  if (l == 0) {
    const int s = reduce_.step(u);
    un.range = reduce_.range(u);
    un.sub = static_cast<uint32_t>(s);
    un.ownAt = 1;
    un.last = s == n_ - 2;
    un.forwardSub = un.last ? gatherSub : static_cast<uint32_t>(s + 1);
    return un;
  }
  const int s = gather_.step(u);
  const size_t k = u - gather_.index(s, 0);
  un.range = gather_.range(u);
  un.sub = gatherSub + static_cast<uint32_t>(s);
  un.into = Place::kDst;
  // The receive overwrites what this rank sent from there: its own send (step 0; out of place
  // that read sendbuf) or the reduce-scatter forward of the same segment one step earlier.
  un.gate = s == 0 ? Gate{Gate::kOwnSend, k, retireOwn_, false} : Gate{Gate::kForward, reduce_.index(s - 1, k), true, false};
  if (s < n_ - 2) {
    un.forwardSub = un.sub + 1;
  } else {
    un.forwardTo = -1;
  }
  return un;
}

// ---- ring reduce-scatter ----

RingReduceScatterSchedule::RingReduceScatterSchedule(int rank, std::vector<Range> blocks, size_t segElems)
    : RingSchedule(rank, static_cast<int>(blocks.size())), segElems_(segElems), blocks_(std::move(blocks)),
      steps_(blocks_, segElems, rank, false) {
  pacing_.lead = kWindow;
  pacing_.sendWindow = kSendWindow;
}

Lane RingReduceScatterSchedule::lane(int) const {
  size_t longest = 0;
  for (const Range& b : blocks_) longest = std::max(longest, b.length);
  return Lane{steps_.units(), kWindow, 1, std::max<size_t>(1, std::min(segElems_, longest))};
}

size_t RingReduceScatterSchedule::ownSends() const {
  return segmentCount(blocks_[ringReduceSendChunk(rank_, 0, n_)].length, segElems_);
}

OwnSend RingReduceScatterSchedule::ownSend(size_t i) const {
  return OwnSend{right(), 0, segment(blocks_[ringReduceSendChunk(rank_, 0, n_)], segElems_, i), true};
}

Unit RingReduceScatterSchedule::unit(int, size_t u) const {
  const int s = steps_.step(u);
  Unit un;
  un.range = steps_.range(u);
  un.sub = static_cast<uint32_t>(s);
  // The slot is reused once the forward of the unit that used it before has completed.
  if (u >= kWindow) un.gate = Gate{Gate::kForward, u - kWindow, true, true};
  un.ownAt = 1;
  un.last = s == n_ - 2;
  if (!un.last) {
    un.foldInto = Place::kSlot;
    un.forwardTo = right();
    un.forwardSub = static_cast<uint32_t>(s + 1);
    un.forwardFrom = Place::kSlot;
  }
  return un;
}

// ---- ring allgather ----

RingAllgatherSchedule::RingAllgatherSchedule(int rank, std::vector<Range> blocks, size_t segElems)
    : RingSchedule(rank, static_cast<int>(blocks.size())), segElems_(segElems), blocks_(std::move(blocks)),
      steps_(blocks_, segElems, rank, true) {
  pacing_.lead = kLead;
  pacing_.sendWindow = kSendWindow;
}

Lane RingAllgatherSchedule::lane(int) const { return Lane{steps_.units(), kWindow, 1, 0}; }

size_t RingAllgatherSchedule::ownSends() const { return segmentCount(blocks_[rank_].length, segElems_); }

OwnSend RingAllgatherSchedule::ownSend(size_t i) const {
  return OwnSend{right(), 0, segment(blocks_[rank_], segElems_, i), false};
}

Unit RingAllgatherSchedule::unit(int, size_t u) const {
  const int s = steps_.step(u);
  Unit un;
  un.range = steps_.range(u);
  un.sub = static_cast<uint32_t>(s);
  un.into = Place::kDst;
  if (s < n_ - 2) {
    un.forwardTo = right();
    un.forwardSub = un.sub + 1;
  }
  return un;
}

// ---- direct allreduce ----

DirectAllreduceSchedule::DirectAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool ownStaged,
                                                 bool inPlace)
    : rank_(rank), n_(n), count_(count), segElems_(segElems), segments_(segmentCount(count, segElems)),
      waitOwn_(inPlace && !ownStaged) {
  pacing_.lead = kNoSend;
  pacing_.sendWindow = segments_ * (n - 1);
  pacing_.receivesFirst = true;
}

Lane DirectAllreduceSchedule::lane(int) const {
  return Lane{segments_, segments_, static_cast<size_t>(n_ - 1), std::max<size_t>(1, std::min(segElems_, count_))};
}

OwnSend DirectAllreduceSchedule::ownSend(size_t i) const {
  const size_t peers = static_cast<size_t>(n_ - 1);
  const size_t j = i % peers;
  return OwnSend{mod(rank_ + static_cast<int>(j) + 1, n_), 0, segment(Range{0, count_}, segElems_, i / peers), j == 0};
}

Unit DirectAllreduceSchedule::unit(int, size_t k) const {
  Unit un;
  un.range = segment(Range{0, count_}, segElems_, k);
  un.ownAt = rank_;
  un.last = true;
  un.stageOwn = false;
  // In place, the fold overwrites what the segment's own sends read: the last of them retires all.
  if (waitOwn_) un.foldAfterOwn = (k + 1) * static_cast<size_t>(n_ - 1) - 1;
  return un;
}

// ---- double binary tree allreduce ----

TreeAllreduceSchedule::TreeAllreduceSchedule(int rank, int n, size_t count, size_t segElems, bool ownReadsDst)
    : rank_(rank), n_(n), retireOwn_(ownReadsDst), node_{treeNode(rank, n, 0), treeNode(rank, n, 1)} {
  pacing_.lead = kLead;
  pacing_.sendWindow = kSendWindow;
  pacing_.receivesFirst = true;
  pacing_.interleaveLanes = true;
  const Range half[2] = {chunk(count, 2, 0), chunk(count, 2, 1)};
  const size_t perTree[2] = {segmentCount(half[0].length, segElems), segmentCount(half[1].length, segElems)};
  slotElems_ = std::max<size_t>(1, std::min(segElems, half[0].length));
  // A segment's reduce reaches this rank about height(t) hops after its leaves sent it: where
  // this rank is interior in both trees (odd n), the shallower subtree's segment k comes first
  // in lane 0, or its fold and forward would wait for the deeper one's.
  // (Only that rank walks its subtrees: this runs for every call.)
  const bool interiorInBoth = node_[0].children() > 0 && node_[1].children() > 0;
  const int first = interiorInBoth && treeHeight(rank, n, 1) < treeHeight(rank, n, 0) ? 1 : 0;
  for (size_t k = 0; k < std::max(perTree[0], perTree[1]); ++k) {
    for (int t : {first, 1 - first}) {
      if (k >= perTree[t]) continue;
      const size_t g = segments_.size();
      const bool interior = node_[t].children() > 0;
      std::vector<size_t>& list = interior ? up_ : own_;
      segments_.push_back(Segment{t, segment(half[t], segElems, k), 1 + list.size()});  // after the hello
      list.push_back(g);
      if (node_[t].parent >= 0) down_[t].push_back(g);
    }
  }
}

Lane TreeAllreduceSchedule::lane(int l) const {
  if (l == 0) return Lane{1 + up_.size(), kUpWindow, 2, slotElems_};
  // A segment comes down tree t about depth(t) hops after its root has it; both roots finish
  // their reduce at about the same time.
  return Lane{down_[l - 1].size(), kDownWindow, 1, 0, treeDepth(rank_, n_, l - 1)};
}

OwnSend TreeAllreduceSchedule::ownSend(size_t i) const {
  if (i == 0) return OwnSend{mod(rank_ + 1, n_), 0, Range{0, 0}, false};  // the hello
  const Segment& s = segments_[own_[i - 1]];
  return OwnSend{node_[s.tree].parent, upSub(s.tree), s.range, true};
}

int TreeAllreduceSchedule::peer(int l, size_t u, size_t i) const {
  if (l > 0) return node_[l - 1].parent;
  if (u == 0) return mod(rank_ - 1, n_);
  return node_[segments_[up_[u - 1]].tree].child[i];
}

Unit TreeAllreduceSchedule::unit(int l, size_t u) const {
  Unit un;
  if (l == 0 && u == 0) {  // the hello: an empty receive from rank-1
    un.range = Range{0, 0};
    un.into = Place::kDst;
    un.receives = 1;
    return un;
  }
  const Segment& s = segments_[l == 0 ? up_[u - 1] : down_[l - 1][u]];
  const TreeNode& node = node_[s.tree];
  un.range = s.range;
  if (l == 0) {
    un.receives = static_cast<size_t>(node.children());
    un.sub = upSub(s.tree);
    un.ownAt = 0;
    un.last = node.parent < 0;
    if (!un.last) {
      un.forwardTo = node.parent;
      un.forwardSub = upSub(s.tree);
      return un;
    }
  } else {
    un.receives = 1;
    un.sub = downSub(s.tree);
    un.into = Place::kDst;
    // The receive overwrites what went up from recvbuf: this rank's fold, or its own segment
    // when own sends read recvbuf.
    const bool interior = node.children() > 0;
    un.gate = interior ? Gate{Gate::kForward, s.up, true, false} : Gate{Gate::kOwnSend, s.up, retireOwn_, false};
  }
  un.forwardTo = node.child[0];
  un.forwardAlso = node.child[1];
  un.forwardSub = downSub(s.tree);
  return un;
}

// ---- chain broadcast ----

ChainBroadcastSchedule::ChainBroadcastSchedule(int rank, int n, int root, size_t count, size_t segElems)
    : rank_(rank), n_(n), root_(root), count_(count), segElems_(segElems), segments_(segmentCount(count, segElems)) {
  pacing_.lead = kNoSend;
  pacing_.sendWindow = kSendWindow;
  pacing_.receivesFirst = true;  // the hello receive is posted before the hello send
}

Lane ChainBroadcastSchedule::lane(int l) const {
  if (l == 0) return Lane{1, 1, 1, 0};
  return Lane{isRoot() ? 0 : segments_, kWindow, 1, 0};
}

OwnSend ChainBroadcastSchedule::ownSend(size_t i) const {
  if (i == 0) return OwnSend{next(), 0, Range{0, 0}, false};
  return OwnSend{next(), 0, segment(Range{0, count_}, segElems_, i - 1), false};
}

Unit ChainBroadcastSchedule::unit(int l, size_t u) const {
  Unit un;
  un.into = Place::kDst;
  if (l == 0) {
    un.range = Range{0, 0};  // the hello
    return un;
  }
  un.range = segment(Range{0, count_}, segElems_, u);
  // No data receive is posted before the hello has arrived (unit 0 of lane 0 processed).
  if (u == 0) un.gate = Gate{Gate::kForward, 0, false, false};
  if (mod(rank_ - root_, n_) != n_ - 1) un.forwardTo = next();
  return un;
}

// ---- chain reduce ----

ChainReduceSchedule::ChainReduceSchedule(int rank, int n, int root, size_t count, size_t segElems)
    : rank_(rank), n_(n), root_(root), count_(count), segElems_(segElems), segments_(segmentCount(count, segElems)) {
  RF_ENFORCE(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n, "chain reduce: rank ", rank, ", root ", root,
             " of ", n);
  // The head's segments go out at once (its lane has nothing to pace them by but the hello);
  // every other rank's only own send is the hello.
  pacing_.lead = kNoSend;
  pacing_.sendWindow = kSendWindow;
  pacing_.receivesFirst = true;  // the hello receive is posted before the hello send
}

Lane ChainReduceSchedule::lane(int) const {
  const size_t slotElems = std::max<size_t>(1, std::min(segElems_, count_));
  if (n_ == 1) return Lane{segments_, 1, 1, slotElems};
  return Lane{isHead() ? 1 : 1 + segments_, kWindow, 1, slotElems};
}

size_t ChainReduceSchedule::ownSends() const {
  if (n_ == 1) return 0;
  return isHead() ? 1 + segments_ : 1;
}

OwnSend ChainReduceSchedule::ownSend(size_t i) const {
  if (i == 0) return OwnSend{next(), kHelloSub, Range{0, 0}, false};
  return OwnSend{next(), kDataSub, segment(Range{0, count_}, segElems_, i - 1), true};
}

Unit ChainReduceSchedule::unit(int, size_t u) const {
  Unit un;
  un.into = Place::kSlot;
  if (n_ == 1) {  // own alone, scaled into recvbuf
    un.range = segment(Range{0, count_}, segElems_, u);
    un.receives = 0;
    un.ownAt = 0;
    un.last = true;
    return un;
  }
  if (u == 0) {  // the hello: an empty receive from rank-1
    un.range = Range{0, 0};
    un.sub = kHelloSub;
    return un;
  }
  un.range = segment(Range{0, count_}, segElems_, u - 1);
  un.sub = kDataSub;
  un.ownAt = 1;  // acc = received op own
  if (isRoot()) {
    un.last = true;  // into recvbuf, with the final scale
    return un;
  }
  un.foldInto = Place::kSlot;
  un.forwardTo = next();
  un.forwardSub = kDataSub;
  un.forwardFrom = Place::kSlot;
  // The slot was last used by unit u - kWindow, which forwarded from it (unit 0, the hello,
  // forwarded nothing and wrote no data).
  if (u > kWindow) un.gate = Gate{Gate::kForward, u - kWindow, true, true};
  return un;
}

}  // namespace ringfold::sched
