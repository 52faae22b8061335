#include "rendezvous/job_store.h"

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/hash_store.h"

namespace ringfold::rendezvous {

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
    try {
      job.server = std::make_unique<TcpStoreServer>("", info.storePort, info.secret);
    } catch (const Error& e) {
      RF_THROW(Error, "rank 0 cannot host the rendezvous store on port ", info.storePort, " (",
               e.what(), "); choose a free port with ", params::kStorePort.name);
    }
    RF_LOG(kInfo) << "hosting the rendezvous store on port " << info.storePort << " for "
                  << info.size << " ranks (" << info.source << ")";
    host = "127.0.0.1";
  }
  RF_ENFORCE(!host.empty(), "no rendezvous store address for ", info.size, " ranks (set ",
             params::kStoreAddr.name, ")");
  job.store = std::make_unique<TcpStore>(host, info.storePort, info.secret, connectTimeout);
  return job;
}

}  // namespace ringfold::rendezvous
