// The NCCL net plugin's implementation (plugin.h).
#include "bindings/nccl_net/plugin.h"

#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "bindings/nccl_net/handshake.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/connection.h"
#include "transport/rdma/fabric.h"
#include "transport/rdma/pair.h"
#include "transport/tcp_uring/device.h"
#include "transport/tcp_uring/interfaces.h"
#include "transport/tcp_uring/pair.h"

namespace ringfold::ncclnet {

namespace tcp = transport::tcp_uring;
namespace rdma = transport::rdma;

namespace {

constexpr uint32_t kListenMagic = 0x524e4c31;  // live objects carry a magic, so a stray pointer
constexpr uint32_t kCommMagic = 0x524e4331;    // from NCCL (or a test) is refused, not followed
constexpr uint32_t kRequestMagic = 0x524e5231;
constexpr uint32_t kMemMagic = 0x524e4d31;
constexpr uint32_t kDeadMagic = 0xdeadbeef;
constexpr uint32_t kStageMagic = 0x524e5331;

std::atomic<Logger> gLogger{nullptr};
std::mutex gInitMutex;                  // init
std::atomic<bool> gInitialized{false};  // set last in init, after gDevices
std::vector<DeviceInfo> gDevices;

// An rdma connection being set up: its socket (start-up and heartbeat) and its link.
struct RdmaStart {
  Socket socket;
  std::unique_ptr<rdma::PairLink> link;  // declared after the socket: destroyed before it closes
  RdmaStart(Socket s, int rank)
      : socket(std::move(s)), link(std::make_unique<rdma::PairLink>(socket.fd(), rank, params::kTimeout.asSeconds())) {}
};

struct ListenComm {
  uint32_t magic = kListenMagic;
  int dev = 0;
  Carrier carrier;
  Listener listener;
  std::unique_ptr<RdmaStart> starting;  // accept() of an rdma connection, until its link is up
  ListenComm(int d, const DeviceInfo& info)
      : dev(d), carrier(info.carrier), listener(info.address, info.sockets, params::kTimeout.asSeconds(), info.carrier) {}
};

struct Comm;

// One buffer of a request: the transport's request and where it keeps the message's length.
struct Part {
  std::unique_ptr<transport::Request> req;
  const size_t* length = nullptr;
};

struct Request {
  uint32_t magic = kRequestMagic;
  Comm* comm = nullptr;
  bool inUse = false;
  bool flush = false;
  int n = 0;
  Part parts[kMaxRecvs];
};

struct Comm {
  uint32_t magic = kCommMagic;
  bool isSend = false;
  std::unique_ptr<tcp::PairLink> link;  // tcp, or
  std::unique_ptr<RdmaStart> rdma;      // rdma (its link is up)
  std::vector<std::unique_ptr<Request>> all;  // every request this comm made, reused
  std::vector<Request*> free;

  Part send(void* data, size_t size, uint64_t tag) {
    return rdma ? part(rdma->link->isend(data, size, tag)) : part(link->isend(data, size, tag));
  }
  Part receive(void* data, size_t size, uint64_t tag) {
    return rdma ? part(rdma->link->irecv(data, size, tag)) : part(link->irecv(data, size, tag));
  }
  template <class R>
  static Part part(std::unique_ptr<R> r) {
    const size_t* length = &r->state().length;
    return {std::move(r), length};
  }

  Request* take() {
    Request* r;
    if (free.empty()) {
      all.push_back(std::make_unique<Request>());
      r = all.back().get();
      r->comm = this;
    } else {
      r = free.back();
      free.pop_back();
    }
    r->inUse = true;
    r->flush = false;
    r->n = 0;
    return r;
  }
  void give(Request* r) {
    for (int i = 0; i < r->n; ++i) r->parts[i] = Part{};
    r->inUse = false;
    r->n = 0;
    free.push_back(r);
  }
  ~Comm() {
    // Requests first: a pending one poisons and settles the link, so no kernel op still
    // touches NCCL's buffers once close returns.
    for (auto& r : all) {
      for (auto& p : r->parts) p = Part{};
      r->magic = kDeadMagic;
    }
    link.reset();
    rdma.reset();
    magic = kDeadMagic;
  }
};

// A comm over a connection that is up, on one of the two carriers.
Comm* newComm(bool isSend, std::unique_ptr<tcp::PairLink> link, std::unique_ptr<RdmaStart> rdma) {
  auto comm = std::make_unique<Comm>();
  comm->isSend = isSend;
  comm->link = std::move(link);
  comm->rdma = std::move(rdma);
  return comm.release();
}

struct MemHandle {
  uint32_t magic = kMemMagic;
  int type = kPtrHost;
  void* data = nullptr;
  size_t size = 0;
};

// The connect in progress, in NCCL's handle buffer after our Handle (NCCL passes the same
// buffer to every connect() call for one connection).
struct Stage {
  uint32_t magic;
  uint32_t reserved;
  Connector* connector;  // until the sockets are in, then
  RdmaStart* rdma;       // an rdma connection until its link is up (null: tcp)
};
constexpr size_t kStageOffset = 64;
static_assert(kStageOffset >= sizeof(Handle) && kStageOffset + sizeof(Stage) <= kHandleMaxSize);

void log(LogLevel level, const std::string& text) {
  if (Logger l = gLogger.load()) l(level, kLogSubsysNet, "ringfold-net", 0, "%s", text.c_str());
}

// Logs through NCCL's logger, or ringfold's when NCCL gave none.
Result fail(Result code, const std::string& text) {
  if (gLogger.load() != nullptr) {
    log(kLogWarn, "NET/ringfold: " + text);
  } else {
    RF_LOG(kWarning) << "NCCL net plugin: " << text;
  }
  return code;
}

// Runs `f`; turns an exception into a result code with its text (plugin.h, Errors).
template <class F>
Result guard(const char* what, F&& f) {
  try {
    return f();
  } catch (const transport::CheckMismatch& e) {
    return fail(kInvalidUsage, detail::concat(what, ": ", e.what()));
  } catch (const IoError& e) {
    return fail(kRemoteError, detail::concat(what, ": ", e.what()));
  } catch (const InvalidArgument& e) {
    return fail(kInternalError, detail::concat(what, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    return fail(kSystemError, detail::concat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return fail(kSystemError, detail::concat(what, ": ", e.what()));
  }
}

int readSpeed(const std::string& ifname) {
  std::ifstream in("/sys/class/net/" + ifname + "/speed");
  int speed = 0;
  if (in >> speed && speed > 0) return speed;
  return 0;
}

std::string pciPathOf(const std::string& ifname) {
  char resolved[PATH_MAX];
  std::string link = "/sys/class/net/" + ifname + "/device";
  if (realpath(link.c_str(), resolved) == nullptr) return "";
  return resolved;
}

// What carries the connections (RINGFOLD_NCCL_NET_TRANSPORT); `note` says why auto chose tcp.
Carrier chooseCarrier(std::string& note) {
  const std::string want = params::kNcclNetTransport.str();
  RF_ENFORCE(want == "auto" || want == "tcp" || want == "rdma", params::kNcclNetTransport.name, "='", want,
             "' is not a transport; use auto, tcp or rdma");
  if (want == "tcp") return Carrier::kTcp;
  std::string why;
  if (want == "auto" && rdma::hardwareFabric(why).empty()) {
    note = "no RDMA hardware (" + why + ")";
    return Carrier::kTcp;
  }
  if (!rdma::fabricUsable(params::kRdmaFabric.str(), why)) {
    if (want == "auto") {
      note = "RDMA hardware, but " + params::kRdmaFabric.str() + " cannot use it (" + why + ")";
      return Carrier::kTcp;
    }
    RF_THROW(Error, params::kNcclNetTransport.name, "=rdma, but no RDMA fabric is usable here (",
             params::kRdmaFabric.name, "=", params::kRdmaFabric.str(), "): ", why);
  }
  return Carrier::kRdma;
}

// Which interface the plugin uses (plugin.h; docs/nccl_net.md): RINGFOLD_SOCKET_IFNAME or
// NCCL_SOCKET_IFNAME when set (NCCL syntax), else the first non-loopback interface that is up
// and not docker*, else loopback.
DeviceInfo chooseDevice() {
  const std::vector<tcp::Interface> interfaces = tcp::listInterfaces();
  const std::string spec = params::kSocketIfname.str();
  const tcp::Interface* chosen = nullptr;
  if (!spec.empty()) {
    const std::string address = tcp::chooseListenAddress(spec, 0, interfaces);  // throws when none matches
    for (const auto& i : interfaces) {
      if (i.up && tcp::ifnameSelected(spec, i.name)) {
        chosen = &i;
        break;
      }
    }
    RF_ENFORCE(chosen != nullptr, "no interface for ", address);
  } else {
    for (const auto& i : interfaces) {
      if (i.up && !i.loopback && i.name.rfind("docker", 0) != 0) {
        chosen = &i;
        break;
      }
    }
    if (chosen == nullptr) {
      for (const auto& i : interfaces) {
        if (i.up && i.loopback) {
          chosen = &i;
          break;
        }
      }
    }
    RF_ENFORCE(chosen != nullptr, "no IPv4 interface is up");
  }
  DeviceInfo d;
  d.name = chosen->name;
  char text[32];
  const uint32_t a = chosen->address;
  std::snprintf(text, sizeof(text), "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
  d.address = text;
  d.pciPath = pciPathOf(d.name);
  const int64_t speed = params::kNcclNetSpeed.asInt();
  d.speedMbps = speed > 0 ? static_cast<int>(speed) : readSpeed(d.name);
  if (d.speedMbps <= 0) d.speedMbps = 10000;
  d.sockets = params::kSocketsPerPeer.str() == "auto" ? tcp::autoSocketsPerPeer(d.address)
                                                      : static_cast<int>(params::kSocketsPerPeer.asInt());
  RF_ENFORCE(d.sockets >= 1 && d.sockets <= kMaxSockets, params::kSocketsPerPeer.name, "=", d.sockets,
             " must be auto or between 1 and ", kMaxSockets);
  d.carrier = chooseCarrier(d.carrierNote);
  if (d.carrier == Carrier::kRdma) d.sockets = 1;  // start-up and heartbeat only
  return d;
}

Comm* asComm(void* p, const char* what) {
  auto* c = static_cast<Comm*>(p);
  RF_ENFORCE(c != nullptr && c->magic == kCommMagic, what, ": not a live comm of this plugin");
  return c;
}

void needInit() { RF_ENFORCE(gInitialized, "the plugin was not initialized (init)"); }

const DeviceInfo& device(int dev) {
  needInit();
  RF_ENFORCE(dev >= 0 && dev < static_cast<int>(gDevices.size()), "no device ", dev, " (", gDevices.size(),
             " devices)");
  return gDevices[static_cast<size_t>(dev)];
}

}  // namespace

Result init(Logger logger) {
  if (logger != nullptr) gLogger.store(logger);
  return guard("init", [&] {
    std::lock_guard<std::mutex> lock(gInitMutex);
    if (gInitialized) return kSuccess;
    // NCCL sets a connection up on one thread and drives it from another: a ring that only its
    // first thread may drive (SINGLE_ISSUER) would fail there.
    if (params::kUringSetup.str() == "defer") {
      return fail(kInvalidUsage, detail::concat("init: ", params::kUringSetup.name,
                                                "=defer cannot be used by the NCCL net plugin (NCCL drives a "
                                                "connection from more than one thread); use auto, coop or plain"));
    }
    DeviceInfo d = chooseDevice();
    if (d.carrier == Carrier::kTcp) {
      // Fails here, not later, when io_uring is unusable (old kernel, sysctl, seccomp): NCCL then
      // falls back to its own transports.
      tcp::createDevice(tcp::Options{});
      log(kLogInfo, detail::concat("NET/ringfold: using ", d.name, " (", d.address, "), ", d.sockets,
                                   " TCP socket(s) per connection over io_uring, ", d.speedMbps, " Mbit/s",
                                   d.carrierNote.empty() ? "" : "; not rdma: ", d.carrierNote));
    } else {
      log(kLogInfo, detail::concat("NET/ringfold: using rdma (", params::kRdmaFabric.name, "=",
                                   params::kRdmaFabric.str(), "), connections set up over ", d.name, " (",
                                   d.address, "), ", d.speedMbps, " Mbit/s"));
    }
    gDevices = {d};
    gInitialized = true;
    return kSuccess;
  });
}

Result devices(int* count) {
  return guard("devices", [&] {
    needInit();
    RF_ENFORCE(count != nullptr, "null count");
    *count = static_cast<int>(gDevices.size());
    return kSuccess;
  });
}

Result deviceInfo(int dev, const DeviceInfo** info) {
  return guard("getProperties", [&] {
    *info = &device(dev);
    return kSuccess;
  });
}

Result listen(int dev, void* handle, void** listenComm) {
  return guard("listen", [&] {
    RF_ENFORCE(handle != nullptr && listenComm != nullptr, "null handle or listenComm");
    const DeviceInfo& d = device(dev);
    auto l = std::make_unique<ListenComm>(dev, d);
    std::memset(handle, 0, kHandleMaxSize);
    std::memcpy(handle, &l->listener.handle(), sizeof(Handle));
    *listenComm = l.release();
    return kSuccess;
  });
}

Result connect(int dev, void* handle, void** sendComm) {
  return guard("connect", [&] {
    RF_ENFORCE(handle != nullptr && sendComm != nullptr, "null handle or sendComm");
    *sendComm = nullptr;
    device(dev);
    auto* stage = reinterpret_cast<Stage*>(static_cast<char*>(handle) + kStageOffset);
    Handle h;
    std::memcpy(&h, handle, sizeof(h));
    if (stage->magic != kStageMagic) {
      auto c = std::make_unique<Connector>(h, params::kTimeout.asSeconds());  // throws on a bad handle
      stage->connector = c.release();
      stage->rdma = nullptr;
      stage->magic = kStageMagic;
    }
    if (stage->rdma == nullptr) {
      Connector* connector = stage->connector;
      std::optional<std::vector<Socket>> sockets;
      try {
        sockets = connector->poll();
      } catch (...) {
        stage->magic = 0;
        delete connector;
        throw;
      }
      if (!sockets) return kSuccess;  // NCCL calls again
      delete connector;
      stage->connector = nullptr;
      if (h.carrier == static_cast<uint16_t>(Carrier::kTcp)) {
        stage->magic = 0;
        *sendComm = newComm(true, std::make_unique<tcp::PairLink>(std::move(*sockets), 1), nullptr);
        return kSuccess;
      }
      try {
        stage->rdma = new RdmaStart(std::move((*sockets)[0]), 1);
      } catch (...) {
        stage->magic = 0;
        throw;
      }
    }
    bool up = false;
    try {
      up = stage->rdma->link->poll();
    } catch (...) {
      stage->magic = 0;
      delete stage->rdma;
      throw;
    }
    if (!up) return kSuccess;  // NCCL calls again
    stage->magic = 0;
    *sendComm = newComm(true, nullptr, std::unique_ptr<RdmaStart>(stage->rdma));
    return kSuccess;
  });
}

Result accept(void* listenComm, void** recvComm) {
  return guard("accept", [&] {
    auto* l = static_cast<ListenComm*>(listenComm);
    RF_ENFORCE(l != nullptr && l->magic == kListenMagic, "accept: not a live listen comm of this plugin");
    RF_ENFORCE(recvComm != nullptr, "null recvComm");
    *recvComm = nullptr;
    if (!l->starting) {
      std::optional<std::vector<Socket>> sockets = l->listener.poll();
      if (!sockets) return kSuccess;  // NCCL calls again
      if (l->carrier == Carrier::kTcp) {
        *recvComm = newComm(false, std::make_unique<tcp::PairLink>(std::move(*sockets), 0), nullptr);
        return kSuccess;
      }
      l->starting = std::make_unique<RdmaStart>(std::move((*sockets)[0]), 0);
    }
    bool up = false;
    try {
      up = l->starting->link->poll();
    } catch (...) {
      l->starting.reset();
      throw;
    }
    if (!up) return kSuccess;  // NCCL calls again
    *recvComm = newComm(false, nullptr, std::move(l->starting));
    return kSuccess;
  });
}

Result regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return guard("regMr", [&] {
    asComm(comm, "regMr");
    RF_ENFORCE(mhandle != nullptr, "null mhandle");
    if (type != kPtrHost) {
      return fail(kInternalError, detail::concat("regMr: memory type ", type,
                                                 " is not supported: this plugin reports ptrSupport NCCL_PTR_HOST "
                                                 "(host memory only)"));
    }
    auto* m = new MemHandle;
    m->type = type;
    m->data = data;
    m->size = size;
    *mhandle = m;
    return kSuccess;
  });
}

Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  if (mhandle != nullptr) *mhandle = nullptr;
  return fail(kInternalError,
              "regMrDmaBuf: dma-buf registration is not supported (ptrSupport is NCCL_PTR_HOST: host memory only)");
}

Result deregMr(void* comm, void* mhandle) {
  return guard("deregMr", [&] {
    auto* m = static_cast<MemHandle*>(mhandle);
    RF_ENFORCE(m != nullptr && m->magic == kMemMagic, "deregMr: not a live memory handle of this plugin");
    m->magic = kDeadMagic;
    delete m;
    return kSuccess;
  });
}

Result isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return guard("isend", [&] {
    Comm* c = asComm(sendComm, "isend");
    RF_ENFORCE(c->isSend, "isend on a receive comm");
    RF_ENFORCE(request != nullptr, "null request");
    *request = nullptr;
    Request* r = c->take();
    try {
      r->parts[0] = c->send(data, size, static_cast<uint64_t>(static_cast<uint32_t>(tag)));
      r->n = 1;
    } catch (...) {
      c->give(r);
      throw;
    }
    *request = r;
    return kSuccess;
  });
}

Result irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
             void** request) {
  return guard("irecv", [&] {
    Comm* c = asComm(recvComm, "irecv");
    RF_ENFORCE(!c->isSend, "irecv on a send comm");
    RF_ENFORCE(request != nullptr, "null request");
    RF_ENFORCE(n >= 1 && n <= kMaxRecvs, "irecv of ", n, " buffers (maxRecvs is ", kMaxRecvs, ")");
    RF_ENFORCE(data != nullptr && sizes != nullptr && tags != nullptr, "null data, sizes or tags");
    *request = nullptr;
    Request* r = c->take();
    try {
      for (int i = 0; i < n; ++i) {
        r->parts[i] = c->receive(data[i], sizes[i], static_cast<uint64_t>(static_cast<uint32_t>(tags[i])));
        r->n = i + 1;
      }
    } catch (...) {
      c->give(r);
      throw;
    }
    *request = r;
    return kSuccess;
  });
}

Result iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guard("iflush", [&] {
    Comm* c = asComm(recvComm, "iflush");
    RF_ENFORCE(request != nullptr, "null request");
    Request* r = c->take();
    r->flush = true;  // host memory: nothing to flush
    *request = r;
    return kSuccess;
  });
}

Result test(void* request, int* done, int* sizes) {
  return guard("test", [&] {
    auto* r = static_cast<Request*>(request);
    RF_ENFORCE(r != nullptr && r->magic == kRequestMagic && r->inUse, "test: not a pending request of this plugin");
    RF_ENFORCE(done != nullptr, "null done");
    *done = 0;
    Comm* c = r->comm;
    if (!r->flush) {
      if (c->rdma) c->rdma->link->heartbeat();  // the parts' test() drives progress
      for (int i = 0; i < r->n; ++i) {
        if (!r->parts[i].req->test()) {
          // Keep the other parts' sockets moving too: one progress round covers them all.
          return kSuccess;
        }
      }
      if (sizes != nullptr) {
        for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<int>(*r->parts[i].length);
      }
    }
    *done = 1;
    c->give(r);
    return kSuccess;
  });
}

Result closeSend(void* sendComm) {
  return guard("closeSend", [&] {
    delete asComm(sendComm, "closeSend");
    return kSuccess;
  });
}

Result closeRecv(void* recvComm) {
  return guard("closeRecv", [&] {
    delete asComm(recvComm, "closeRecv");
    return kSuccess;
  });
}

Result closeListen(void* listenComm) {
  return guard("closeListen", [&] {
    auto* l = static_cast<ListenComm*>(listenComm);
    RF_ENFORCE(l != nullptr && l->magic == kListenMagic, "closeListen: not a live listen comm of this plugin");
    l->magic = kDeadMagic;
    delete l;
    return kSuccess;
  });
}

}  // namespace ringfold::ncclnet
