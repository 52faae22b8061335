// fake::open(): a Fabric (fabric.h) for ranks that are threads of one process, with a fault
// injector, for the protocol's tests.
//
// Model
//   * One network per process. Every open() makes an endpoint with a serial of its own; its
//     address is "fake:<serial>" (the same for every peer), so several jobs may run at once and
//     one after another. Nothing is keyed by rank across jobs, except disappear(rank).
//   * registerMemory() records [data, data + size) under a fresh network-wide rkey; remoteBase is
//     the virtual address (as FI_MR_VIRT_ADDR). Host memory only: kCuda throws InvalidArgument.
//   * A post queues the write at the target. It lands when the TARGET polls (the contract's
//     "writes to this rank land only while it polls"): the bytes are copied from the poster's
//     buffer then (so the buffer must stay intact until kWriteDone), then the immediate (if any)
//     is queued on the target's completion queue, then the poster is sent kWriteDone. On an
//     ordered lane a write lands only after every earlier write of that lane.
//   * Checks at landing, as a NIC makes them: the rkey must be registered at the target and
//     [address, address + length) inside it, else the poster gets kError "remote access error"
//     and nothing lands; the local bytes must still be registered at the poster ("local
//     protection error"). A zero-length write checks no key (as verbs).
//   * Receives: an immediate lands only while the target has a receive from that peer
//     (postImmReceives); without one the write waits (RNR retry), and on an ordered lane so does
//     every later write of that lane. Every kImmediate consumes one receive.
//   * A closed (or destroyed) endpoint, and one that disappear()ed, is gone: nothing it posted
//     and that had not landed lands any more; writes queued to it or posted to it later complete
//     at the poster with kError "peer rank R is gone (fake fabric)" after Faults::goneDelayMs.
//     A disappeared fabric still accepts posts (dropped) and its polls return nothing.
//   * postWrite* return -EAGAIN while the fabric has maxInflight posts whose completion poll()
//     has not returned yet; -EINVAL for a bad peer, lane or local range, -ENOTCONN for a peer
//     never inserted, -EMSGSIZE past maxWriteBytes(), -EBADF after close().
//   * waitFd() is an eventfd, signalled when a write is queued to this endpoint or a completion
//     for it; poll() consumes it. A background thread (started on first need) posts the delayed
//     "gone" errors, so a sleeper on waitFd() wakes for them too.
//
// Counters (network-wide, since the last clearFaults()): writes and bytes that landed, immediates
// queued at targets, kError completions produced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma::fake {

// What to inject; all off by default. lanes, ordered, maxWriteBytes and maxInflight are taken by
// a fabric when it opens (a fabric's properties do not change under it); the rest act on the
// running network at once.
struct Faults {
  int lanes = 1;          // lanes() reported (1..8)
  bool ordered = true;    // writesOrdered(); false: deliveries may be reordered even within a lane
  bool reorder = false;   // deliver writes to a peer in a shuffled order across lanes (within a
                          // lane too if !ordered)
  uint64_t seed = 1;      // for every random choice (the generator is reseeded by setFaults)
  double errorProbability = 0;    // a post completes with kError at the poster (and never lands)
  int64_t errorAfterWrites = -1;  // the Nth write posted in the network since setFaults/clearFaults
                                  // (0-based) fails with kError; -1 off
  int errorFromRank = -1;         // >= 0: errorAfterWrites counts that rank's writes only (the
                                  // peer's replies, posted concurrently, do not shift which fails)
  // true: that write-with-imm is held back (whole, bytes too) until releaseWithheld(). Called
  // under the network's lock at post time: it must not call back into fake::.
  std::function<bool(int from, int to, uint32_t imm)> withholdImm;
  size_t maxWriteBytes = size_t{1} << 30;
  int maxInflight = 4096;  // posts a fabric may have in flight before -EAGAIN
  int goneDelayMs = 50;    // how long a write to a gone endpoint takes to fail
};

// Replaces the faults (thread-safe); resets the write count errorAfterWrites refers to.
void setFaults(const Faults& faults);
// Faults{} again, counters to zero, and withheld writes whose poster is gone dropped (the others
// stay withheld until releaseWithheld()).
void clearFaults();
// Delivers every withheld write, in the order they were posted.
void releaseWithheld();
// Every open fabric of rank `rank` (in every job running) vanishes as a killed process would.
void disappear(int rank);
// That fabric alone (it must come from fake::open).
void disappear(Fabric& fabric);

struct Counters {
  uint64_t writes = 0;
  uint64_t immediates = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
};
Counters counters();

// Throws InvalidArgument unless 0 <= rank < size.
std::unique_ptr<Fabric> open(int rank, int size);

}  // namespace ringfold::transport::rdma::fake
