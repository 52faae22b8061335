// Schedule: a collective's steps for one rank as a pure description, which the executor
// (executor.h) runs. The concrete schedules are in collective_schedules.h; the index math they
// use is in schedules.h.
//
// A schedule says which messages this rank sends of its own (own sends, paced `lead` ahead of
// the folds), and gives a sequence of units. A unit is a group of receives (same range, one per
// listed peer), then an optional fold of those receives and this rank's contribution in a given
// order, then an optional forward of the result to one or two peers. Units come in lanes (the ring
// allreduce has two: reduce-scatter, then allgather); each lane has its own receive cursor,
// posted up to `window` units ahead of the fold, and the lanes are folded one after the other.
// Nothing here knows buffers or transports: the executor turns ranges into addresses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/schedules.h"

namespace ringfold::sched {
enum class Place : uint8_t {
  kSlot,  // a receive slot in the collective's scratch (slot of the unit's receive 0 for folds)
  kDst,   // the result buffer, at the unit's range
};

constexpr size_t kNoSend = SIZE_MAX;
constexpr size_t kLaneGroup = SIZE_MAX;  // a unit's receive count: its lane's group

// What must have happened before a unit's receives are posted: a send (this rank's own send
// `index`, or the forward of unit `index` of lane 0) must have been posted and, with `retire`,
// have completed (it reads the memory the receive overwrites). A kForward gate without
// `retire` on a unit that forwards nothing waits for that unit to have been processed.
struct Gate {
  enum Kind : uint8_t { kNone, kOwnSend, kForward } kind = kNone;
  size_t index = 0;
  bool retire = false;
  bool block = false;  // wait for the send rather than stop the cursor until it completes
};

struct Unit {
  Range range;                   // elements of the buffer every receive of the unit carries
  size_t receives = kLaneGroup;  // receives of the unit, at most the lane's group (a tree node
                                 // has 0, 1 or 2 children depending on the tree)
  uint32_t sub = 0;              // tag step of its receives (check.h)
  Place into = Place::kSlot;
  Gate gate;
  // Fold: the group's receives and this rank's contribution, folded left to right with own at
  // position ownAt (-1: no fold): acc = x0 op x1, acc = acc op x2, ...; `last` applies the
  // final scale on the last operation.
  int ownAt = -1;
  Place foldInto = Place::kDst;
  bool last = false;
  bool stageOwn = true;            // preScale own at the fold (false: an own send staged it)
  size_t foldAfterOwn = kNoSend;   // own send that must complete first (it reads the target)
  // Forward of the folded (or received) range, to forwardTo and then forwardAlso (same sub and
  // source; a gate on the unit's forward waits for both).
  int forwardTo = -1;
  int forwardAlso = -1;
  uint32_t forwardSub = 0;
  Place forwardFrom = Place::kDst;
};

// One of this rank's own messages; `stage`: preScale (or copy) its range before the first send.
struct OwnSend {
  int peer = 0;
  uint32_t sub = 0;
  Range range;
  bool stage = true;
};

// A lane: `units` units, folded in order; receives of unit u use slots (u % window) * group ...
struct Lane {
  size_t units = 0;
  size_t window = 1;      // units posted ahead of the fold (and receive slots, with `group`)
  size_t group = 1;       // receives per unit (at most; Unit::receives may say fewer)
  size_t slotElems = 1;   // elements per receive slot (0: the lane receives into recvbuf only)
  // With Pacing::interleaveLanes: how late this lane's units arrive against the other later
  // lanes' units of the same index (the tree: this rank's depth in that lane's tree, in hops).
  // When the executor must block for a later lane, it waits on the one furthest behind and,
  // among those, the least late: blocking on a later arrival would hold back the forwards of
  // an earlier one (on 8 emulated hosts, a quarter of the tree's latency at 4 KiB).
  int lateness = 0;
};

// The rule above: whether the executor, blocking for a later lane, waits for lane `a` (`doneA`
// units processed) before lane `b`. The executor and the simulator both decide by it.
inline bool waitsFirst(const Lane& a, size_t doneA, const Lane& b, size_t doneB) {
  return doneA != doneB ? doneA < doneB : a.lateness < b.lateness;
}

// Pipelining parameters of a schedule (why each value: see the schedule that sets it).
struct Pacing {
  size_t lead = 1;             // own sends posted ahead of the folds (kNoSend: all at once)
  size_t sendWindow = 16;      // sends in flight before the oldest is waited for
  bool receivesFirst = false;  // post the first receives before the first own sends
  // Process a unit of lane 1 or 2 as soon as its receives are in, between lane-0 units and
  // across those lanes, rather than lane after lane. Only for schedules whose lane-0 units never
  // wait on a later lane and whose later lanes never wait on each other (the tree: a reduce up
  // never needs a broadcast down, and each tree's broadcast is its own lane).
  bool interleaveLanes = false;
};

// Contract: a schedule describes one rank's part of one call (or one round of it) and is
// immutable once built; every method is pure and cheap (the executor calls unit() when it posts
// a unit's receives and again when it folds it). 1 to 3 lanes; a gate of kForward names a unit
// of lane 0; a unit with forwardAlso also has forwardTo. Every rank's sends must pair, in order per (peer, tag), with its peers' receives,
// with equal ranges (tests/collectives/schedules_test.cc checks this for every schedule).
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual int lanes() const = 0;
  virtual Lane lane(int l) const = 0;
  virtual size_t ownSends() const = 0;
  virtual OwnSend ownSend(size_t i) const = 0;
  virtual Unit unit(int l, size_t u) const = 0;
  virtual int peer(int l, size_t u, size_t i) const = 0;  // sender of receive i of unit u
  const Pacing& pacing() const { return pacing_; }

 protected:
  Pacing pacing_;
};

}  // namespace ringfold::sched
