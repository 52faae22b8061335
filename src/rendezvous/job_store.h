// JobStore: the one Store all ranks of a job share, opened from a BootstrapInfo.
//
//   auto info = bootstrapFromEnvironment();
//   JobStore job = openJobStore(info);       // rank 0 without a launcher also hosts the server
//   job.store->add("ready", 1);
//
// * size 1: an in-memory HashStore, no network.
// * info.hostStore (rank 0, unless RINGFOLD_STORE_SERVER=external): starts a TcpStoreServer at
//   info.storePort on storeListenAddress(info), then connects to it there. The server lives as
//   long as the process (or until a later openJobStore hosts one on another port or with
//   another secret). Its store is a client of that server that can also tell (Store::describe,
//   otherClients) whether any other process has reached the server, for the rendezvous's
//   errors. A re-init (shutdown, then init) reuses the server, so the other ranks, which may
//   re-init first, never reach a store that is about to close. Each incarnation keeps to its
//   own keys, as under ringfoldrun, whose store outlives every incarnation too.
// * every other rank: a TcpStore to info.storeAddr:info.storePort, retrying until
//   `connectTimeout` (RINGFOLD_START_TIMEOUT by default) while rank 0 is still starting.
// Members are destroyed store first, then server (declaration order reversed).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/bootstrap.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store.h"

namespace ringfold::rendezvous {

struct JobStore {
  std::shared_ptr<TcpStoreServer> server;  // set only on the rank that hosts the store
  std::unique_ptr<Store> store;
};

JobStore openJobStore(const BootstrapInfo& info);
// Where rank 0's store listens: only where the ranks will dial when that is known, else
// every interface (""):
//   * a numeric store address that is loopback or one of this host's addresses: that address;
//   * a host name that resolves only to loopback here, for a job whose ranks are all on this
//     host (localSize == size): that loopback address;
//   * anything else (a name that other hosts may resolve differently, a NAT or service
//     address): every interface.
std::string storeListenAddress(const BootstrapInfo& info);
JobStore openJobStore(const BootstrapInfo& info, std::chrono::milliseconds connectTimeout);

}  // namespace ringfold::rendezvous
