// Selector: which backend joins this rank to each peer. Every rank publishes its host identity
// under "<prefix>/host/<rank>" and reads every peer's; a peer with the same identity (same
// kernel boot and network namespace: see transport/host_identity.h) is on this host and gets the
// local backend, any other peer the remote one. A peer whose identity is unknown ("-") goes to
// the remote backend: it always works between processes.
//
//   local  backend : RINGFOLD_LOCAL_TRANSPORT: shm -> "shm" (default), unix -> "unix_uring",
//                    tcp -> "tcp_uring", rdma -> "rdma". A pair that shm cannot join (its Unix
//                    socket cannot be reached) falls back to "unix_uring", and one that cannot be
//                    reached that way either to the remote backend, each logged with the reason.
//   remote backend : RINGFOLD_TRANSPORT: rdma -> "rdma" (any fabric, libfabric's tcp;ofi_rxm
//                    included); tcp_uring -> "tcp_uring"; unset -> "rdma" when this machine has
//                    RDMA hardware (rdma::hardwareFabric: an active IB/RoCE port, or EFA) or
//                    RINGFOLD_RDMA_FABRIC is set, else "tcp_uring".
//   fallback       : with "rdma", a pair uses it only when both ends can: every rank publishes
//                    under "<prefix>/remote/<rank>" the remote backend it can run (or why not),
//                    and a pair where either end cannot is joined through "tcp_uring", logged
//                    with the reason (exchangeRemoteCapabilities, applyFallback).
//
// Contract: decisions are symmetric (rank a gives b the backend b gives a), since both compare
// the same two published identities; so each backend's device connects the same pairs from
// both ends. RINGFOLD_TEST_HOST_ID, when set, replaces this rank's identity (tests make one
// machine look like several hosts).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ringfold::rendezvous {
class Store;
}

namespace ringfold::transport::per_peer {

struct Policy {
  std::string local = "unix_uring";   // backend between ranks of one host
  std::string remote = "tcp_uring";   // backend between hosts
  std::string fallback;               // for a pair that cannot use `remote` ("" none)
  std::string remoteUnusable;         // why this rank cannot run `remote` ("" it can)
  std::string localFallback;          // for a local pair `local` cannot join ("": the remote backend)
  // RINGFOLD_LOCAL_TRANSPORT's and RINGFOLD_TRANSPORT's choices (probing the RDMA fabric when
  // rdma is asked for or may be the default); throws InvalidArgument naming the variable if
  // unknown.
  static Policy fromParams();
};

// This rank's identity for the selection: RINGFOLD_TEST_HOST_ID if set, else hostIdentity()
// ("-" when /proc does not tell).
std::string selectionHostId();

// Publishes `myHost` under "<prefix>/host/<rank>" and returns every rank's identity (by rank).
// Throws TimeoutError naming the rank whose identity did not appear within `timeout`.
std::vector<std::string> exchangeHostIds(rendezvous::Store& store, const std::string& prefix, int rank, int size,
                                         const std::string& myHost, std::chrono::milliseconds timeout);

// The backend of each peer, by rank ("" at `rank`): policy.local for a peer with this rank's
// identity (known, not "-"), else policy.remote.
std::vector<std::string> assignBackends(const std::vector<std::string>& hostIds, int rank, const Policy& policy);

// With policy.fallback set: publishes what this rank can run under "<prefix>/remote/<rank>" and
// returns each rank's word (policy.remote, or "-" and the reason it cannot).
std::vector<std::string> exchangeRemoteCapabilities(rendezvous::Store& store, const std::string& prefix, int rank,
                                                    int size, const Policy& policy,
                                                    std::chrono::milliseconds timeout);

// Moves every peer assigned policy.remote to policy.fallback when this rank or that peer cannot
// run it (capabilities by rank, as exchanged), logging why; returns the policy to connect with
// (its remote is the fallback when this rank cannot run the remote backend at all).
Policy applyFallback(std::vector<std::string>& backends, const std::vector<std::string>& capabilities, int rank,
                     const Policy& policy);

}  // namespace ringfold::transport::per_peer
