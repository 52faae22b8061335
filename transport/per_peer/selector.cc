// Selector: host identities through the store, and the backend each peer gets.
#include "transport/per_peer/selector.h"

#include <algorithm>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/store.h"
#include "transport/host_identity.h"
#include "transport/rdma/fabric.h"

namespace ringfold::transport::per_peer {

Policy Policy::fromParams() {
  Policy p;
  const std::string local = params::kLocalTransport.str();
  if (local == "shm") {
    p.local = "shm";
    p.localFallback = "unix_uring";  // a pair shared memory cannot join (see per_peer::connectWith)
  } else if (local == "unix") {
    p.local = "unix_uring";
  } else if (local == "tcp") {
    p.local = "tcp_uring";
  } else if (local == "rdma") {
    p.local = "rdma";
  } else {
    RF_THROW(InvalidArgument, params::kLocalTransport.name, "='", local, "' is not shm, unix, tcp or rdma");
  }
  const std::string transport = params::kTransport.str();
  bool rdma = transport == "rdma";
  std::string hardware;  // what the probe found, when it ran: it runs once per start-up
  if (!params::kTransport.isSet()) {
    // Unset: RDMA when the machine has it (or a fabric was named), TCP otherwise.
    std::string why;
    hardware = rdma::hardwareFabric(why);
    rdma = params::kRdmaFabric.isSet() || !hardware.empty();
    if (!rdma) {
      RF_LOG(kDebug) << "no RDMA hardware (" << why << "): peers on other hosts use tcp_uring";
    }
  }
  if (rdma || p.local == "rdma") {
    const std::string fabric = params::kRdmaFabric.str();
    const bool found = !hardware.empty() && (fabric == "auto" || fabric == hardware);
    std::string why;
    if (!found && !rdma::fabricUsable(fabric, why)) {
      if (p.local == "rdma") {
        RF_LOG(kWarning) << params::kLocalTransport.name << "=rdma, but no fabric is usable here (" << why
                         << "): ranks on this host are joined through Unix sockets";
        p.local = "unix_uring";
      }
      p.remoteUnusable = why;
    }
  }
  if (rdma) {
    p.remote = "rdma";
    p.fallback = "tcp_uring";
  }
  return p;
}

std::string selectionHostId() {
  if (params::kTestHostId.isSet()) return "test:" + params::kTestHostId.str();
  const std::string id = hostIdentity();
  return id.empty() ? "-" : id;
}

namespace {

// Publishes `mine` under "<prefix>/<key>/<rank>" and returns every rank's word (by rank); throws
// TimeoutError naming the rank whose `what` did not appear within `timeout`.
std::vector<std::string> exchange(rendezvous::Store& store, const std::string& prefix, const char* key,
                                  const char* what, int rank, int size, const std::string& mine,
                                  std::chrono::milliseconds timeout) {
  auto keyOf = [&](int r) { return detail::concat(prefix, "/", key, "/", r); };
  store.setString(keyOf(rank), mine);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> words(size);
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      words[r] = mine;
      continue;
    }
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    try {
      words[r] = store.getString(keyOf(r), left);
    } catch (const TimeoutError&) {
      const std::string missing =
          detail::concat("rank ", r, " did not publish its ", what, " (", keyOf(r), ") within ", timeout.count(), " ms");
      // When no other rank published anything, the store is the likelier cause than rank r (the
      // store's own host, reached by nobody else: tests/faults store-unreach). Say what the store saw.
      bool othersPublished = r - (rank < r ? 1 : 0) > 0;  // the ranks before r (but this one) did
      try {
        for (int q = r + 1; q < size && !othersPublished; ++q) othersPublished = q != rank && store.check({keyOf(q)});
      } catch (const Error&) {
        othersPublished = true;  // the store cannot say: keep to what is known
      }
      if (!othersPublished && size > 1) {
        const std::optional<int64_t> others = store.otherClients();
        if (others && *others == 0) {
          RF_THROW(TimeoutError, "no other rank reached ", store.describe(), " within ", timeout.count(), " ms: ",
                   missing);
        }
        if (!others) {
          RF_THROW(TimeoutError, "no other rank published its ", what, " to ", store.describe(), " within ",
                   timeout.count(), " ms (did they reach the store?): ", missing);
        }
      }
      throw TimeoutError(missing);
    } catch (const IoError& e) {
      // The store went away while this rank waited for rank r: its host (rank 0 when ranks are
      // started by hand) gave up on r a moment earlier and exited. Name r, the cause, not only
      // the closed store (tests/faults: kill-store).
      throw IoError(r, detail::concat("rank ", r, " did not publish its ", what, " (", keyOf(r),
                                      ") before the rendezvous store went away: ", e.what()));
    }
  }
  return words;
}

}  // namespace

std::vector<std::string> exchangeHostIds(rendezvous::Store& store, const std::string& prefix, int rank, int size,
                                         const std::string& myHost, std::chrono::milliseconds timeout) {
  return exchange(store, prefix, "host", "host identity", rank, size, myHost, timeout);
}

std::vector<std::string> assignBackends(const std::vector<std::string>& hostIds, int rank, const Policy& policy) {
  RF_ENFORCE(rank >= 0 && rank < static_cast<int>(hostIds.size()), "rank ", rank, " of ", hostIds.size());
  std::vector<std::string> backends(hostIds.size());
  const std::string& mine = hostIds[rank];
  for (size_t p = 0; p < hostIds.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    const bool sameHost = mine != "-" && !mine.empty() && hostIds[p] == mine;
    backends[p] = sameHost ? policy.local : policy.remote;
    RF_LOG(kDebug) << "rank " << p << " (host " << hostIds[p] << (sameHost ? ", this host" : "") << "): "
                   << backends[p];
  }
  return backends;
}

std::vector<std::string> exchangeRemoteCapabilities(rendezvous::Store& store, const std::string& prefix, int rank,
                                                    int size, const Policy& policy,
                                                    std::chrono::milliseconds timeout) {
  const std::string mine = policy.remoteUnusable.empty() ? policy.remote : "-" + policy.remoteUnusable;
  return exchange(store, prefix, "remote", "transport", rank, size, mine, timeout);
}

Policy applyFallback(std::vector<std::string>& backends, const std::vector<std::string>& capabilities, int rank,
                     const Policy& policy) {
  Policy used = policy;
  if (policy.fallback.empty()) return used;
  const bool mine = capabilities[rank] == policy.remote;
  bool logged = false;
  for (size_t p = 0; p < backends.size(); ++p) {
    if (backends[p] != policy.remote) continue;
    if (mine && capabilities[p] == policy.remote) continue;
    backends[p] = policy.fallback;
    if (!mine) {
      if (!logged) {
        RF_LOG(kWarning) << policy.remote << " cannot run here (" << policy.remoteUnusable
                         << "); peers on other hosts are joined through " << policy.fallback;
      }
      logged = true;
    } else {
      const std::string& word = capabilities[p];
      RF_LOG(kWarning) << "rank " << p << " cannot run " << policy.remote << " ("
                       << (word.size() > 1 && word[0] == '-' ? word.substr(1) : word) << "); joining it through "
                       << policy.fallback;
    }
  }
  if (!mine) used.remote = policy.fallback;
  return used;
}

}  // namespace ringfold::transport::per_peer
