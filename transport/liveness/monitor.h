// liveness::Monitor: abort propagation, WAITING notices and blame, for any backend.
//
// Vocabulary
//   notice  : "rank F has waited `waited` for rank W, from which it had received nothing for
//             `silent`". A rank whose wait has lasted half its timeout sends every peer one
//             (announce), and withdraws it when the wait ends (withdraw: a notice with waitedOn
//             -1). Notices are numbered per sender and receiver (seq 1, 2, ...): one overtaken by
//             a later one (several sockets, queues) is ignored. A notice also carries the
//             sender's next message number (the backend's own numbering of its messages to that
//             peer): a message numbered that or later shows the sender got past that wait, so it
//             withdraws the notice too (onMessage). Earlier messages do not: they may arrive
//             after the notice.
//   blame   : a wait on rank P that timed out follows P's notice (and the next rank's) to the
//             rank that went silent, so a rank stuck behind a stopped one is not blamed for it.
//             The silence reported is measured from the last bytes received from that rank
//             (heard), by whichever rank waited on it, and the kernel's view is added: data its
//             host never acknowledged (a network or host failure), or that no other peer's host
//             acknowledges either (then this rank's own link: "this rank's own network link is
//             likely down"), and whether its process is stopped or gone where this rank can look.
//   abort   : per backend device, the first abort wins, local (abort: every peer of that device
//             is sent an ABORT) or a peer's (onAbort); either returns the error every request of
//             that device then fails with. (A composite device spreads one child's abort to the
//             others itself.)
//   sharing : one Monitor may serve several backend devices of one communicator (a composite
//             device gives each child the same one, Device::shareLiveness): each attaches the
//             peers it reaches with its own Links, notices go to every peer whatever its backend,
//             and blame follows notices across backends.
//   outer   : a group that runs inside another (a hierarchical allreduce's host and cross-host
//             groups inside the job's communicator: Communicator::followAborts) has that group's
//             monitor as its outer one (setOuter). A wait announced here is announced there
//             too, in its numbers, and withdrawn with it, so the outer group's other sub-groups
//             hear, through it, whom this rank waits for. Blame whose chain ends here at a rank
//             that said nothing here follows what that rank said there (one level); the ranks
//             named from there are "job rank N", in the job's numbers, which
//             Communicator::inJobRanks leaves as they are.
//
// Contract: the backend implements Links (sending notices and aborts in its own encoding, and
// its kernel's view of a peer), attaches its peers, and calls heard/onMessage/onNotice/onAbort
// as frames arrive.
// heard() and onMessage() are inline and allocate nothing (they run per received frame). Not
// thread-safe: the thread driving the device calls everything. Message texts are relied on by
// tests and by ringfoldrun's summary (which blames the last rank an error names).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"

namespace ringfold::transport::liveness {

using Clock = std::chrono::steady_clock;

struct Notice {
  uint32_t seq = 0;
  int waitedOn = -1;  // -1: the wait is over
  std::chrono::milliseconds waited{0};
  std::chrono::milliseconds silent{0};  // the sender had received nothing from waitedOn for this long
  uint64_t firstLaterMessage = 0;       // set by the backend: its next message number to this rank
};

// Data sent to a peer that its host has not acknowledged while being retransmitted, or that
// this host could not even put on the wire while retrying it (`unsent`: its own link or route is
// down). A stopped or busy process's kernel still acknowledges, so this means the network or a
// host is down. `tracked`: the kernel keeps this view of the link (TCP); false where it cannot
// say (same-host transports, fabrics that hide it).
struct Unacknowledged {
  bool any = false;
  unsigned retransmits = 0;               // tries without an answer (retransmissions or probes)
  std::chrono::milliseconds sinceAck{0};  // since its host last acknowledged anything
  bool tracked = false;                   // `any` implies it
  bool unsent = false;                    // some of it never left this host
};

// What a backend provides to the monitor, for the peer ranks it attached.
class Links {
 public:
  virtual ~Links() = default;
  // Best effort (skipped when the link cannot take it now). The backend fills in
  // notice.firstLaterMessage.
  virtual void sendNotice(int peer, const Notice& notice) = 0;
  virtual void sendAbort(int peer, ErrorKind kind, const std::string& text) = 0;
  // The kernel's view of the link to `peer` (never anything, and not tracked, for same-host
  // transports).
  virtual Unacknowledged unacknowledged(int peer) const = 0;
  // The peer's pid when this process can look it up (same kernel and pid namespace), else 0.
  virtual int pid(int peer) const = 0;
};

class Monitor {
 public:
  // A backend device reaches the ranks `peers` marks (by rank) through `links`. The first call
  // sizes the tables; the peers attached count as heard now. Every call gives the same rank and
  // size, and attaches other peers.
  void attach(Links& links, int rank, int size, const std::vector<bool>& peers);
  bool connected(int peer) const { return peer >= 0 && peer < size() && peers_[peer].via != nullptr; }

  // ---- as frames arrive (backend) ----
  void heard(int peer) {
    Peer& p = peers_[peer];
    p.lastHeard = Clock::now();
    p.heardAny = true;
  }
  void onMessage(int peer, uint64_t messageNumber) {
    Received& n = peers_[peer].notice;
    if (n.waitedOn >= 0 && messageNumber >= n.firstLaterMessage) n = {};
  }
  void onNotice(int peer, const Notice& notice);
  // A peer's ABORT: the error to poison with (rank `peer`, kind, text), or null if an abort
  // already happened (the first wins).
  std::exception_ptr onAbort(int peer, ErrorKind kind, const std::string& text);

  // ---- this rank ----
  // Sends every peer of `by` an ABORT and returns the error; null if `by` already aborted.
  std::exception_ptr abort(const Links& by, ErrorKind kind, const std::string& text);
  bool aborted(const Links& by) const;
  // This rank has waited `waited` for `waitedOn`: tells every connected peer (once per wait).
  void announce(int waitedOn, std::chrono::milliseconds waited);
  // The wait announced is over: withdraws the notice (a stale one would misdirect blame).
  void withdraw();

  // A wait on `peer` timed out: appends to `what` who went silent and returns the rank to blame
  // (-1: a rank outside this group, named in `what`, found through the outer monitor).
  int blame(int peer, std::string& what) const;

  // This group runs inside the group `outer` monitors (driven by the same thread): rank r here
  // is rank outerRank[r] there, and rank o there is job rank outerJobRank[o] (empty: the same
  // numbers). See "outer" above. Null `outer` detaches.
  void setOuter(std::shared_ptr<Monitor> outer, std::vector<int> outerRank, std::vector<int> outerJobRank);
  // Whether this rank's own link is the likely failure, as far as peers other than `except` show:
  // there is one whose link the kernel tracks, and none of those acknowledges what this rank
  // sent. (A waiting rank's notices are data every peer must acknowledge, so a rank cut off while
  // it only receives has unacknowledged data too.) A same-host peer (untracked) answers for this
  // rank's side, as its hosts' silence could be theirs alone (two hosts), unless some of the data,
  // `except`'s included, never left this host.
  bool othersUnacknowledged(int except) const;
  Clock::time_point lastHeard(int peer) const { return peers_[peer].lastHeard; }

  // What `peer` last said it waits for (waitedOn -1: nothing), while not withdrawn.
  struct Received {
    int waitedOn = -1;
    std::chrono::milliseconds waited{0};
    std::chrono::milliseconds silent{0};
    Clock::time_point receivedAt{};
    uint64_t firstLaterMessage = 0;
  };
  const Received& notice(int peer) const { return peers_[peer].notice; }

 private:
  struct Peer {
    Links* via = nullptr;  // the backend that reaches it; null: none attached
    Clock::time_point lastHeard{};
    bool heardAny = false;
    Received notice;
    uint32_t sent = 0;  // notices sent to this peer (their number)
    uint32_t seen = 0;  // the highest number of a notice from this peer
  };
  // How blame names a rank: "rank N" in this group's numbers, or (for an inner group asking
  // this one, its outer) "job rank N".
  struct Naming {
    const std::vector<int>* job = nullptr;  // null: this group's numbers
    bool jobWords = false;
    std::string operator()(int r) const;
    std::string self(int r) const;  // "this rank (N)", "this rank (job rank N)"
  };
  struct Outer {
    std::shared_ptr<Monitor> monitor;
    std::vector<int> rank;     // this group's rank -> the outer's
    std::vector<int> jobRank;  // the outer's rank -> the job's (empty: the same)
  };
  void sendAll(int waitedOn, std::chrono::milliseconds waited, std::chrono::milliseconds silent);
  int blame(int peer, std::string& what, const Naming& name, bool askOuter) const;
  std::string silence(int at, int via, const Naming& name) const;
  // Over the tracked peers other than `except`: any (every one unacknowledged, at least one,
  // and no same-host peer unless some data never left this host, `unsentToExcept` counting),
  // the most retries, and the least time since an acknowledgement (from any of them).
  Unacknowledged others(int except, bool unsentToExcept) const;
  int size() const { return static_cast<int>(peers_.size()); }
  bool* abortedFlag(const Links& by);

  int rank_ = -1;
  std::vector<Peer> peers_;
  std::vector<std::pair<const Links*, bool>> aborted_;  // per attached backend
  Outer outer_;
};

// A backend device's monitor: its own until the communicator shares one with the device's
// siblings (Device::shareLiveness, which must come before connectAll).
class MonitorSlot {
 public:
  Monitor& operator*() const { return *monitor_; }
  Monitor* operator->() const { return monitor_.get(); }
  const std::shared_ptr<Monitor>& shared() const { return monitor_; }
  // Throws if the device is already `connected`, or `monitor` is null.
  void share(std::shared_ptr<Monitor> monitor, bool connected);

 private:
  std::shared_ptr<Monitor> monitor_ = std::make_shared<Monitor>();
};

// "2.5" for 2.5 s: durations in error messages.
std::string seconds(Clock::duration d);

}  // namespace ringfold::transport::liveness
