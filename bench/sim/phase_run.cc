#include "bench/sim/phase_run.h"

#include <algorithm>
#include <coroutine>
#include <deque>
#include <vector>

#include "collectives/executor.h"
#include "collectives/schedule.h"
#include "common/error.h"

namespace ringfold::sim {

namespace {

using sched::Gate;
using sched::Place;

constexpr int kMaxLanes = 3;
constexpr size_t kLookahead = 16;

using coll::forwardAlsoKey;  // the executor's send keys (executor.h)
using coll::forwardKey;
using coll::ownKey;

// One rank's run of one phase: executor.cc's Run, its Flight folded in (see phase_run.h).
class PhaseRun {
 public:
  PhaseRun(World& w, RankState& rk, const coll::Phase& phase, uint32_t index)
      : w_(w), rk_(rk), s_(*phase.schedule), group_(phase.group), phase_(index), es_(w.elemSize()),
        pace_(s_.pacing()), lanes_(s_.lanes()) {
    RF_ENFORCE(lanes_ >= 1 && lanes_ <= kMaxLanes, "a schedule has 1 to 3 lanes, not ", lanes_);
    size_t requests = 0, slotElems = 0;
    for (int l = 0; l < lanes_; ++l) {
      lane_[l] = s_.lane(l);
      requestBase_[l] = requests;
      requests += lane_[l].window * lane_[l].group;
      slotElems += lane_[l].window * lane_[l].group * lane_[l].slotElems;
    }
    hasSlots_ = slotElems * es_ > 0;
    for (int l = 0; l < lanes_; ++l) units_[l].resize(std::min(lane_[l].window, lane_[l].units));
    slots_.assign(requests, -1);
    sendWindow_ = std::max<size_t>(1, pace_.sendWindow);
    ownCount_ = s_.ownSends();
  }

  // The executor's go(), with process(l, u), topUp() and postReceives() written inline: one
  // coroutine frame per rank and phase (at thousands of ranks every frame an event touches is a
  // cache miss). Each `for (p = ...)` line is one postReceives(blockLane) call.
  Task go() {
    Posting p;
    if (pace_.receivesFirst) {
      for (p = Posting{}; !postReceives(p);) co_await w_.until(p.wait);
      while (topUpDue(false)) co_await topUpOne();
    } else {
      while (topUpDue(false)) co_await topUpOne();
      for (p = Posting{}; !postReceives(p);) co_await w_.until(p.wait);
    }
    if (pace_.interleaveLanes) {
      // Executor's interleaved(): lane 0 in order, a later lane's unit once its receives are in.
      for (;;) {
        bool any = false;
        for (int l = 1; l < lanes_; ++l) {
          while (processed_[l] < lane_[l].units && posted_[l] > processed_[l] && ready(l, processed_[l])) {
            co_await step(l);
            any = true;
          }
        }
        if (processed_[0] < lane_[0].units) {
          co_await step(0);
          continue;
        }
        int behind = -1;
        for (int l = 1; l < lanes_; ++l) {
          if (processed_[l] < lane_[l].units &&
              (behind < 0 || sched::waitsFirst(lane_[l], processed_[l], lane_[behind], processed_[behind]))) {
            behind = l;
          }
        }
        if (behind < 0) break;
        if (!any) co_await step(behind);
      }
    } else {
      for (int l = 0; l < lanes_; ++l) {
        while (processed_[l] < lane_[l].units) co_await step(l);
      }
    }
    while (topUpDue(true)) co_await topUpOne();  // own sends past the last fold
    // Flight::waitAllSends: each in order, so until the latest completes.
    double last = w_.now();
    for (const Sent& sent : window_) last = std::max(last, sent.done);
    window_.clear();
    co_await w_.until(last);
  }

 private:
  // The executor's step(l): unit processed_[l] of lane l, with process(l, u) written inline.
  Task step(int l) {
    Posting p;
    if (posted_[l] == processed_[l]) {  // only a gate's send is left to wait for
      for (p = Posting{l}; !postReceives(p);) co_await w_.until(p.wait);
    }
    RF_ENFORCE_GT(posted_[l], processed_[l], "pipeline stalled in lane ", l);
    // process(l, u): wait for the receives, retire foldAfterOwn, fold, forward (twice).
    const size_t u = processed_[l];
    const Step st = beginProcess(l, u);
    for (size_t i = 0; i < st.group; ++i) {
      co_await waitReceive(st, i);
      endReceive(st, i);
    }
    if (st.un.foldAfterOwn != sched::kNoSend) {
      double wait = -1;
      while (!retire(ownKey(st.un.foldAfterOwn), true, wait)) co_await w_.until(wait);
    }
    if (st.un.forwardTo < 0) {
      if (st.fold > 0) co_await w_.busy(st.fold);
    } else {
      if (!st.straight) co_await w_.until(sendTime(st.fold));
      send(st.un.forwardTo, st.un.forwardSub, st.bytes, forwardKey(l, u));
      if (st.un.forwardAlso >= 0) {
        co_await w_.until(sendTime(0.0));
        send(st.un.forwardAlso, st.un.forwardSub, st.bytes, forwardAlsoKey(l, u));
      }
    }
    ++processed_[l];
    ++processedAll_;
    while (topUpDue(false)) co_await topUpOne();
    if (receivesDue()) {
      for (p = Posting{}; !postReceives(p);) co_await w_.until(p.wait);
    }
  }

  // The executor's ready(l, u): every receive of posted unit u has its message by now.
  bool ready(int l, size_t u) {
    const sched::Unit& un = units_[l][u % units_[l].size()];  // posted, so still in the window
    const size_t first = slotIndex(l, u);
    for (size_t i = 0, n = receives(l, un); i < n; ++i) {
      const int32_t id = slots_[requestBase_[l] + first + i];
      if (id < 0 || !w_.received(id)) return false;
    }
    return true;
  }

  struct Sent {
    uint64_t key;
    double done;  // complete from then (network.h)
  };

  int jobRank(int peer) const { return w_.job().jobRank(group_, rk_.shape, peer); }
  size_t receives(int l, const sched::Unit& un) const {
    if (un.receives == sched::kLaneGroup) return lane_[l].group;
    RF_ENFORCE(un.receives <= lane_[l].group, "a unit of lane ", l, " has more receives than its group");
    return un.receives;
  }
  size_t slotIndex(int l, size_t u) const { return (u % lane_[l].window) * lane_[l].group; }
  // s_.unit(l, u), asked once per unit and kLookahead units at a time: the executor asks again
  // where it needs a unit, and one at a time, but a schedule is pure (same answers whenever
  // asked), and at thousands of ranks the asking dominated the run time: the ring's unit() does
  // binary searches over O(n) tables per rank, which stay in cache for a batch. The peers of
  // a unit's first two receives are asked with it.
  struct Ahead;
  const Ahead& unitAt(int l, size_t u) {
    if (u < aheadBase_[l] || u >= aheadBase_[l] + aheadCount_[l]) {
      aheadBase_[l] = u;
      aheadCount_[l] = std::min(kLookahead, lane_[l].units - u);
      for (size_t k = 0; k < aheadCount_[l]; ++k) {
        Ahead& a = ahead_[l][k];
        a.unit = s_.unit(l, u + k);
        const size_t n = std::min(a.unit.receives, lane_[l].group);
        for (size_t i = 0; i < std::min<size_t>(n, 2); ++i) a.peer[i] = s_.peer(l, u + k, i);
      }
    }
    return ahead_[l][u - aheadBase_[l]];
  }

  // topUp's loop condition (skipping the call when it would send nothing changes nothing).
  bool topUpDue(bool all) const {
    return sent_ < ownCount_ && (all || pace_.lead == sched::kNoSend || sent_ < processedAll_ + pace_.lead);
  }
  bool receivesDue() const {
    for (int l = 0; l < lanes_; ++l) {
      if (posted_[l] < lane_[l].units && posted_[l] < processed_[l] + lane_[l].window) return true;
    }
    return false;
  }

  // One own send of topUp(): wait until it goes out (sendTime), then post it.
  struct TopUpOne {
    PhaseRun& run;
    World::Until until;
    bool await_ready() { return until.await_ready(); }
    void await_suspend(std::coroutine_handle<> h) { until.await_suspend(h); }
    void await_resume() {  // once the time has come, whether it suspended or not
      const sched::OwnSend os = run.s_.ownSend(run.sent_);
      run.send(os.peer, os.sub, os.range.length * run.es_, ownKey(run.sent_));
      ++run.sent_;
    }
  };
  TopUpOne topUpOne() { return TopUpOne{*this, w_.until(sendTime(0.0))}; }

  // Flight::postSend, in two halves around the caller's wait: sendTime() is when the send goes
  // out: after `busy` seconds this rank's CPU still owes (a fold just before), a wait for the
  // oldest send when the window is full, and the send's own cost `o`; send() posts it then.
  // (Popping the window's oldest entry before the wait instead of after it changes nothing: no
  // other code of this rank runs in between.)
  double sendTime(double busy) { return w_.handle(w_.now(), busy, takeWindowSlot(), w_.model().o); }
  // A full window frees its oldest slot when that send completes (returned); else 0.
  double takeWindowSlot() {
    if (window_.size() < sendWindow_) return 0.0;
    const double done = window_.front().done;
    window_.pop_front();
    return done;
  }
  void send(int peer, uint32_t sub, size_t bytes, uint64_t key) {
    window_.push_back(Sent{key, w_.send(rk_.rank, jobRank(peer), phase_, sub, bytes)});
  }

  // Flight::retireSend(key, block) without its waits: true once the send `key` and every older
  // one are retired (popped in order). Without `block` it stops at the first send still in
  // flight (false, wait = -1); with `block`, while some are in flight it returns false with
  // `wait` = when the last of them completes: the caller waits until then and asks again (one
  // wait for the latest instead of one per send; the same end time).
  bool retire(uint64_t key, bool block, double& wait) {
    wait = -1;
    if (key == 0) return true;
    for (size_t i = 0; i < window_.size(); ++i) {
      if (window_[i].key != key) continue;
      if (block) {
        double last = 0;
        for (size_t k = 0; k <= i; ++k) last = std::max(last, window_[k].done);
        if (last > w_.now()) {
          wait = last;
          return false;
        }
      }
      for (size_t k = 0; k <= i; ++k) {
        if (window_.front().done > w_.now()) return false;
        window_.pop_front();
      }
      return true;
    }
    return true;
  }

  // The executor's open(): may the unit's receives be posted? A blocking retire that must wait
  // returns false with `wait` set (see retire()).
  bool open(const Gate& g, bool block, double& wait) {
    wait = -1;
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
        // The executor asks s_.unit(0, g.index) again; it was processed, so its answer is here.
        key = !forwardsAlso_.empty() && forwardsAlso_[g.index] ? forwardAlsoKey(0, g.index) : forwardKey(0, g.index);
        break;
    }
    return !g.retire || retire(key, block || g.block, wait);
  }

  // One call of the executor's postReceives(blockLane) in steps: true when it is done; false when
  // a gate's blocking retire must wait until p.wait, after which the caller calls again and it
  // goes on in the lane where it stopped, as the executor's loop does after its wait.
  struct Posting {
    int blockLane = -1;  // the executor's postReceives(blockLane); -1 once that lane posted one
    int lane = 0;
    double wait = -1;
  };
  bool postReceives(Posting& p) {
    for (; p.lane < lanes_; ++p.lane) {
      const int l = p.lane;
      const sched::Lane& lane = lane_[l];
      while (posted_[l] < lane.units && posted_[l] < processed_[l] + lane.window) {
        const Ahead& ahead = unitAt(l, posted_[l]);
        const sched::Unit& un = ahead.unit;
        if (!open(un.gate, l == p.blockLane, p.wait)) {
          if (p.wait >= 0) return false;
          break;
        }
        const size_t first = slotIndex(l, posted_[l]);
        const size_t bytes = un.range.length * es_;
        for (size_t i = 0, n = receives(l, un); i < n; ++i) {
          const int peer = i < 2 ? ahead.peer[i] : s_.peer(l, posted_[l], i);
          RF_ENFORCE(un.into != Place::kSlot || hasSlots_, "lane ", l, " receives into slots but has none");
          const size_t slot = requestBase_[l] + first + i;
          RF_ENFORCE(slots_[slot] < 0, "receive slot ", slot, " is still in use");
          slots_[slot] = w_.postRecv(rk_.rank, jobRank(peer), phase_, un.sub, bytes);
        }
        units_[l][posted_[l] % units_[l].size()] = un;
        ++posted_[l];
        if (l == p.blockLane) p.blockLane = -1;
      }
    }
    return true;
  }

  // process(l, u) in steps (go() waits between them).
  struct Step {
    int l;
    size_t u;
    sched::Unit un;
    size_t first, group, bytes;
    double fold;    // the fold: one reduce pass over the range per received operand
    bool straight;  // nothing to wait for between the last receive and the forward: the wait
                    // for that receive runs on through the fold and the forward's sendTime
  };
  Step beginProcess(int l, size_t u) {
    Step st;
    st.l = l;
    st.u = u;
    st.un = units_[l][u % units_[l].size()];  // posted, so still in the window
    if (l == 0 && st.un.forwardAlso >= 0) {
      if (forwardsAlso_.empty()) forwardsAlso_.assign(lane_[0].units, false);
      forwardsAlso_[u] = true;
    }
    st.first = slotIndex(l, u);
    st.group = receives(l, st.un);
    st.bytes = st.un.range.length * es_;
    st.fold = st.un.ownAt >= 0 && st.un.range.length > 0
                  ? static_cast<double>(st.group) * w_.model().gamma * static_cast<double>(st.bytes)
                  : 0.0;
    st.straight = st.group > 0 && st.un.foldAfterOwn == sched::kNoSend && st.un.forwardTo >= 0;
    return st;
  }
  // Flight::waitRecv for receive i, then its CPU cost: o, and the copy out of the transport's
  // buffer when the message arrived before its receive was posted.
  World::Arrived waitReceive(const Step& st, size_t i) {
    const size_t slot = requestBase_[st.l] + st.first + i;
    const int32_t id = slots_[slot];
    RF_ENFORCE(id >= 0, "receive slot ", slot, " holds no request");
    const Recv& r = w_.recv(id);
    double cost = w_.model().o + (r.unexpected ? w_.model().copy * static_cast<double>(r.bytes) : 0.0);
    double floor = 0, post = 0;
    if (st.straight && i + 1 == st.group) {
      cost += st.fold;
      floor = takeWindowSlot();
      post = w_.model().o;
    }
    rk_.waitRecv = id;
    rk_.waitLane = st.l;
    rk_.waitUnit = st.u;
    return w_.arrived(id, cost, floor, post);
  }
  void endReceive(const Step& st, size_t i) {
    const size_t slot = requestBase_[st.l] + st.first + i;
    rk_.waitRecv = -1;
    w_.consume(slots_[slot]);
    slots_[slot] = -1;
  }

  World& w_;
  RankState& rk_;
  const sched::Schedule& s_;
  const coll::Group group_;
  const uint32_t phase_;
  const size_t es_;
  const sched::Pacing& pace_;
  const int lanes_;
  sched::Lane lane_[kMaxLanes];
  size_t requestBase_[kMaxLanes] = {};
  size_t posted_[kMaxLanes] = {}, processed_[kMaxLanes] = {};
  size_t processedAll_ = 0, sent_ = 0, ownCount_ = 0;
  bool hasSlots_ = false;
  std::vector<int32_t> slots_;  // receive id per request slot (-1: free)
  std::deque<Sent> window_;     // Flight's send window, oldest first
  std::vector<sched::Unit> units_[kMaxLanes];  // posted units by u % window
  struct Ahead {
    sched::Unit unit;
    int peer[2];  // s_.peer(l, u, i) of its first two receives
  };
  Ahead ahead_[kMaxLanes][kLookahead];         // units aheadBase_.. (unitAt)
  size_t aheadBase_[kMaxLanes] = {}, aheadCount_[kMaxLanes] = {};
  std::vector<bool> forwardsAlso_;             // lane 0's processed units with a forwardAlso
                                               // (allocated at the first one)
  size_t sendWindow_ = 1;
};

}  // namespace

Task rankTask(World& w, int rank, const PlanFn& plan) {
  RankState& rk = w.rank(rank);
  try {
    try {
      std::vector<coll::Phase> phases = plan(rk.shape);
      RF_ENFORCE(phases.size() < (size_t{1} << 28), "at most 2^28 phases, not ", phases.size());
      rk.phases = static_cast<uint32_t>(phases.size());
      for (uint32_t i = 0; i < phases.size(); ++i) {
        rk.phase = i;
        RF_ENFORCE(phases[i].schedule != nullptr, "phase ", i, " has no schedule");
        {
          PhaseRun run(w, rk, phases[i], i);
          co_await run.go();
        }
        phases[i].schedule.reset();  // a rank's schedules live only while it runs them
      }
      rk.phase = rk.phases;
      rk.finished = true;
      rk.finish = w.now();
    } catch (const Error& e) {
      RF_THROW(Error, "rank ", rank, ", phase ", rk.phase, " of ", rk.phases, ": ", e.what());
    }
  } catch (...) {
    w.fail(std::current_exception());
  }
}

}  // namespace ringfold::sim
