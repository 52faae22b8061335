// The NCCL net plugin driven as NCCL drives it, without NCCL or a GPU: this executable does not
// link ringfold; it dlopens libnccl-net-ringfold.so, takes each ncclNetPlugin_vN table and calls
// it with host buffers between two forked processes (harness.h). Every wait has a deadline.
//
//   NcclNetTables.*           symbols, name, properties per version, null extensions
//   NcclNetData/<version>.*   listen/connect/accept retry loop; many concurrent isends and
//                             grouped irecvs with tags and sizes (0 bytes, receive larger than
//                             the message: test reports the real size); regMr/deregMr; iflush;
//                             closes
//   NcclNetThreads.*          4 connections each driven by its own thread, 2 sockets each,
//                             receives preset to NCCL_NET_OPTIONAL_RECV_COMPLETION
//   NcclNetFaults.*           killed sender, killed receiver, frozen receiver (the sender
//                             times out), wrong secret, garbage handle,
//                             nobody listening, accept timeout, message larger than its receive,
//                             misuse (bad request/comm, CUDA and dma-buf memory, too many recvs)
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "harness.h"

using namespace ncclnet_test;
using namespace std::chrono_literals;

namespace {

constexpr auto kRoleDeadline = 60s;

// What carries the connections of the roles forked next: "tcp" or "rdma" (RINGFOLD_NCCL_NET_
// TRANSPORT; rdma over libfabric's tcp;ofi_rxm on loopback, the RDMA protocol without RDMA
// hardware).
const char* gCarrier = "tcp";

// Why the rdma carrier cannot run here ("" when it can): it needs libfabric.
std::string rdmaMissing() {
  void* lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "libfabric.so.1 is not installed (the rdma carrier runs over libfabric's tcp;ofi_rxm here)";
  dlclose(lib);
  return "";
}

// Sets the carrier of the roles forked next, or skips the test when it cannot run here.
#define USE_CARRIER(name)                                               \
  do {                                                                  \
    gCarrier = (name);                                                  \
    if (std::string(gCarrier) == "rdma") {                              \
      if (std::string why = rdmaMissing(); !why.empty()) GTEST_SKIP() << why; \
    }                                                                   \
  } while (0)

// Every child starts from here: loopback, the carrier, and the plugin initialized in this process.
std::string initIn(const Api& api, const char* socketsPerPeer = "1") {
  setenv("RINGFOLD_SOCKET_IFNAME", "lo", 1);
  setenv("RINGFOLD_SOCKETS_PER_PEER", socketsPerPeer, 1);
  setenv("RINGFOLD_NCCL_NET_TRANSPORT", gCarrier, 1);
  if (std::string(gCarrier) == "rdma") {
    setenv("RINGFOLD_RDMA_FABRIC", "ofi", 1);
    setenv("RINGFOLD_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("FI_TCP_IFACE", "lo", 1);
  }
  if (api.name == nullptr) return "table missing";
  Result r = api.init();
  if (r != kSuccess) return fmt("init returned %d", r);
  return "";
}

std::string listenAndSend(const Api& api, const Pipe& toSender, void** listenComm) {
  char handle[kHandleMaxSize] = {};
  Result r = api.listen(0, handle, listenComm);
  if (r != kSuccess || *listenComm == nullptr) return fmt("listen returned %d", r);
  if (!toSender.send(handle, sizeof(handle))) return "could not pass the handle";
  return "";
}

// accept() until a comm comes back (NCCL's loop), within `timeout`.
std::string acceptLoop(const Api& api, void* listenComm, void** recvComm, std::chrono::milliseconds timeout = 20s) {
  const auto end = Clock::now() + timeout;
  *recvComm = nullptr;
  int calls = 0;
  while (*recvComm == nullptr) {
    Result r = api.accept(listenComm, recvComm);
    ++calls;
    if (r != kSuccess) return fmt("accept returned %d after %d calls", r, calls);
    if (Clock::now() > end) return "accept never completed";
  }
  return "";
}

std::string connectLoop(const Api& api, char* handle, void** sendComm, Result* result = nullptr,
                        std::chrono::milliseconds timeout = 20s) {
  const auto end = Clock::now() + timeout;
  *sendComm = nullptr;
  while (*sendComm == nullptr) {
    Result r = api.connect(0, handle, sendComm);
    if (result) *result = r;
    if (r != kSuccess) return fmt("connect returned %d", r);
    if (Clock::now() > end) return "connect never completed";
  }
  return "";
}

// test() until done or an error, within `timeout`; the result code, or -1 on timeout.
int testLoop(const Api& api, void* request, int* sizes, std::chrono::milliseconds timeout = 30s) {
  const auto end = Clock::now() + timeout;
  for (;;) {
    int done = 0;
    Result r = api.test(request, &done, sizes);
    if (r != kSuccess) return r;
    if (done) return kSuccess;
    if (Clock::now() > end) return -1;
  }
}

uint8_t pattern(int message, size_t i) { return static_cast<uint8_t>(message * 131 + i * 7 + 3); }

// ---- tables ---------------------------------------------------------------------------------

TEST(NcclNetTables, EveryVersionIsExportedAndNothingElse) {
  ASSERT_NE(pluginLibrary(), nullptr) << dlerror();
  for (int v = 8; v <= 12; ++v) {
    Api api = loadApi(v);
    ASSERT_NE(api.name, nullptr) << "ncclNetPlugin_v" << v << " missing";
    EXPECT_STREQ(api.name, "ringfold");
    EXPECT_TRUE(api.nullExtensions) << "v" << v << ": device-offload / vNIC entries should be null";
  }
  EXPECT_EQ(dlsym(pluginLibrary(), "ncclNetPlugin_v7"), nullptr);
  EXPECT_EQ(dlsym(pluginLibrary(), "ncclNetPlugin_v13"), nullptr);
  // Only the five tables are exported (exports.map): nm lists the dynamic symbols.
  std::string cmd = std::string("nm -D --defined-only ") + NCCL_NET_PLUGIN_PATH + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) GTEST_SKIP() << "no nm";
  std::vector<std::string> names;
  char line[1024];
  while (std::fgets(line, sizeof(line), p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    auto sp = s.rfind(' ');
    std::string type = sp != std::string::npos && sp >= 1 ? s.substr(sp - 1, 1) : "";
    std::string name = sp == std::string::npos ? s : s.substr(sp + 1);
    if (type == "A") continue;  // version-node symbols
    names.push_back(name);
  }
  int rc = pclose(p);
  if (names.empty() && rc != 0) GTEST_SKIP() << "nm failed";
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ncclNetPlugin_v10", "ncclNetPlugin_v11", "ncclNetPlugin_v12",
                                             "ncclNetPlugin_v8", "ncclNetPlugin_v9"}));
}

TEST(NcclNetTables, PropertiesPerVersion) {
  std::vector<std::function<std::string()>> roles;
  roles.push_back([] {
    for (int v = 8; v <= 12; ++v) {
      Api api = loadApi(v);
      if (auto e = initIn(api); !e.empty()) return e;
      int n = 0;
      if (api.devices(&n) != kSuccess || n != 1) return fmt("v%d: devices gave %d", v, n);
      Props p;
      if (api.properties(0, &p) != kSuccess) return fmt("v%d: getProperties failed", v);
      if (p.name != "lo") return fmt("v%d: device name '%s', expected lo", v, p.name.c_str());
      if (p.hasPciPath) return fmt("v%d: loopback has no PCI path", v);
      if (p.ptrSupport != kPtrHost) return fmt("v%d: ptrSupport %d", v, p.ptrSupport);
      if (p.regIsGlobal != 0 || p.guid != 0) return fmt("v%d: regIsGlobal/guid", v);
      if (p.speed != 10000) return fmt("v%d: speed %d", v, p.speed);
      if (p.maxRecvs != 8 || p.maxComms != 65536) return fmt("v%d: maxRecvs %d maxComms %d", v, p.maxRecvs, p.maxComms);
      if (p.deviceType != kDeviceHost || p.deviceVersion != 0) return fmt("v%d: device type", v);
      if (v >= 9 && (p.maxP2pBytes != (size_t{1} << 30) || p.vDevices != 1)) return fmt("v%d: maxP2pBytes/vProps", v);
      if (v >= 11 && p.maxMultiRequestSize != 1) return fmt("v%d: maxMultiRequestSize", v);
      if (v == 12 && (p.railId != -1 || p.planeId != -1)) return fmt("v12: rail/plane id");
      if (api.properties(1, &p) == kSuccess) return fmt("v%d: device 1 should not exist", v);
      if (api.finalize && api.finalize() != kSuccess) return fmt("v%d: finalize", v);
    }
    // The speed setting wins over the interface's.
    return std::string();
  });
  roles.push_back([] {
    setenv("RINGFOLD_NCCL_NET_SPEED_MBPS", "25000", 1);
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    Props p;
    if (api.properties(0, &p) != kSuccess || p.speed != 25000) return fmt("speed %d, expected 25000", p.speed);
    return std::string();
  });
  roles.push_back([] {
    setenv("RINGFOLD_URING_SETUP", "defer", 1);  // single-issuer rings: NCCL uses several threads
    Api api = loadApi(12);
    if (initIn(api).empty()) return std::string("init succeeded with RINGFOLD_URING_SETUP=defer");
    return std::string();
  });
  roles.push_back([] {
    setenv("NCCL_SOCKET_IFNAME", "=no-such-interface", 1);
    unsetenv("RINGFOLD_SOCKET_IFNAME");
    Api api = loadApi(12);
    if (api.init() == kSuccess) return std::string("init succeeded with an interface that does not exist");
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], "") << "role " << i;
}

// ---- data ------------------------------------------------------------------------------------

struct DataCase {
  int version;
  const char* sockets;
  const char* carrier = "tcp";
};

class NcclNetData : public ::testing::TestWithParam<DataCase> {};

// The sizes of the messages, per round of 4 grouped messages; receives are larger by `slack`.
const std::vector<size_t> kSizes = {0, 1, 100, 4096, 65536, 1 << 20, 3 * (1 << 20) + 17, 7};
constexpr size_t kSlack = 1000;
constexpr int kGroup = 4;
constexpr int kRounds = 6;

TEST_P(NcclNetData, ConcurrentTaggedTraffic) {
  const DataCase c = GetParam();
  USE_CARRIER(c.carrier);
  Pipe handlePipe, donePipe;
  std::vector<std::function<std::string()>> roles;
  // Receiver: every round is one grouped irecv of kGroup buffers (tags 0..3) posted up front, so
  // up to kRounds grouped receives are pending at once; buffers are kSlack bytes larger.
  roles.push_back([&] {
    Api api = loadApi(c.version);
    if (auto e = initIn(api, c.sockets); !e.empty()) return e;
    void* listenComm = nullptr;
    if (auto e = listenAndSend(api, handlePipe, &listenComm); !e.empty()) return e;
    void* recvComm = nullptr;
    if (auto e = acceptLoop(api, listenComm, &recvComm); !e.empty()) return e;
    std::vector<std::vector<uint8_t>> bufs(kRounds * kGroup);
    std::vector<void*> mh(bufs.size());
    std::vector<void*> reqs(kRounds);
    for (int round = 0; round < kRounds; ++round) {
      void* data[kGroup];
      size_t sizes[kGroup];
      int tags[kGroup];
      void* mhandles[kGroup];
      for (int g = 0; g < kGroup; ++g) {
        int m = round * kGroup + g;
        size_t want = kSizes[static_cast<size_t>(m) % kSizes.size()];
        bufs[m].assign(want + kSlack, 0xee);
        if (api.regMr(recvComm, bufs[m].data(), bufs[m].size(), kPtrHost, &mh[m]) != kSuccess) return fmt("regMr");
        data[g] = bufs[m].data();
        sizes[g] = bufs[m].size();
        tags[g] = g;
        mhandles[g] = mh[m];
      }
      Result r = api.irecv(recvComm, kGroup, data, sizes, tags, mhandles, &reqs[round]);
      if (r != kSuccess || reqs[round] == nullptr) return fmt("irecv round %d returned %d", round, r);
    }
    for (int round = 0; round < kRounds; ++round) {
      int sizes[kGroup] = {-1, -1, -1, -1};
      int r = testLoop(api, reqs[round], sizes);
      if (r != kSuccess) return fmt("test of round %d gave %d", round, r);
      for (int g = 0; g < kGroup; ++g) {
        int m = round * kGroup + g;
        size_t want = kSizes[static_cast<size_t>(m) % kSizes.size()];
        if (sizes[g] != static_cast<int>(want)) return fmt("message %d: size %d, expected %zu", m, sizes[g], want);
        for (size_t i = 0; i < want; ++i) {
          if (bufs[m][i] != pattern(m, i)) return fmt("message %d: byte %zu wrong", m, i);
        }
        if (bufs[m][want] != 0xee) return fmt("message %d: wrote past its size", m);
      }
      // iflush: host memory, complete at once.
      void* fl = nullptr;
      void* data[1] = {bufs[round * kGroup].data()};
      int fsz[1] = {1};
      void* fmh[1] = {mh[round * kGroup]};
      if (api.iflush(recvComm, 1, data, fsz, fmh, &fl) != kSuccess || fl == nullptr) return fmt("iflush");
      if (testLoop(api, fl, nullptr) != kSuccess) return fmt("test of iflush");
    }
    for (void* m : mh) {
      if (api.deregMr(recvComm, m) != kSuccess) return fmt("deregMr");
    }
    char byte = 1;
    donePipe.send(&byte, 1);  // the sender may close now
    if (api.closeRecv(recvComm) != kSuccess || api.closeListen(listenComm) != kSuccess) return fmt("close");
    if (api.finalize && api.finalize() != kSuccess) return fmt("finalize");
    return std::string();
  });
  // Sender: all messages posted before testing any, in tag order within each round (the tags of
  // a round are sent 3, 2, 1, 0 to check that the tag, not the order, picks the buffer).
  roles.push_back([&] {
    Api api = loadApi(c.version);
    if (auto e = initIn(api, c.sockets); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    void* sendComm = nullptr;
    if (auto e = connectLoop(api, handle, &sendComm); !e.empty()) return e;
    const int total = kRounds * kGroup;
    std::vector<std::vector<uint8_t>> bufs(total);
    std::vector<void*> mh(total), reqs(total);
    for (int round = 0; round < kRounds; ++round) {
      for (int g = kGroup - 1; g >= 0; --g) {
        int m = round * kGroup + g;
        size_t n = kSizes[static_cast<size_t>(m) % kSizes.size()];
        bufs[m].resize(n);
        for (size_t i = 0; i < n; ++i) bufs[m][i] = pattern(m, i);
        if (api.regMr(sendComm, bufs[m].data(), n, kPtrHost, &mh[m]) != kSuccess) return fmt("regMr");
        Result r = api.isend(sendComm, bufs[m].data(), n, g, mh[m], &reqs[m]);
        if (r != kSuccess || reqs[m] == nullptr) return fmt("isend %d returned %d", m, r);
      }
    }
    for (int m = 0; m < total; ++m) {
      int size = -1;
      int r = testLoop(api, reqs[m], &size);
      if (r != kSuccess) return fmt("test of send %d gave %d", m, r);
      if (size != static_cast<int>(bufs[m].size())) return fmt("send %d: size %d", m, size);
      if (api.deregMr(sendComm, mh[m]) != kSuccess) return fmt("deregMr");
    }
    char byte;
    if (!donePipe.recv(&byte, 1)) return std::string("receiver never finished");
    if (api.closeSend(sendComm) != kSuccess) return fmt("closeSend");
    if (api.finalize && api.finalize() != kSuccess) return fmt("finalize");
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "") << "receiver";
  EXPECT_EQ(out[1], "") << "sender";
}

INSTANTIATE_TEST_SUITE_P(Versions, NcclNetData,
                         ::testing::Values(DataCase{8, "1"}, DataCase{9, "1"}, DataCase{10, "1"}, DataCase{11, "1"},
                                           DataCase{12, "1"}, DataCase{12, "3"}, DataCase{8, "1", "rdma"},
                                           DataCase{12, "1", "rdma"}),
                         [](const auto& info) {
                           return fmt("v%d_sockets%s%s", info.param.version, info.param.sockets,
                                      std::string(info.param.carrier) == "rdma" ? "_rdma" : "");
                         });

// Several connections at once, each driven by its own thread (NCCL's proxy threads drive
// different comms concurrently), with *request preset to NCCL_NET_OPTIONAL_RECV_COMPLETION as
// NCCL does for LL/LL128 receives: the plugin still returns a real request to test.
void connectionsOnTheirOwnThreads() {
  constexpr int kConns = 4, kMessages = 64;
  constexpr size_t kBytes = 300000;
  Pipe handlePipe, donePipe;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api, "2"); !e.empty()) return e;
    void* listens[kConns];
    void* comms[kConns];
    for (int c = 0; c < kConns; ++c) {
      if (auto e = listenAndSend(api, handlePipe, &listens[c]); !e.empty()) return e;
    }
    for (int c = 0; c < kConns; ++c) {
      if (auto e = acceptLoop(api, listens[c], &comms[c]); !e.empty()) return e;
    }
    std::vector<std::string> errors(kConns);
    std::vector<std::thread> threads;
    for (int c = 0; c < kConns; ++c) {
      threads.emplace_back([&, c] {
        std::vector<uint8_t> buf(kBytes);
        for (int m = 0; m < kMessages; ++m) {
          void* data[1] = {buf.data()};
          size_t sizes[1] = {buf.size()};
          int tags[1] = {c};
          void* req = reinterpret_cast<void*>(kOptionalRecvCompletion);
          if (api.irecv(comms[c], 1, data, sizes, tags, nullptr, &req) != kSuccess ||
              req == reinterpret_cast<void*>(kOptionalRecvCompletion) || req == nullptr) {
            errors[c] = "irecv";
            return;
          }
          int size = 0;
          if (testLoop(api, req, &size) != kSuccess || size != static_cast<int>(kBytes - m)) {
            errors[c] = fmt("conn %d message %d: size %d", c, m, size);
            return;
          }
          for (size_t i = 0; i < kBytes - m; i += 4093) {
            if (buf[i] != pattern(c * 1000 + m, i)) {
              errors[c] = fmt("conn %d message %d: byte %zu", c, m, i);
              return;
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    char b = 1;
    donePipe.send(&b, 1);
    for (int c = 0; c < kConns; ++c) {
      if (!errors[c].empty()) return errors[c];
      api.closeRecv(comms[c]);
      api.closeListen(listens[c]);
    }
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api, "2"); !e.empty()) return e;
    void* comms[kConns];
    for (int c = 0; c < kConns; ++c) {
      char handle[kHandleMaxSize];
      if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
      if (auto e = connectLoop(api, handle, &comms[c]); !e.empty()) return e;
    }
    std::vector<std::string> errors(kConns);
    std::vector<std::thread> threads;
    for (int c = 0; c < kConns; ++c) {
      threads.emplace_back([&, c] {
        std::vector<std::vector<uint8_t>> bufs(kMessages);
        std::vector<void*> reqs(kMessages);
        for (int m = 0; m < kMessages; ++m) {
          bufs[m].resize(kBytes - m);
          for (size_t i = 0; i < bufs[m].size(); ++i) bufs[m][i] = pattern(c * 1000 + m, i);
          if (api.isend(comms[c], bufs[m].data(), bufs[m].size(), c, nullptr, &reqs[m]) != kSuccess) {
            errors[c] = "isend";
            return;
          }
        }
        for (int m = 0; m < kMessages; ++m) {
          if (testLoop(api, reqs[m], nullptr) != kSuccess) {
            errors[c] = fmt("conn %d: test of send %d", c, m);
            return;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    char b;
    donePipe.recv(&b, 1);
    for (int c = 0; c < kConns; ++c) {
      if (!errors[c].empty()) return errors[c];
      api.closeSend(comms[c]);
    }
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "") << "receiver";
  EXPECT_EQ(out[1], "") << "sender";
}

TEST(NcclNetThreads, ConnectionsOnTheirOwnThreads) {
  USE_CARRIER("tcp");
  connectionsOnTheirOwnThreads();
}

TEST(NcclNetThreads, ConnectionsOnTheirOwnThreadsRdma) {
  USE_CARRIER("rdma");
  connectionsOnTheirOwnThreads();
}

// ---- faults ----------------------------------------------------------------------------------

// A receiver waiting on a sender that is killed gets an error, well within the deadline.
void killedSenderFailsTheReceiver() {
  Pipe handlePipe, ready;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    void* rc = nullptr;
    if (auto e = listenAndSend(api, handlePipe, &l); !e.empty()) return e;
    if (auto e = acceptLoop(api, l, &rc); !e.empty()) return e;
    std::vector<char> buf(1 << 20);
    void* data[1] = {buf.data()};
    size_t sizes[1] = {buf.size()};
    int tags[1] = {0};
    void* req = nullptr;
    if (api.irecv(rc, 1, data, sizes, tags, nullptr, &req) != kSuccess) return fmt("irecv");
    char b = 1;
    ready.send(&b, 1);
    int r = testLoop(api, req, nullptr, 20s);
    if (r == -1) return fmt("no error within 20 s of the sender's death");
    if (r != kRemoteError && r != kSystemError) return fmt("test gave %d", r);
    api.closeRecv(rc);
    api.closeListen(l);
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    void* sc = nullptr;
    if (auto e = connectLoop(api, handle, &sc); !e.empty()) return e;
    // Half a message, then death.
    std::vector<char> buf(1 << 20, 'x');
    char b;
    ready.recv(&b, 1);
    raise(SIGKILL);
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "") << "receiver";
  EXPECT_EQ(out[1], "killed by signal 9");
}

TEST(NcclNetFaults, KilledSenderFailsTheReceiver) {
  USE_CARRIER("tcp");
  killedSenderFailsTheReceiver();
}

// Over rdma the socket kept from the handshake is the heartbeat: the kernel closes it when the
// sender dies, and the pending receive fails.
TEST(NcclNetFaults, KilledSenderFailsTheReceiverRdma) {
  USE_CARRIER("rdma");
  killedSenderFailsTheReceiver();
}

// A sender streaming to a receiver that is killed gets an error.
void killedReceiverFailsTheSender() {
  Pipe handlePipe, ready;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(10);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    void* rc = nullptr;
    if (auto e = listenAndSend(api, handlePipe, &l); !e.empty()) return e;
    if (auto e = acceptLoop(api, l, &rc); !e.empty()) return e;
    char b;
    ready.recv(&b, 1);
    raise(SIGKILL);
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(10);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    void* sc = nullptr;
    if (auto e = connectLoop(api, handle, &sc); !e.empty()) return e;
    char b = 1;
    ready.send(&b, 1);
    // Keep sending 4 MiB messages (never received) until one fails: the socket buffers fill,
    // then the dead peer's reset surfaces.
    std::vector<char> buf(4 << 20, 'y');
    const auto end = Clock::now() + 20s;
    while (Clock::now() < end) {
      void* req = nullptr;
      Result r = api.isend(sc, buf.data(), buf.size(), 0, nullptr, &req);
      if (r != kSuccess) return r == kRemoteError || r == kSystemError ? std::string() : fmt("isend gave %d", r);
      int t = testLoop(api, req, nullptr, 20s);
      if (t == kRemoteError || t == kSystemError) return std::string();
      if (t != kSuccess) return fmt("test gave %d", t);
    }
    return std::string("no error within 20 s of the receiver's death");
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "killed by signal 9");
  EXPECT_EQ(out[1], "") << "sender";
}

TEST(NcclNetFaults, KilledReceiverFailsTheSender) {
  USE_CARRIER("tcp");
  killedReceiverFailsTheSender();
}

// Over rdma a message that no receive answers waits for its clear-to-send until the heartbeat
// finds the receiver gone.
TEST(NcclNetFaults, KilledReceiverFailsTheSenderRdma) {
  USE_CARRIER("rdma");
  killedReceiverFailsTheSender();
}

// A receiver that freezes (SIGSTOP) while the sender streams: once its socket buffers are full,
// nothing the sender writes is acknowledged, and the kernel gives up after TCP_USER_TIMEOUT
// (RINGFOLD_TIMEOUT, 2 s here): the sender's test fails instead of waiting forever.
TEST(NcclNetFaults, FrozenReceiverTimesTheSenderOut) {
  Pipe handlePipe, ready;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    void* rc = nullptr;
    if (auto e = listenAndSend(api, handlePipe, &l); !e.empty()) return e;
    if (auto e = acceptLoop(api, l, &rc); !e.empty()) return e;
    pid_t self = getpid();
    ready.send(&self, sizeof(self));
    raise(SIGSTOP);  // the sender SIGKILLs it once it has its error (else the deadline does)
    return std::string();
  });
  roles.push_back([&] {
    setenv("RINGFOLD_TIMEOUT", "2", 1);
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    void* sc = nullptr;
    if (auto e = connectLoop(api, handle, &sc); !e.empty()) return e;
    pid_t frozen = 0;
    if (!ready.recv(&frozen, sizeof(frozen))) return std::string("receiver not ready");
    std::vector<char> buf(4 << 20, 'z');
    const auto start = Clock::now();
    std::string result = "no error within 25 s of the receiver freezing";
    while (Clock::now() - start < 25s) {
      void* req = nullptr;
      Result r = api.isend(sc, buf.data(), buf.size(), 0, nullptr, &req);
      int t = r != kSuccess ? r : testLoop(api, req, nullptr, 25s);
      if (t == kRemoteError || t == kSystemError) {
        result = Clock::now() - start < 1500ms ? "failed before the timeout" : "";
        break;
      }
      if (t != kSuccess) {
        result = fmt("isend/test gave %d", t);
        break;
      }
    }
    kill(frozen, SIGKILL);
    return result;
  });
  auto out = runProcesses(roles, 40s);
  EXPECT_EQ(out[0], "killed by signal 9") << "receiver";
  EXPECT_EQ(out[1], "") << "sender";
}

// A handle with the right address but the wrong secret is refused (the sender gets an error),
// the listener carries on, and the real sender then connects.
TEST(NcclNetFaults, WrongSecretIsRefusedAndTheListenerCarriesOn) {
  Pipe handlePipe, handlePipe2, done;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    char handle[kHandleMaxSize] = {};
    if (api.listen(0, handle, &l) != kSuccess) return fmt("listen");
    handlePipe.send(handle, sizeof(handle));
    handlePipe2.send(handle, sizeof(handle));
    void* rc = nullptr;
    if (auto e = acceptLoop(api, l, &rc); !e.empty()) return e;
    std::vector<char> buf(64);
    void* data[1] = {buf.data()};
    size_t sizes[1] = {buf.size()};
    int tags[1] = {5};
    void* req = nullptr;
    if (api.irecv(rc, 1, data, sizes, tags, nullptr, &req) != kSuccess) return fmt("irecv");
    int size = 0;
    if (testLoop(api, req, &size) != kSuccess || size != 5 || std::string(buf.data(), 5) != "hello") {
      return fmt("wrong message (size %d)", size);
    }
    char b;
    done.recv(&b, 1);
    api.closeRecv(rc);
    api.closeListen(l);
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    handle[20] ^= 0x5a;  // inside the secret (bytes 16..47)
    void* sc = nullptr;
    Result r = kSuccess;
    std::string e = connectLoop(api, handle, &sc, &r);
    if (e.empty()) return std::string("connected with a wrong secret");
    if (r == kSuccess) return e;  // timed out: not refused
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe2.recv(handle, sizeof(handle))) return std::string("no handle");
    std::this_thread::sleep_for(300ms);  // let the impostor go first
    void* sc = nullptr;
    if (auto e = connectLoop(api, handle, &sc); !e.empty()) return e;
    char msg[] = "hello";
    void* req = nullptr;
    if (api.isend(sc, msg, 5, 5, nullptr, &req) != kSuccess) return fmt("isend");
    if (testLoop(api, req, nullptr) != kSuccess) return fmt("test");
    char b = 1;
    done.send(&b, 1);
    api.closeSend(sc);
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "") << "listener";
  EXPECT_EQ(out[1], "") << "impostor";
  EXPECT_EQ(out[2], "") << "sender";
}

// One process: handles and objects that are not the plugin's are refused, never followed.
TEST(NcclNetFaults, BadHandlesAndMisuseFailCleanly) {
  std::vector<std::function<std::string()>> roles;
  roles.push_back([] {
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    void* sc = nullptr;
    char garbage[kHandleMaxSize];
    std::memset(garbage, 0x33, sizeof(garbage));
    if (api.connect(0, garbage, &sc) == kSuccess || sc != nullptr) return std::string("garbage handle accepted");
    // A well-formed handle to a port nobody listens on: refused at once, or soon.
    void* l = nullptr;
    char handle[kHandleMaxSize] = {};
    if (api.listen(0, handle, &l) != kSuccess) return fmt("listen");
    if (api.closeListen(l) != kSuccess) return fmt("closeListen");
    Result r = kSuccess;
    std::string e = connectLoop(api, handle, &sc, &r, 10s);
    if (e.empty()) return std::string("connected to a closed listener");
    if (r == kSuccess) return "no error: " + e;
    if (api.connect(1, handle, &sc) == kSuccess) return std::string("device 1 accepted");
    // Objects that are not the plugin's.
    uint64_t zeros[16] = {};
    int done = 0;
    if (api.test(zeros, &done, nullptr) != kInternalError) return std::string("test of a stranger");
    if (api.test(nullptr, &done, nullptr) != kInternalError) return std::string("test of null");
    void* req = nullptr;
    if (api.isend(zeros, zeros, 8, 0, nullptr, &req) != kInternalError) return std::string("isend on a stranger");
    if (api.closeSend(zeros) != kInternalError || api.closeRecv(nullptr) != kInternalError) {
      return std::string("close of a stranger");
    }
    if (api.deregMr(zeros, zeros) != kInternalError) return std::string("deregMr of a stranger");
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "");
}

// Misuse on a live connection: CUDA and dma-buf memory, too many grouped receives, isend on a
// receive comm, and a message larger than its receive (kInvalidUsage on the receiver).
TEST(NcclNetFaults, MisuseOnALiveConnection) {
  Pipe handlePipe, done;
  std::vector<std::function<std::string()>> roles;
  roles.push_back([&] {
    Api api = loadApi(11);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    void* rc = nullptr;
    if (auto e = listenAndSend(api, handlePipe, &l); !e.empty()) return e;
    if (auto e = acceptLoop(api, l, &rc); !e.empty()) return e;
    char buf[64];
    void* mh = nullptr;
    if (api.regMr(rc, buf, sizeof(buf), kPtrCuda, &mh) != kInternalError) return std::string("CUDA regMr");
    if (api.regMrDmaBuf(rc, buf, sizeof(buf), kPtrCuda, 0, 3, &mh) != kInternalError) return std::string("dmabuf");
    void* data[9];
    size_t sizes[9];
    int tags[9];
    for (int i = 0; i < 9; ++i) {
      data[i] = buf;
      sizes[i] = 1;
      tags[i] = i;
    }
    void* req = nullptr;
    if (api.irecv(rc, 9, data, sizes, tags, nullptr, &req) != kInternalError) return std::string("9 grouped recvs");
    if (api.isend(rc, buf, 1, 0, nullptr, &req) != kInternalError) return std::string("isend on a recv comm");
    sizes[0] = 10;  // the sender sends 20 bytes
    if (api.irecv(rc, 1, data, sizes, tags, nullptr, &req) != kSuccess) return std::string("irecv");
    int r = testLoop(api, req, nullptr, 20s);
    if (r != kInvalidUsage) return fmt("message larger than its receive: test gave %d", r);
    char b = 1;
    done.send(&b, 1);
    api.closeRecv(rc);
    api.closeListen(l);
    return std::string();
  });
  roles.push_back([&] {
    Api api = loadApi(11);
    if (auto e = initIn(api); !e.empty()) return e;
    char handle[kHandleMaxSize];
    if (!handlePipe.recv(handle, sizeof(handle))) return std::string("no handle");
    void* sc = nullptr;
    if (auto e = connectLoop(api, handle, &sc); !e.empty()) return e;
    char msg[20] = "0123456789abcdefghi";
    void* req = nullptr;
    if (api.isend(sc, msg, sizeof(msg), 0, nullptr, &req) != kSuccess) return fmt("isend");
    testLoop(api, req, nullptr, 20s);
    char b;
    done.recv(&b, 1);
    api.closeSend(sc);
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "") << "receiver";
  EXPECT_EQ(out[1], "") << "sender";
}

// accept() gives up after RINGFOLD_TIMEOUT when no sender ever comes.
TEST(NcclNetFaults, AcceptTimesOut) {
  std::vector<std::function<std::string()>> roles;
  roles.push_back([] {
    setenv("RINGFOLD_TIMEOUT", "1", 1);
    Api api = loadApi(12);
    if (auto e = initIn(api); !e.empty()) return e;
    void* l = nullptr;
    char handle[kHandleMaxSize] = {};
    if (api.listen(0, handle, &l) != kSuccess) return fmt("listen");
    void* rc = nullptr;
    const auto start = Clock::now();
    std::string e = acceptLoop(api, l, &rc, 10s);
    if (e.empty()) return std::string("accepted nobody");
    if (e == "accept never completed") return std::string("no timeout within 10 s");
    if (Clock::now() - start < 900ms) return std::string("gave up before the timeout");
    api.closeListen(l);
    return std::string();
  });
  auto out = runProcesses(roles, kRoleDeadline);
  EXPECT_EQ(out[0], "");
}

}  // namespace
