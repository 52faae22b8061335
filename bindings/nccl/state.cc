// The NCCL-API library's state (state.h): unique ids, errors, communicator init and abort.
#include "bindings/nccl/state.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>
#include <new>
#include <system_error>

#include "bindings/nccl/device.h"
#include "collectives/allreduce_model.h"
#include "collectives/barrier.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"
#include "transport/device.h"
#if RF_NCCL_HAVE_URING
#include "transport/tcp_uring/interfaces.h"
#endif

namespace ringfold::nccl {

namespace {

constexpr char kMagic[8] = {'r', 'f', 'n', 'c', 'c', 'l', '0', '1'};
constexpr size_t kPortOffset = 8;     // u32, little-endian
constexpr size_t kSecretOffset = 12;  // 32 raw bytes
constexpr size_t kSecretBytes = 32;
constexpr size_t kHostOffset = kSecretOffset + kSecretBytes;  // NUL-terminated text
static_assert(kHostOffset + 64 <= NCCL_UNIQUE_ID_BYTES, "the unique id holds magic, port, secret and host");

// Store servers started by ncclGetUniqueId: alive until the process exits (a communicator may
// split long after the id was made), as NCCL's bootstrap root is.
std::mutex gServersMutex;
std::vector<std::shared_ptr<rendezvous::TcpStoreServer>>* gServers = nullptr;

// The address the store listens on and advertises (RINGFOLD_NCCL_STORE_ADDR's rules).
std::string storeAddress() {
  if (params::kNcclStoreAddr.isSet()) return params::kNcclStoreAddr.str();
#if RF_NCCL_HAVE_URING
  if (params::kSocketIfname.isSet()) return transport::tcp_uring::listenAddressFor("");
  for (const auto& itf : transport::tcp_uring::listInterfaces()) {
    if (itf.up && !itf.loopback && itf.address != 0) {
      in_addr a{htonl(itf.address)};
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &a, text, sizeof text);
      return text;
    }
  }
#else
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    std::string found;
    for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
    freeifaddrs(list);
    if (!found.empty()) return found;
  }
#endif
  return "127.0.0.1";
}

char gLastError[1024] = {0};
std::mutex gLastErrorMutex;

}  // namespace

void makeUniqueId(ncclUniqueId* id) {
  const std::string host = storeAddress();
  if (host.size() >= NCCL_UNIQUE_ID_BYTES - kHostOffset) {
    RF_THROW(InvalidArgument, params::kNcclStoreAddr.name, "=", host, " is too long for ncclUniqueId");
  }
  const std::string secretHex = rendezvous::generateSecret();  // 64 hex digits
  const std::string secret = rendezvous::fromHex(secretHex);
  RF_ENFORCE_EQ(secret.size(), kSecretBytes, "generateSecret's length");
  auto server = std::make_shared<rendezvous::TcpStoreServer>(host, 0, secretHex);
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kMagic, sizeof kMagic);
  const uint32_t port = static_cast<uint32_t>(server->port());
  for (int b = 0; b < 4; ++b) id->internal[kPortOffset + b] = static_cast<char>((port >> (8 * b)) & 0xff);
  std::memcpy(id->internal + kSecretOffset, secret.data(), kSecretBytes);
  std::memcpy(id->internal + kHostOffset, host.data(), host.size());
  std::lock_guard<std::mutex> lock(gServersMutex);
  if (!gServers) gServers = new std::vector<std::shared_ptr<rendezvous::TcpStoreServer>>();  // never freed: lives to exit
  gServers->push_back(std::move(server));
}

IdFields parseUniqueId(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0) {
    RF_THROW(InvalidArgument,
             "the ncclUniqueId was not made by ringfold's ncclGetUniqueId (no 'rfnccl01' magic): every rank must "
             "use the same ringfold libnccl.so.2");
  }
  IdFields f;
  uint32_t port = 0;
  for (int b = 0; b < 4; ++b) port |= uint32_t(static_cast<unsigned char>(id.internal[kPortOffset + b])) << (8 * b);
  f.port = static_cast<int>(port);
  f.secret = rendezvous::toHex(reinterpret_cast<const uint8_t*>(id.internal + kSecretOffset), kSecretBytes);
  const char* host = id.internal + kHostOffset;
  f.host.assign(host, strnlen(host, NCCL_UNIQUE_ID_BYTES - kHostOffset));
  if (f.host.empty() || f.port <= 0 || f.port > 65535) RF_THROW(InvalidArgument, "malformed ncclUniqueId");
  return f;
}

void unsupported(const std::string& what) { throw NcclError(ncclInvalidUsage, what); }

ncclResult_t codeOf(std::exception_ptr error, std::string& text) {
  try {
    std::rethrow_exception(error);
  } catch (const NcclError& e) {
    text = e.message;
    return e.code;
  } catch (const IoError& e) {
    text = e.what();
    return ncclRemoteError;
  } catch (const TimeoutError& e) {
    text = e.what();
    return ncclRemoteError;
  } catch (const InvalidArgument& e) {
    text = e.what();
    return ncclInvalidArgument;
  } catch (const MismatchError& e) {
    text = e.what();
    return ncclInvalidUsage;
  } catch (const std::bad_alloc&) {
    text = "out of host memory";
    return ncclSystemError;
  } catch (const std::system_error& e) {
    text = e.what();
    return ncclSystemError;
  } catch (const std::exception& e) {
    text = e.what();
    return ncclInternalError;
  } catch (...) {
    text = "unknown error";
    return ncclInternalError;
  }
}

void setGlobalLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(gLastErrorMutex);
  std::snprintf(gLastError, sizeof gLastError, "%s", text.c_str());
}

const char* globalLastError() { return gLastError; }

void NcclComm::setLastError(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(errorMutex);
    std::snprintf(lastError, sizeof lastError, "%s", text.c_str());
  }
  setGlobalLastError(text);
}

void NcclComm::joinInit() {
  std::lock_guard<std::mutex> lock(initJoinMutex);
  if (initThread.joinable() && initThread.get_id() != std::this_thread::get_id()) initThread.join();
}

Communicator& NcclComm::ready(bool wait) {
  if (wait) joinInit();  // init never takes opMutex
  const int state = asyncError.load();
  if (state == ncclInProgress) {
    throw NcclError(ncclInvalidUsage, "the communicator's non-blocking init has not finished (poll ncclCommGetAsyncError until ncclSuccess)");
  }
  if (!comm) {
    std::lock_guard<std::mutex> lock(errorMutex);
    throw NcclError(state == ncclSuccess ? ncclInvalidUsage : static_cast<ncclResult_t>(state),
                    std::string("the communicator's init failed: ") + lastError);
  }
  return *comm;
}

ncclResult_t NcclComm::recordFailure(std::exception_ptr error) {
  std::string text;
  const ncclResult_t code = codeOf(error, text);
  int expected = ncclSuccess;
  // Argument errors of one call leave the communicator usable (as in NCCL); anything that
  // reached the transport poisons it.
  const bool poisoned = comm && comm->failed();
  if (poisoned || code == ncclRemoteError || code == ncclSystemError || code == ncclInternalError) {
    asyncError.compare_exchange_strong(expected, code);
  }
  setLastError(text);
  return code;
}

namespace {

void runInit(NcclComm* c, InitSpec spec) {
  try {
    std::unique_ptr<Communicator> comm;
    std::shared_ptr<rendezvous::Store> store;
    std::string prefix;
    if (spec.parent) {
      comm = spec.parent->comm->split(spec.ranks, spec.splitName);
      store = spec.parent->store;
      prefix = spec.parent->storePrefix + "/split/" + spec.splitName;
      // Once every member is connected (the barrier), nobody reads the keys the new
      // communicator met under: its rank 0 deletes them, so that a job that splits again and
      // again does not grow the store.
      barrier(*comm);
      if (comm->rank() == 0) comm->deleteStoreKeys();
    } else {
      store = std::make_shared<rendezvous::TcpStore>(spec.id.host, spec.id.port, spec.id.secret,
                                                     params::kStartTimeout.asSeconds());
      prefix = "nccl";
      transport::DeviceConfig config;
      config.storeAddress = spec.id.host;
      // As Communicator::fromEnvironment chooses: a backend per peer for the socket and RDMA
      // transports (the default), the one RINGFOLD_TRANSPORT names otherwise.
      const std::string transportName =
          c->nranks == 1 && !params::kTransport.isSet() ? "loopback" : params::kTransport.str();
      if (transportName == "tcp_uring" || transportName == "tcp" || transportName == "rdma") {
        comm = Communicator::connectPerPeer(*store, c->rank, c->nranks, config, prefix);
      } else {
        comm = Communicator::connect(*store, c->rank, c->nranks, transport::createDevice(transportName, config), prefix);
      }
      comm->setStore(store, prefix);
      comm->keepAlive(store);
      if (comm->size() > 1) comm->setModel(coll::calibrate(*comm));
    }
    c->comm = std::move(comm);
    c->store = std::move(store);
    c->storePrefix = std::move(prefix);
    installAbortHook(c);
    c->asyncError.store(ncclSuccess);
  } catch (...) {
    std::string text;
    ncclResult_t code = codeOf(std::current_exception(), text);
    if (code == ncclInvalidArgument) code = ncclInvalidUsage;
    c->setLastError("init of rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) + " failed: " + text);
    c->asyncError.store(code);
  }
}

}  // namespace

void startInit(NcclComm* comm, InitSpec spec) {
  comm->asyncError.store(ncclInProgress);
  comm->initThread = std::thread(runInit, comm, std::move(spec));
}

void installAbortHook(NcclComm* c) {
  c->comm->watchAbortRequests();
  if (c->abortRequested.load()) requestStop(c, abortText(c));  // Abort came during init
}

std::string abortText(const NcclComm* c) { return "ncclCommAbort was called on rank " + std::to_string(c->rank); }

void requestStop(NcclComm* c, const std::string& why) {
  c->abortRequested.store(true);
  // Its waits (and those of the groups it splits into for a hierarchical allreduce) fail within
  // ~1 ms: Communicator::requestAbort is safe from any thread.
  if (c->comm) c->comm->requestAbort(why);
}

void stopComm(NcclComm* c, const std::string& why) {
  c->abortRequested.store(true);
  c->joinInit();  // connect is bounded by RINGFOLD_START_TIMEOUT
  requestStop(c, why);
  std::lock_guard<std::mutex> lock(c->opMutex);  // a running call bails out within ~1 ms
  if (c->comm) c->comm->abort(transport::ErrorKind::kIo, why);
}

void abortComm(NcclComm* c) {
  stopComm(c, abortText(c));
  {
    std::lock_guard<std::mutex> lock(c->opMutex);
    forgetGpuStaging(c);
  }
  delete static_cast<ncclComm*>(c);
}

}  // namespace ringfold::nccl
