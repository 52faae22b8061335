// liveness::Monitor (monitor.h).
#include "transport/liveness/monitor.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "transport/liveness/process.h"

namespace ringfold::transport::liveness {

void MonitorSlot::share(std::shared_ptr<Monitor> monitor, bool connected) {
  RF_ENFORCE(!connected, "shareLiveness() must come before connectAll()");
  RF_ENFORCE(monitor != nullptr, "shareLiveness(): no monitor");
  monitor_ = std::move(monitor);
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

void Monitor::attach(Links& links, int rank, int size, const std::vector<bool>& peers) {
  if (peers_.empty()) {
    rank_ = rank;
    peers_.assign(size, Peer{});
  }
  RF_ENFORCE(rank == rank_ && size == this->size(), "liveness monitor shared by rank ", rank_, " of ", this->size(),
             " and rank ", rank, " of ", size);
  if (abortedFlag(links) == nullptr) aborted_.emplace_back(&links, false);
  const Clock::time_point now = Clock::now();
  for (int p = 0; p < size && p < static_cast<int>(peers.size()); ++p) {
    if (!peers[p] || p == rank) continue;
    RF_ENFORCE(peers_[p].via == nullptr || peers_[p].via == &links, "rank ", p, " is attached by two backends");
    peers_[p].via = &links;
    peers_[p].lastHeard = now;
  }
}

bool* Monitor::abortedFlag(const Links& by) {
  for (auto& [links, aborted] : aborted_) {
    if (links == &by) return &aborted;
  }
  return nullptr;
}

bool Monitor::aborted(const Links& by) const {
  for (const auto& [links, aborted] : aborted_) {
    if (links == &by) return aborted;
  }
  return false;
}

void Monitor::onNotice(int peer, const Notice& n) {
  Peer& p = peers_[peer];
  if (n.seq <= p.seen) return;  // overtaken by a later one
  p.seen = n.seq;
  p.notice = {};
  if (n.waitedOn >= 0) p.notice = {n.waitedOn, n.waited, n.silent, Clock::now(), n.firstLaterMessage};
}

namespace {

std::exception_ptr errorOf(ErrorKind kind, int peer, const std::string& text) {
  try {
    throwError(kind, peer, text);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

std::exception_ptr Monitor::onAbort(int peer, ErrorKind kind, const std::string& text) {
  bool* aborted = connected(peer) ? abortedFlag(*peers_[peer].via) : nullptr;
  if (aborted == nullptr || *aborted) return nullptr;  // the first abort wins
  *aborted = true;
  // The peer's words are what every rank reports: printable, and something even when a peer sent
  // none or only control bytes (no ringfold rank does; found by tests/fuzz/tcp_frames_fuzz).
  return errorOf(kind, peer, detail::printable(text, detail::concat("rank ", peer, " aborted the job without giving a reason"), 4000));
}

std::exception_ptr Monitor::abort(const Links& by, ErrorKind kind, const std::string& text) {
  bool* aborted = abortedFlag(by);
  if (aborted == nullptr) {  // not attached (yet): nobody to tell, but aborted all the same
    aborted_.emplace_back(&by, false);
    aborted = &aborted_.back().second;
  }
  if (*aborted) return nullptr;
  *aborted = true;
  for (Peer& p : peers_) {
    if (p.via == &by) p.via->sendAbort(static_cast<int>(&p - peers_.data()), kind, text);
  }
  return errorOf(kind, -1, text);
}

void Monitor::sendAll(int waitedOn, std::chrono::milliseconds waited, std::chrono::milliseconds silent) {
  for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
    if (!connected(p)) continue;
    Notice n;
    n.seq = ++peers_[p].sent;
    n.waitedOn = waitedOn;
    n.waited = waited;
    n.silent = silent;
    peers_[p].via->sendNotice(p, n);
  }
}

void Monitor::announce(int waitedOn, std::chrono::milliseconds waited) {
  const auto silent =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - peers_[waitedOn].lastHeard);
  sendAll(waitedOn, waited, silent);
  if (outer_.monitor) outer_.monitor->sendAll(outer_.rank[waitedOn], waited, silent);
}

void Monitor::withdraw() {
  sendAll(-1, {}, {});
  if (outer_.monitor) outer_.monitor->sendAll(-1, {}, {});
}

void Monitor::setOuter(std::shared_ptr<Monitor> outer, std::vector<int> outerRank, std::vector<int> outerJobRank) {
  if (outer == nullptr) {
    outer_ = {};
    return;
  }
  RF_ENFORCE(outer.get() != this, "a liveness monitor cannot be its own outer one");
  RF_ENFORCE_EQ(outerRank.size(), peers_.size(), "outer ranks for a group of ", peers_.size());
  for (int r : outerRank) RF_ENFORCE(r >= 0 && r < outer->size(), "outer rank ", r, " of ", outer->size());
  RF_ENFORCE(outerJobRank.empty() || static_cast<int>(outerJobRank.size()) == outer->size(), "job ranks for ",
             outer->size(), " outer ranks: ", outerJobRank.size());
  outer_ = {std::move(outer), std::move(outerRank), std::move(outerJobRank)};
}

std::string Monitor::Naming::operator()(int r) const {
  const int n = job != nullptr && r >= 0 && r < static_cast<int>(job->size()) ? (*job)[r] : r;
  return detail::concat(jobWords ? "job rank " : "rank ", n);
}

std::string Monitor::Naming::self(int r) const {
  if (!jobWords) return detail::concat("this rank (", r, ")");
  return detail::concat("this rank (", (*this)(r), ")");
}

int Monitor::blame(int peer, std::string& what) const { return blame(peer, what, Naming{}, true); }

int Monitor::blame(int peer, std::string& what, const Naming& name, bool askOuter) const {
  // Follow the WAITING notices from `peer`: a rank that said it waits for another is alive, and
  // the one at the end of the chain is the one that went silent.
  std::vector<bool> seen(peers_.size(), false);
  int at = peer;
  int from = -1;  // the rank whose notice named `at`
  for (;;) {
    seen[at] = true;
    const Received& notice = peers_[at].notice;
    const int next = notice.waitedOn;
    if (next < 0 || next >= static_cast<int>(peers_.size())) break;
    what += detail::concat(name(at), " is alive but said it had waited ", seconds(notice.waited), " s for ");
    if (next == rank_) {
      what += detail::concat(name.self(rank_),
                             ", which waits for it: the ranks are running different collectives, or the same "
                             "ones in a different order");
      return peer;
    }
    what += detail::concat(name(next), "; ");
    if (seen[next]) {
      what += "the ranks wait for each other in a cycle: they are running different collectives";
      return peer;
    }
    from = at;
    at = next;
  }
  // Said nothing here, but it may wait in another group of the one this group runs inside: what
  // it said there goes on the chain (a rank waiting on a frozen rank outside this group is alive).
  if (askOuter && outer_.monitor && outer_.monitor->peers_[outer_.rank[at]].notice.waitedOn >= 0) {
    const Naming there{outer_.jobRank.empty() ? nullptr : &outer_.jobRank, true};
    const int culprit = outer_.monitor->blame(outer_.rank[at], what, there, false);
    const auto it = std::find(outer_.rank.begin(), outer_.rank.end(), culprit);
    return it == outer_.rank.end() ? -1 : static_cast<int>(it - outer_.rank.begin());
  }
  what += silence(at, from, name);
  return at;
}

Unacknowledged Monitor::others(int except, bool unsentToExcept) const {
  Unacknowledged out;
  int tracked = 0;
  bool untracked = false;  // a same-host peer (or one over a fabric that hides its view)
  for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
    if (p == except || !connected(p)) continue;
    const Unacknowledged u = peers_[p].via->unacknowledged(p);
    if (!u.tracked && !u.any) {
      untracked = true;
      continue;
    }
    if (!u.any) return {};
    out.retransmits = std::max(out.retransmits, u.retransmits);
    out.sinceAck = tracked == 0 ? u.sinceAck : std::min(out.sinceAck, u.sinceAck);
    out.unsent = out.unsent || u.unsent;
    ++tracked;
  }
  // With a same-host peer, the hosts that do not answer may be the only other host, cut off
  // itself (two hosts): only data that could not leave this host says that the link is ours.
  if (tracked == 0 || (untracked && !out.unsent && !unsentToExcept)) return {};
  out.any = out.tracked = true;
  return out;
}

bool Monitor::othersUnacknowledged(int except) const {
  const bool linked = except >= 0 && except < size() && connected(except);
  return others(except, linked && peers_[except].via->unacknowledged(except).unsent).any;
}

std::string Monitor::silence(int at, int via, const Naming& name) const {
  const Clock::time_point now = Clock::now();
  const Peer& peer = peers_[at];
  std::string out;
  if (via < 0) {
    // This rank waited on `at` itself: the last bytes it received from it.
    out = detail::concat(name(at), " sent nothing for ", seconds(now - peer.lastHeard), " s",
                         peer.heardAny ? "" : " (nothing at all since the connection was set up)");
  } else {
    // Reached through `via`'s notice: what `via` said, aged by the time since it arrived. This
    // rank may never hear from `at` directly (a ring receives from one neighbour only).
    const Received& notice = peers_[via].notice;
    const Clock::duration theirs = notice.silent + (now - notice.receivedAt);
    // The silent rank is named last: ringfoldrun's summary blames the last rank an error names.
    out = detail::concat(name(at), " sent nothing for ", seconds(theirs), " s (the time since ", name(via),
                         " last received anything from ", name(at), ")");
  }
  const bool linked = connected(at);
  // A stopped or busy process's kernel still acknowledges what it is sent: unacknowledged data
  // means the network, or the host, is down (and then perhaps this rank's own link).
  const Unacknowledged gone = linked ? peer.via->unacknowledged(at) : Unacknowledged{};
  // This rank's own link: no other host acknowledges it either, and `at`'s host did not (or
  // `at` is a same-host peer, whose link tells nothing). A waiting rank's notices went to every
  // peer half way to its timeout, so a rank cut off while it only receives has such data too.
  const Unacknowledged rest = gone.any || !gone.tracked ? others(at, gone.unsent) : Unacknowledged{};
  const bool ownLink = rest.any;
  if (ownLink) {
    const Clock::duration sinceAck = gone.any ? std::min(gone.sinceAck, rest.sinceAck) : rest.sinceAck;
    out += detail::concat("; no rank's host has acknowledged anything ", name.self(rank_), " sent for ",
                          seconds(sinceAck), " s (", std::max(gone.retransmits, rest.retransmits),
                          " retransmissions): this rank's own network link is likely down");
  } else if (gone.any) {
    out += detail::concat("; its host has acknowledged nothing this rank sent for ", seconds(gone.sinceAck), " s (",
                          gone.retransmits, " retransmissions): the network between this rank and ", name(at),
                          " is down, or its host is");
  }
  const int pid = linked ? peer.via->pid(at) : 0;
  switch (processState(pid)) {
    case ProcessState::kStopped:
      out += detail::concat("; the process of ", name(at), " (pid ", pid, ") is stopped (SIGSTOP, or a debugger)");
      break;
    case ProcessState::kExited:
      out += detail::concat("; the process of ", name(at), " (pid ", pid, ") has exited");
      break;
    case ProcessState::kRunning:
      if (gone.any || ownLink) out += detail::concat("; the process of ", name(at), " (pid ", pid, ") is running");
      break;
    case ProcessState::kUnknown:
      break;
  }
  return out;
}

}  // namespace ringfold::transport::liveness
