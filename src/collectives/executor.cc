#include "collectives/executor.h"

#include <cstring>
#include <optional>

namespace ringfold::coll {

namespace {

using sched::Gate;
using sched::Place;
using sched::Range;

constexpr int kMaxLanes = 3;

// One run of a schedule: the buffers, the cursors, and the steps of the loop.
class Run {
 public:
  Run(Communicator& comm, const sched::Schedule& s, const Operands& o)
      : comm_(comm), s_(s), o_(o), red_(o.reducer), pace_(s.pacing()), lanes_(s.lanes()),
        stageSends_(o.preScale != 1.0 || o.copyOwn), pre_(o.preScale != 1.0),
        fuse_(!pace_.interleaveLanes && !pre_ && o.reducer == &comm.reducer()) {
    RF_ENFORCE(lanes_ >= 1 && lanes_ <= kMaxLanes, "a schedule has 1 to 3 lanes, not ", lanes_);
    size_t requests = 0, slotBytes = 0;
    for (int l = 0; l < lanes_; ++l) {
      lane_[l] = s.lane(l);
      requestBase_[l] = requests;
      slotBase_[l] = slotBytes;
      requests += lane_[l].window * lane_[l].group;
      slotBytes += lane_[l].window * lane_[l].group * lane_[l].slotElems * o.elemSize;
    }
    slots_ = slotBytes > 0 ? comm.scratch(slotBytes, 0) : nullptr;
    flight_.emplace(comm, requests, pace_.sendWindow);
    if (slotBytes > 0) slotRegion_ = &flight_->region(slots_, slotBytes);
    ownCount_ = s.ownSends();
  }

  void go() {
    if (pace_.receivesFirst) {
      postReceives(-1);
      topUp(false);
    } else {
      topUp(false);
      postReceives(-1);
    }
    if (pace_.interleaveLanes) {
      interleaved();
    } else {
      for (int l = 0; l < lanes_; ++l) {
        while (processed_[l] < lane_[l].units) step(l);
      }
    }
    topUp(true);  // own sends past the last fold (a block with more segments than this rank receives)
    flight_->waitAllSends();
  }

 private:
  // Lane 0 in order; a unit of a later lane as soon as its receives are in, between lane-0
  // units; once lane 0 is done, the later lane that is furthest behind (the least late of
  // those: Lane::lateness) waits for its next.
  void interleaved() {
    for (;;) {
      bool any = false;
      for (int l = 1; l < lanes_; ++l) {
        while (processed_[l] < lane_[l].units && posted_[l] > processed_[l] && ready(l, processed_[l])) {
          step(l);
          any = true;
        }
      }
      if (processed_[0] < lane_[0].units) {
        step(0);
        continue;
      }
      int behind = -1;
      for (int l = 1; l < lanes_; ++l) {
        if (processed_[l] < lane_[l].units &&
            (behind < 0 || sched::waitsFirst(lane_[l], processed_[l], lane_[behind], processed_[behind]))) {
          behind = l;
        }
      }
      if (behind < 0) return;
      if (!any) step(behind);
    }
  }

  // One unit of lane l: its receives posted (waiting for a gate's send if that is all that is
  // left), processed, then the next own sends and receives.
  void step(int l) {
    if (posted_[l] == processed_[l]) postReceives(l);  // only a gate's send is left to wait for
    RF_ENFORCE_GT(posted_[l], processed_[l], "pipeline stalled in lane ", l);
    process(l, processed_[l]);
    ++processed_[l];
    ++processedAll_;
    topUp(false);
    postReceives(-1);
  }

  // True when every receive of posted unit u of lane l has completed (without blocking).
  bool ready(int l, size_t u) {
    const sched::Unit un = s_.unit(l, u);
    const size_t first = slotIndex(l, u);
    for (size_t i = 0, n = receives(l, un); i < n; ++i) {
      if (!flight_->recvDone(requestBase_[l] + first + i)) return false;
    }
    return true;
  }

  size_t es() const { return o_.elemSize; }
  size_t receives(int l, const sched::Unit& un) const {
    if (un.receives == sched::kLaneGroup) return lane_[l].group;
    RF_ENFORCE(un.receives <= lane_[l].group, "a unit of lane ", l, " has more receives than its group");
    return un.receives;
  }
  size_t slotIndex(int l, size_t u) const { return (u % lane_[l].window) * lane_[l].group; }
  size_t slotOffset(int l, size_t index) const { return slotBase_[l] + index * lane_[l].slotElems * es(); }
  std::byte* slot(int l, size_t index) const { return slots_ + slotOffset(l, index); }
  size_t dstOffset(const Range& r) const { return (r.offset - o_.dstShift) * es(); }
  std::byte* dst(const Range& r) const { return o_.dst + dstOffset(r); }
  const std::byte* src(const Range& r) const { return o_.src + (r.offset - o_.srcShift) * es(); }

  transport::MemoryRegion& dstRegion() {
    if (dstRegion_ == nullptr) dstRegion_ = &flight_->region(o_.dst, o_.dstElems * es());
    return *dstRegion_;
  }
  transport::MemoryRegion& srcRegion() {
    if (srcRegion_ == nullptr) {
      const bool same = o_.src == o_.dst && o_.srcShift == o_.dstShift && o_.srcElems == o_.dstElems;
      srcRegion_ = same ? &dstRegion() : &flight_->region(o_.src, o_.srcElems * es());
    }
    return *srcRegion_;
  }
  // Where own sends read staged data: recvbuf at the same place, or scratch over stageRange.
  std::byte* staged(const Range& r) {
    if (o_.stageInDst) return dst(r);
    if (stage_ == nullptr) {
      stage_ = comm_.scratch(o_.stageRange.length * es(), 1);
      stageRegion_ = &flight_->region(stage_, o_.stageRange.length * es());
    }
    return stage_ + (r.offset - o_.stageRange.offset) * es();
  }
  transport::MemoryRegion& stagedRegion() { return o_.stageInDst ? dstRegion() : *stageRegion_; }
  size_t stagedOffset(const Range& r) const {
    return o_.stageInDst ? dstOffset(r) : (r.offset - o_.stageRange.offset) * es();
  }

  void topUp(bool all) {
    while (sent_ < ownCount_ && (all || pace_.lead == sched::kNoSend || sent_ < processedAll_ + pace_.lead)) {
      const sched::OwnSend os = s_.ownSend(sent_);
      const size_t bytes = os.range.length * es();
      if (stageSends_) {
        std::byte* to = staged(os.range);
        if (os.stage && bytes > 0) {
          if (pre_) {
            RF_ENFORCE(red_ != nullptr, "preScale needs a reducer");
            red_->scale(to, src(os.range), os.range.length, o_.dtype, o_.preScale);
          } else {
            std::memcpy(to, src(os.range), bytes);
          }
        }
        flight_->postSend(os.peer, stagedRegion(), stagedOffset(os.range), bytes, o_.call.tag(os.sub),
                          o_.call.check, ownKey(sent_));
      } else {
        flight_->postSend(os.peer, srcRegion(), (os.range.offset - o_.srcShift) * es(), bytes,
                          o_.call.tag(os.sub), o_.call.check, ownKey(sent_));
      }
      ++sent_;
    }
  }

  bool open(const Gate& g, bool block) {
    uint64_t key = 0;
    switch (g.kind) {
      case Gate::kNone:
        return true;
      case Gate::kOwnSend:
        if (sent_ <= g.index) return false;
        key = ownKey(g.index);
        break;
      case Gate::kForward:
        if (processed_[0] <= g.index) return false;
        key = s_.unit(0, g.index).forwardAlso >= 0 ? forwardAlsoKey(0, g.index) : forwardKey(0, g.index);
        break;
    }
    return !g.retire || flight_->retireSend(key, block || g.block);
  }

  // Posts every receive whose window has room and whose gate is open; in lane `blockLane`
  // (-1: none) the first gate waits for its send to complete (that lane has nothing else).
  void postReceives(int blockLane) {
    for (int l = 0; l < lanes_; ++l) {
      const sched::Lane& lane = lane_[l];
      bool block = l == blockLane;
      while (posted_[l] < lane.units && posted_[l] < processed_[l] + lane.window) {
        const sched::Unit un = s_.unit(l, posted_[l]);
        if (!open(un.gate, block)) break;
        const size_t first = slotIndex(l, posted_[l]);
        const size_t bytes = un.range.length * es();
        for (size_t i = 0, n = receives(l, un); i < n; ++i) {
          const int peer = s_.peer(l, posted_[l], i);
          const bool lazy = fusable(l, un);
          if (un.into == Place::kSlot) {
            RF_ENFORCE(slotRegion_ != nullptr, "lane ", l, " receives into slots but has none");
            flight_->postRecv(requestBase_[l] + first + i, peer, *slotRegion_, slotOffset(l, first + i), bytes,
                              o_.call.tag(un.sub), o_.call.check, lazy);
          } else {
            flight_->postRecv(requestBase_[l] + first + i, peer, dstRegion(), dstOffset(un.range), bytes,
                              o_.call.tag(un.sub), o_.call.check, lazy);
          }
        }
        ++posted_[l];
        block = false;
      }
    }
  }

  void process(int l, size_t u) {
    const sched::Unit un = s_.unit(l, u);
    const size_t first = slotIndex(l, u);
    const size_t group = receives(l, un);
    if (fusable(l, un)) {
      foldDelivered(l, first, un);
    } else {
      for (size_t i = 0; i < group; ++i) flight_->waitRecv(requestBase_[l] + first + i);
      if (un.foldAfterOwn != sched::kNoSend) flight_->waitSend(ownKey(un.foldAfterOwn));
      if (un.ownAt >= 0 && un.range.length > 0) fold(l, first, group, un);
    }
    if (un.forwardTo < 0) return;
    const size_t bytes = un.range.length * es();
    const bool fromSlot = un.forwardFrom == Place::kSlot;
    const transport::MemoryRegion& from = fromSlot ? *slotRegion_ : dstRegion();
    const size_t offset = fromSlot ? slotOffset(l, first) : dstOffset(un.range);
    flight_->postSend(un.forwardTo, from, offset, bytes, o_.call.tag(un.forwardSub), o_.call.check, forwardKey(l, u));
    if (un.forwardAlso >= 0) {
      flight_->postSend(un.forwardAlso, from, offset, bytes, o_.call.tag(un.forwardSub), o_.call.check,
                        forwardAlsoKey(l, u));
    }
  }

  // A unit folded as its message is delivered (Request::deliver): own (unscaled) op one receive
  // with nothing to wait for first, in a schedule whose lanes are folded one after the other,
  // with the communicator's own (host) reducer. Its receive is lazy, so over shm the fold reads
  // the message in the ring: one copy fewer than receiving it into a slot and folding from there.
  bool fusable(int l, const sched::Unit& un) const {
    return fuse_ && un.ownAt >= 0 && un.range.length > 0 && receives(l, un) == 1 && un.foldAfterOwn == sched::kNoSend;
  }

  // The fold of fold() for a fusable unit, piece by piece as its message is delivered.
  class FoldSink final : public transport::Sink {
   public:
    FoldSink(const Run& run, std::byte* target, const std::byte* own, bool ownFirst, double scale)
        : run_(run), target_(target), own_(own), ownFirst_(ownFirst), scale_(scale) {}
    void take(size_t offset, const std::byte* data, size_t length) override {
      const std::byte* own = own_ + offset;
      run_.red_->reduce(target_ + offset, ownFirst_ ? own : data, ownFirst_ ? data : own, length / run_.es(),
                        run_.o_.dtype, run_.o_.op, scale_);
    }

   private:
    const Run& run_;
    std::byte* target_;
    const std::byte* own_;
    bool ownFirst_;
    double scale_;
  };

  void foldDelivered(int l, size_t first, const sched::Unit& un) {
    const Range& r = un.range;
    std::byte* target = un.foldInto == Place::kDst ? dst(r) : slot(l, first);
    const std::byte* own = !un.stageOwn && stageSends_ ? staged(r) : src(r);
    FoldSink sink(*this, target, own, un.ownAt == 0, un.last ? o_.finalScale : 1.0);
    const size_t index = requestBase_[l] + first;
    if (flight_->deliverRecv(index, sink)) return;
    // The backend keeps no message of its own: it is in the receive's place now.
    const size_t bytes = r.length * es();
    sink.take(0, un.into == Place::kSlot ? slot(l, first) : dst(r), bytes);
  }

  // acc = x0 op x1, acc = acc op x2, ... over the unit's `group` receives and own (at ownAt).
  void fold(int l, size_t first, size_t group, const sched::Unit& un) {
    RF_ENFORCE(red_ != nullptr, "a schedule that folds needs a reducer");
    const Range& r = un.range;
    std::byte* target = un.foldInto == Place::kDst ? dst(r) : slot(l, first);
    const std::byte* own = src(r);
    if (!un.stageOwn) {
      if (stageSends_) own = staged(r);
    } else if (pre_) {
      std::byte* to = un.foldInto == Place::kDst ? target : comm_.scratch(r.length * es(), 2);
      red_->scale(to, own, r.length, o_.dtype, o_.preScale);
      own = to;
    }
    const size_t ownAt = static_cast<size_t>(un.ownAt);
    auto operand = [&](size_t j) -> const std::byte* {
      return j == ownAt ? own : slot(l, first + (j < ownAt ? j : j - 1));
    };
    const size_t operands = group + 1;
    if (operands == 1) {  // nothing received: the result is own, scaled
      const double scale = un.last ? o_.finalScale : 1.0;
      if (scale != 1.0) {
        red_->scale(target, own, r.length, o_.dtype, scale);
      } else if (target != own) {
        std::memcpy(target, own, r.length * es());
      }
      return;
    }
    for (size_t j = 1; j < operands; ++j) {
      const double scale = un.last && j == operands - 1 ? o_.finalScale : 1.0;
      red_->reduce(target, j == 1 ? operand(0) : target, operand(j), r.length, o_.dtype, o_.op, scale);
    }
  }

  Communicator& comm_;
  const sched::Schedule& s_;
  const Operands& o_;
  Reducer* red_;  // null when the schedule folds nothing
  const sched::Pacing& pace_;
  const int lanes_;
  const bool stageSends_, pre_, fuse_;
  sched::Lane lane_[kMaxLanes];
  size_t requestBase_[kMaxLanes] = {}, slotBase_[kMaxLanes] = {};
  size_t posted_[kMaxLanes] = {}, processed_[kMaxLanes] = {};
  size_t processedAll_ = 0, sent_ = 0, ownCount_ = 0;
  std::byte* slots_ = nullptr;
  std::byte* stage_ = nullptr;
  std::optional<Flight> flight_;
  transport::MemoryRegion* slotRegion_ = nullptr;
  transport::MemoryRegion* dstRegion_ = nullptr;
  transport::MemoryRegion* srcRegion_ = nullptr;
  transport::MemoryRegion* stageRegion_ = nullptr;
};

}  // namespace

void execute(Communicator& comm, const sched::Schedule& schedule, const Operands& operands) {
  Run(comm, schedule, operands).go();
}

void reduceLocal(const Operands& o) {
  const size_t count = o.dstElems;
  if (count == 0) return;
  const std::byte* cur = o.src;
  if (o.preScale != 1.0) {
    o.reducer->scale(o.dst, cur, count, o.dtype, o.preScale);
    cur = o.dst;
  }
  if (o.finalScale != 1.0) {
    o.reducer->scale(o.dst, cur, count, o.dtype, o.finalScale);
    cur = o.dst;
  }
  if (cur != o.dst) std::memcpy(o.dst, cur, count * o.elemSize);
}

}  // namespace ringfold::coll
