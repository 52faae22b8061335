#include "rendezvous/job_store.h"

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/hash_store.h"

#include <mutex>
#include <string>

namespace ringfold::rendezvous {

namespace {

// The store this process hosts, kept for the process's lifetime (see job_store.h).
struct Hosted {
  std::mutex mu;
  std::shared_ptr<TcpStoreServer> server;
  int port = 0;
  std::string secret;
};

Hosted& hosted() {
  static Hosted* h = new Hosted;  // never destroyed: the OS closes the socket at exit, and no
  return *h;                      // static destructor can race a late shutdown's store use
}

std::shared_ptr<TcpStoreServer> hostedServer(const BootstrapInfo& info) {
  Hosted& h = hosted();
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.server && h.port == info.storePort && h.secret == info.secret) return h.server;
  h.server.reset();  // another port or secret: free the old port first
  try {
    h.server = std::make_shared<TcpStoreServer>("", info.storePort, info.secret);
  } catch (const Error& e) {
    RF_THROW(Error, "rank 0 cannot host the rendezvous store on port ", info.storePort, " (",
             e.what(), "); choose a free port with ", params::kStorePort.name);
  }
  h.port = info.storePort;
  h.secret = info.secret;
  RF_LOG(kInfo) << "hosting the rendezvous store on port " << info.storePort << " for "
                << info.size << " ranks (" << info.source << ")";
  return h.server;
}

}  // namespace

JobStore openJobStore(const BootstrapInfo& info) {
  return openJobStore(info, params::kStartTimeout.asSeconds());
}

JobStore openJobStore(const BootstrapInfo& info, std::chrono::milliseconds connectTimeout) {
  JobStore job;
  if (info.size <= 1) {
    job.store = std::make_unique<HashStore>();
    return job;
  }
  RF_ENFORCE(info.storePort > 0, "no rendezvous store port for ", info.size, " ranks (set ",
             params::kStorePort.name, ")");
  RF_ENFORCE(!info.secret.empty(), "no rendezvous store secret (set ", params::kSecret.name, ")");
  std::string host = info.storeAddr;
  if (info.hostStore) {
    job.server = hostedServer(info);
    host = "127.0.0.1";
  }
  RF_ENFORCE(!host.empty(), "no rendezvous store address for ", info.size, " ranks (set ",
             params::kStoreAddr.name, ")");
  job.store = std::make_unique<TcpStore>(host, info.storePort, info.secret, connectTimeout);
  return job;
}

}  // namespace ringfold::rendezvous
