// nccl_net_perf: throughput of the NCCL net plugin (libnccl-net-ringfold.so, its
// ncclNetPlugin_v12 table dlopened as NCCL does) against the ringfold transport it carries its
// connections over, driven directly (a Device from createDevice, connectAll, Connection
// isend/irecv): tcp_uring, or with --transport rdma the rdma transport (RINGFOLD_RDMA_FABRIC;
// libfabric's tcp;ofi_rxm where there is no RDMA hardware), in the
// same run, with the same traffic: one process streams messages of one size to another, at most
// `window` in flight; the receiver keeps `window` receives posted and times a run from telling
// the sender it is ready (on a tiny control message) to the last byte. Runs of the two
// backends alternate (which one goes first alternates too); the table gives each one's median
// over the runs, in GB/s (10^9 B/s), their ratio plugin / direct, and "paired": the median of
// the ratios of back-to-back runs, which cancels load that drifts over seconds (other jobs on
// the same cores).
//
//   nccl_net_perf [-b 64K] [-e 64M] [-f 4] [-r 5] [-B 256M] [-w 8] [--transport tcp|rdma]
//       forks the two processes here (loopback unless RINGFOLD_SOCKET_IFNAME says otherwise)
//   nccl_net_perf --role recv|send --dir DIR [same options]
//       one side only, for two hosts (e.g. bench/compare/netns_cluster.sh exec): DIR is a
//       directory both can read (handles and tcp_uring addresses are exchanged through files)
//
// Options: -b/-e smallest/largest message, -f factor between sizes, -r runs per size and
// backend, -B bytes per run (at least `window` messages), -w messages in flight (fewer when
// window x size would pass 128 MiB). Interfaces: RINGFOLD_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
// for both backends (default here: lo); sockets per connection: RINGFOLD_SOCKETS_PER_PEER.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/nccl_net/net_api.h"
#include "rendezvous/file_store.h"
#include "transport/connection.h"
#include "transport/device.h"
#include "transport/rdma/device.h"
#include "transport/tcp_uring/device.h"

namespace {

using namespace ringfold;
using Clock = std::chrono::steady_clock;
namespace nn = ringfold::ncclnet;

struct Options {
  size_t minBytes = 64 << 10, maxBytes = 64 << 20, factor = 4, bytesPerRun = 256 << 20;
  int runs = 5, window = 8;
  std::string role, dir;
  std::string transport = "tcp";  // what the plugin carries its connections over, and the baseline
};

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k': v *= 1024; break;
    case 'M':
    case 'm': v *= 1024 * 1024; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "nccl_net_perf: error: %s\n", what.c_str());
  std::exit(1);
}

// ---- the two backends behind one interface --------------------------------------------------

class Link {
 public:
  virtual ~Link() = default;
  virtual void* isend(void* data, size_t n, int tag) = 0;
  virtual void* irecv(void* data, size_t n, int tag) = 0;
  virtual bool test(void* request) = 0;  // true once done; dies on an error
  void wait(void* r) {
    while (!test(r)) {
    }
  }
};

// The plugin: data on one connection (send -> recv), control on another (recv -> send).
class PluginLink final : public Link {
 public:
  PluginLink(const nn::NetV12* net, void* dataComm, void* controlComm, bool sender)
      : net_(net), data_(dataComm), control_(controlComm), sender_(sender) {}
  ~PluginLink() override {
    net_->closeSend(sender_ ? data_ : control_);
    net_->closeRecv(sender_ ? control_ : data_);
  }
  void* isend(void* d, size_t n, int tag) override {
    void* comm = sender_ ? data_ : control_;
    void* req = nullptr;
    while (req == nullptr) check(net_->isend(comm, d, n, tag, nullptr, nullptr, &req), "isend");
    return req;
  }
  void* irecv(void* d, size_t n, int tag) override {
    void* comm = sender_ ? control_ : data_;
    void* req = nullptr;
    size_t sizes[1] = {n};
    int tags[1] = {tag};
    void* data[1] = {d};
    while (req == nullptr) check(net_->irecv(comm, 1, data, sizes, tags, nullptr, nullptr, &req), "irecv");
    return req;
  }
  bool test(void* r) override {
    int done = 0;
    check(net_->test(r, &done, nullptr), "test");
    return done != 0;
  }

 private:
  static void check(nn::Result r, const char* what) {
    if (r != nn::kSuccess) die(std::string("plugin ") + what + " failed: " + std::to_string(r));
  }
  const nn::NetV12* net_;
  void* data_;
  void* control_;
  bool sender_;
};

// The transport directly: one Connection, both directions.
class DirectLink final : public Link {
 public:
  DirectLink(std::unique_ptr<transport::Device> device, std::unique_ptr<transport::Connection> conn)
      : device_(std::move(device)), conn_(std::move(conn)) {}
  void* isend(void* d, size_t n, int tag) override {
    auto region = device_->registerMemory(d, n);
    auto req = conn_->isend(*region, 0, n, static_cast<uint64_t>(tag), 0);
    return keep(std::move(region), std::move(req));
  }
  void* irecv(void* d, size_t n, int tag) override {
    auto region = device_->registerMemory(d, n);
    auto req = conn_->irecv(*region, 0, n, static_cast<uint64_t>(tag), 0);
    return keep(std::move(region), std::move(req));
  }
  bool test(void* r) override {
    auto* p = static_cast<Pending*>(r);
    if (!p->request->test()) return false;
    delete p;
    return true;
  }

 private:
  struct Pending {
    std::unique_ptr<transport::MemoryRegion> region;
    std::unique_ptr<transport::Request> request;
  };
  void* keep(std::unique_ptr<transport::MemoryRegion> region, std::unique_ptr<transport::Request> req) {
    return new Pending{std::move(region), std::move(req)};
  }
  std::unique_ptr<transport::Device> device_;
  std::unique_ptr<transport::Connection> conn_;
};

// ---- set-up -----------------------------------------------------------------------------------

const nn::NetV12* loadPlugin() {
  void* lib = dlopen(NCCL_NET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) die(std::string("dlopen: ") + dlerror());
  auto* net = static_cast<const nn::NetV12*>(dlsym(lib, "ncclNetPlugin_v12"));
  if (net == nullptr) die("no ncclNetPlugin_v12");
  return net;
}

std::vector<uint8_t> bytesOf(const void* p, size_t n) {
  auto* c = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(c, c + n);
}

std::unique_ptr<Link> connectPlugin(const nn::NetV12* net, rendezvous::Store& store, bool sender) {
  void* ctx = nullptr;
  nn::CommConfig config{nn::kTrafficClassUndefined};
  if (net->init(&ctx, 1, &config, nullptr, nullptr) != nn::kSuccess) die("plugin init failed");
  // Each side listens for the connection it receives on and publishes the handle.
  char mine[nn::kHandleMaxSize] = {};
  void* listenComm = nullptr;
  if (net->listen(ctx, 0, mine, &listenComm) != nn::kSuccess) die("plugin listen failed");
  store.set(sender ? "plugin/control" : "plugin/data", bytesOf(mine, sizeof(mine)));
  std::vector<uint8_t> theirs = store.get(sender ? "plugin/data" : "plugin/control", std::chrono::seconds(60));
  char handle[nn::kHandleMaxSize];
  std::memcpy(handle, theirs.data(), sizeof(handle));
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (sendComm == nullptr || recvComm == nullptr) {
    if (sendComm == nullptr && net->connect(ctx, 0, handle, &sendComm, nullptr) != nn::kSuccess) die("connect");
    if (recvComm == nullptr && net->accept(listenComm, &recvComm, nullptr) != nn::kSuccess) die("accept");
    if (Clock::now() > end) die("plugin connection not made within 60 s");
  }
  net->closeListen(listenComm);
  return std::make_unique<PluginLink>(net, sender ? sendComm : recvComm, sender ? recvComm : sendComm, sender);
}

std::unique_ptr<Link> connectDirect(rendezvous::Store& store, bool sender, const std::string& transport) {
  std::unique_ptr<transport::Device> device =
      transport == "rdma" ? transport::rdma::createDevice({}) : transport::tcp_uring::createDevice({});
  transport::ConnectSpec spec;
  spec.store = &store;
  spec.prefix = "direct";
  spec.rank = sender ? 1 : 0;
  spec.size = 2;
  auto conns = device->connectAll(spec);
  auto conn = std::move(conns[sender ? 0 : 1]);
  return std::make_unique<DirectLink>(std::move(device), std::move(conn));
}

// ---- the measurement -----------------------------------------------------------------------

constexpr int kDataTag = 7, kControlTag = 9;

int windowFor(const Options& o, size_t size) {
  size_t w = std::min<size_t>(static_cast<size_t>(o.window), std::max<size_t>(1, (128u << 20) / size));
  return static_cast<int>(std::max<size_t>(w, 1));
}

size_t messagesFor(const Options& o, size_t size) {
  return std::max<size_t>(static_cast<size_t>(windowFor(o, size)), o.bytesPerRun / size);
}

// One run; the receiver returns seconds, the sender 0.
double runOnce(Link& link, bool sender, size_t size, size_t count, int window, std::vector<std::vector<char>>& bufs) {
  char token = 0;
  if (sender) {
    link.wait(link.irecv(&token, 1, kControlTag));
    std::vector<void*> slots(static_cast<size_t>(window), nullptr);
    for (size_t m = 0; m < count; ++m) {
      size_t s = m % static_cast<size_t>(window);
      if (slots[s]) link.wait(slots[s]);
      slots[s] = link.isend(bufs[s].data(), size, kDataTag);
    }
    for (void* r : slots) {
      if (r) link.wait(r);
    }
    return 0;
  }
  std::vector<void*> slots(static_cast<size_t>(window), nullptr);
  size_t posted = 0;
  for (; posted < count && posted < static_cast<size_t>(window); ++posted) {
    slots[posted] = link.irecv(bufs[posted].data(), size, kDataTag);
  }
  const auto start = Clock::now();
  void* ready = link.isend(&token, 1, kControlTag);
  for (size_t m = 0; m < count; ++m) {
    size_t s = m % static_cast<size_t>(window);
    link.wait(slots[s]);
    slots[s] = nullptr;
    if (posted < count) {
      slots[s] = link.irecv(bufs[s].data(), size, kDataTag);
      ++posted;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  link.wait(ready);
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int role(const Options& o, bool sender) {
  rendezvous::FileStore store(o.dir);
  setenv("RINGFOLD_NCCL_NET_TRANSPORT", o.transport.c_str(), 1);
  const nn::NetV12* net = loadPlugin();
  std::unique_ptr<Link> plugin = connectPlugin(net, store, sender);
  std::unique_ptr<Link> direct = connectDirect(store, sender, o.transport);
  const char* directName = o.transport == "rdma" ? "rdma" : "tcp_uring";
  std::vector<std::vector<char>> bufs(static_cast<size_t>(o.window));
  for (auto& b : bufs) b.assign(o.maxBytes, sender ? 's' : 'r');
  if (!sender) {
    std::printf("# nccl_net_perf: NCCL net plugin (ncclNetPlugin_v12 of %s) over %s vs a %s Connection\n",
                NCCL_NET_PLUGIN_PATH, directName, directName);
    const char* ifname = std::getenv("RINGFOLD_SOCKET_IFNAME");
    const char* sockets = std::getenv("RINGFOLD_SOCKETS_PER_PEER");
    std::printf(
        "# interface %s, sockets per connection %s, %d runs per size and backend (median), "
        "up to %d messages in flight, %zu MiB per run\n",
        ifname ? ifname : "(default)", sockets ? sockets : "auto", o.runs, o.window, o.bytesPerRun >> 20);
    std::printf("#%12s %8s %10s %14s %14s %8s %8s\n", "size(B)", "window", "messages", "plugin(GB/s)",
                (std::string(directName) + "(GB/s)").c_str(), "ratio", "paired");
  }
  for (size_t size = o.minBytes; size <= o.maxBytes; size *= o.factor) {
    const int window = windowFor(o, size);
    const size_t count = messagesFor(o, size);
    std::vector<double> p, t, ratio;
    runOnce(*plugin, sender, size, count, window, bufs);  // warm-up
    runOnce(*direct, sender, size, count, window, bufs);
    for (int r = 0; r < o.runs; ++r) {
      // Alternate which backend goes first, so neither always follows the other's idle time.
      double a = 0, b = 0;
      if (r % 2 == 0) {
        a = runOnce(*plugin, sender, size, count, window, bufs);
        b = runOnce(*direct, sender, size, count, window, bufs);
      } else {
        b = runOnce(*direct, sender, size, count, window, bufs);
        a = runOnce(*plugin, sender, size, count, window, bufs);
      }
      p.push_back(static_cast<double>(size * count) / a / 1e9);
      t.push_back(static_cast<double>(size * count) / b / 1e9);
      ratio.push_back(b / a);  // plugin throughput / the direct transport's, of two back-to-back runs
    }
    if (!sender) {
      const double mp = median(p), mt = median(t);
      std::printf(" %12zu %8d %10zu %14.3f %14.3f %8.3f %8.3f\n", size, window, count, mp, mt, mp / mt, median(ratio));
      std::fflush(stdout);
    }
    if (o.factor < 2) break;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "-b") o.minBytes = parseSize(next());
    else if (a == "-e") o.maxBytes = parseSize(next());
    else if (a == "-f") o.factor = parseSize(next());
    else if (a == "-r") o.runs = std::atoi(next());
    else if (a == "-B") o.bytesPerRun = parseSize(next());
    else if (a == "-w") o.window = std::atoi(next());
    else if (a == "--role") o.role = next();
    else if (a == "--dir") o.dir = next();
    else if (a == "--transport") o.transport = next();
    else die("unknown option " + a + " (see the comment at the top of nccl_net_perf.cc)");
  }
  if (o.minBytes == 0 || o.maxBytes < o.minBytes || o.runs < 1 || o.window < 1) die("bad sizes, runs or window");
  if (o.transport != "tcp" && o.transport != "rdma") die("--transport " + o.transport + ": tcp or rdma");
  try {
    if (!o.role.empty()) {
      if (o.dir.empty() || (o.role != "recv" && o.role != "send")) die("--role recv|send needs --dir");
      return role(o, o.role == "send");
    }
    setenv("RINGFOLD_SOCKET_IFNAME", "lo", 0);
    setenv("FI_TCP_IFACE", "lo", 0);  // libfabric's tcp provider, under --transport rdma
    char tmpl[] = "/tmp/nccl_net_perf.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) die("mkdtemp failed");
    o.dir = tmpl;
    std::fflush(nullptr);
    pid_t kids[2];
    for (int k = 0; k < 2; ++k) {
      kids[k] = fork();
      if (kids[k] == 0) {
        int rc = 1;
        try {
          rc = role(o, k == 1);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "nccl_net_perf (%s): error: %s\n", k ? "send" : "recv", e.what());
        }
        std::fflush(nullptr);
        _exit(rc);
      }
    }
    int failed = 0;
    for (pid_t pid : kids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    }
    std::string cleanup = std::string("rm -rf ") + tmpl;
    if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
    return failed;
  } catch (const std::exception& e) {
    die(e.what());
  }
}
