#include "rendezvous/job_store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

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
  std::string bindAddr;
  pid_t pid = 0;  // the process whose thread serves it (a forked child has only a copy)
  // This process's own clients of `server` (HostedStore), so that the connections of other
  // processes can be told from its own: those alive, and the connections of those gone.
  std::vector<const TcpStore*> ownClients;
  int64_t retiredConnections = 0;
};

// A parsed numeric IPv4 or IPv6 address.
struct Ip {
  int family = AF_UNSPEC;
  unsigned char bytes[16] = {};
  bool operator==(const Ip& o) const {
    return family == o.family && std::memcmp(bytes, o.bytes, family == AF_INET ? 4 : 16) == 0;
  }
  bool loopback() const {
    static const unsigned char kV6Loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return family == AF_INET ? bytes[0] == 127 : std::memcmp(bytes, kV6Loopback, 16) == 0;
  }
  std::string text() const {
    char buf[INET6_ADDRSTRLEN] = "";
    inet_ntop(family, bytes, buf, sizeof buf);
    return buf;
  }
};

std::optional<Ip> parseIp(const std::string& s) {
  Ip ip;
  if (inet_pton(AF_INET, s.c_str(), ip.bytes) == 1) {
    ip.family = AF_INET;
    return ip;
  }
  if (inet_pton(AF_INET6, s.c_str(), ip.bytes) == 1) {
    ip.family = AF_INET6;
    return ip;
  }
  return std::nullopt;
}

std::optional<Ip> ipOf(const sockaddr* a) {
  Ip ip;
  if (a == nullptr) return std::nullopt;
  if (a->sa_family == AF_INET) {
    ip.family = AF_INET;
    std::memcpy(ip.bytes, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, 4);
    return ip;
  }
  if (a->sa_family == AF_INET6) {
    ip.family = AF_INET6;
    std::memcpy(ip.bytes, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, 16);
    return ip;
  }
  return std::nullopt;
}

bool isLocalAddress(const Ip& ip) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    auto a = ipOf(i->ifa_addr);
    found = a && *a == ip;
  }
  freeifaddrs(list);
  return found;
}

std::vector<Ip> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<Ip> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (auto ip = ipOf(ai->ai_addr)) out.push_back(*ip);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::string storeListenAddress(const BootstrapInfo& info) {
  const std::string& addr = info.storeAddr;
  if (auto ip = parseIp(addr)) {
    // Every rank dials exactly this address: a loopback one (all ranks on this host) or one of
    // this host's own can be listened on alone. Any other (a NAT or service address that
    // forwards here) leaves only every interface.
    if (ip->loopback() || isLocalAddress(*ip)) return ip->text();
    return "";
  }
  // A host name may resolve differently on other hosts (Debian maps a host's own name to
  // 127.0.1.1 on that host only), so only a job that runs on this host alone, dialling a name
  // that resolves to loopback here, is kept off the network.
  auto ips = resolve(addr);
  bool oneHost = info.localSize == info.size;
  if (!ips.empty() && oneHost &&
      std::all_of(ips.begin(), ips.end(), [](const Ip& ip) { return ip.loopback(); })) {
    for (const Ip& ip : ips) {
      if (ip.family == AF_INET) return ip.text();  // the clients try every address in turn
    }
    return ips.front().text();
  }
  return "";
}

namespace {

Hosted& hosted() {
  static Hosted* h = new Hosted;  // never destroyed: the OS closes the socket at exit, and no
  return *h;                      // static destructor can race a late shutdown's store use
}

std::shared_ptr<TcpStoreServer> hostedServer(const BootstrapInfo& info) {
  Hosted& h = hosted();
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.server && h.pid != ::getpid()) {
    // A forked child's copy of its parent's store: its thread does not exist here, so it is
    // never destroyed (that would join it), only set aside.
    static auto* abandoned = new std::vector<std::shared_ptr<TcpStoreServer>>();
    abandoned->push_back(std::move(h.server));
  }
  const std::string bindAddr = storeListenAddress(info);
  if (h.server && h.port == info.storePort && h.secret == info.secret && h.bindAddr == bindAddr) {
    return h.server;
  }
  h.server.reset();  // another port, secret or address: free the old port first
  // The hosted store's thread uses OpenSSL until it stops. exit() runs OpenSSL's own cleanup,
  // which frees the locks that thread takes: stop the store first. Handlers registered later
  // run earlier, so OpenSSL is initialised (its cleanup registered) before ours is; an option
  // bit is needed, as OPENSSL_init_crypto(0, ...) returns before doing anything.
  static const bool stopAtExit = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_ADD_ALL_DIGESTS, nullptr);
    std::atexit([] {
      Hosted& hh = hosted();
      std::lock_guard<std::mutex> lk(hh.mu);
      // Also when a communicator still holds it; never in a forked child, where its thread
      // does not exist.
      if (hh.server && hh.pid == ::getpid()) hh.server->stop();
    });
    return true;
  }();
  (void)stopAtExit;
  try {
    h.server = std::make_shared<TcpStoreServer>(bindAddr, info.storePort, info.secret);
  } catch (const Error& e) {
    RF_THROW(Error, "rank 0 cannot host the rendezvous store on port ", info.storePort, " (",
             e.what(), "); choose a free port with ", params::kStorePort.name);
  }
  h.retiredConnections = 0;  // ownClients still alive belong to the old server: not counted
  h.ownClients.clear();
  h.port = info.storePort;
  h.pid = ::getpid();
  h.secret = info.secret;
  h.bindAddr = bindAddr;
  RF_LOG(kInfo) << "hosting the rendezvous store on port " << info.storePort << " for " << info.size
                << " ranks (" << info.source << "), listening on "
                << (!bindAddr.empty() ? bindAddr
                    : parseIp(info.storeAddr)
                        ? "every interface (the ranks dial " + info.storeAddr + ", not an address of this host)"
                        : "every interface (the ranks dial the host name " + info.storeAddr + ")");
  return h.server;
}

// The hosting rank's client of its own server: a TcpStore that can also say what the server saw
// (otherClients: connections authenticated by the server that none of this process's own
// clients opened; conservative, as a connection is counted by the server a moment before its
// client counts it).
class HostedStore : public Store {
 public:
  HostedStore(std::shared_ptr<TcpStoreServer> server, std::unique_ptr<TcpStore> client, std::string where)
      : server_(std::move(server)), client_(std::move(client)), where_(std::move(where)) {
    Hosted& h = hosted();
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.server == server_) h.ownClients.push_back(client_.get());
  }
  ~HostedStore() override {
    Hosted& h = hosted();
    std::lock_guard<std::mutex> lock(h.mu);
    auto it = std::find(h.ownClients.begin(), h.ownClients.end(), client_.get());
    if (it != h.ownClients.end()) {
      h.ownClients.erase(it);
      h.retiredConnections += client_->connectionsOpened();
    }
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override { client_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return client_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return client_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return client_->check(keys); }
  int64_t deletePrefix(const std::string& prefix) override { return client_->deletePrefix(prefix); }
  std::string describe() const override {
    return "the rendezvous store at " + where_ + " (hosted by this rank)";
  }
  std::optional<int64_t> otherClients() const override {
    Hosted& h = hosted();
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.server != server_) return std::nullopt;  // replaced: its counts are not ours to read
    int64_t own = h.retiredConnections;
    for (const TcpStore* c : h.ownClients) own += c->connectionsOpened();
    return std::max<int64_t>(0, server_->authenticatedCount() - own);
  }

 private:
  std::shared_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> client_;
  std::string where_;  // the address the ranks dial
};

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
    const std::string& bound = job.server->address();
    host = bound == "0.0.0.0" ? "127.0.0.1" : bound;
  }
  RF_ENFORCE(!host.empty(), "no rendezvous store address for ", info.size, " ranks (set ",
             params::kStoreAddr.name, ")");
  try {
    auto client = std::make_unique<TcpStore>(host, info.storePort, info.secret, connectTimeout);
    if (job.server) {
      const std::string& dialled = info.storeAddr.empty() ? host : info.storeAddr;
      job.store = std::make_unique<HostedStore>(job.server, std::move(client),
                                                dialled + ":" + std::to_string(info.storePort));
    } else {
      job.store = std::move(client);
    }
  } catch (const TimeoutError& e) {
    if (info.hostStore) throw;
    // Say who should have been listening there.
    const bool external = params::kStoreServer.str() == "external";
    RF_THROW(TimeoutError, e.what(), " (",
             external ? std::string(params::kStoreServer.name) +
                            "=external: a launcher or another process must host it there; no rank does"
                      : "rank 0 hosts it: is rank 0 running, and does " +
                            std::string(params::kStoreAddr.name) + " (or the starter's equivalent) name its host?",
             ")");
  }
  return job;
}

}  // namespace ringfold::rendezvous
