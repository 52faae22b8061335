// openJobStore(): ranks as forked processes bootstrapped from launcher-style environments,
// rank 0 hosting the TCP store, the others finding it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <thread>

#include "child_process.h"
#include "common/error.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/job_store.h"

namespace ringfold::rendezvous::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int freePort() {
  TcpStoreServer probe("127.0.0.1", 0, "probe");
  return probe.port();
}

// Runs `ranks` forked processes; each sets `env(rank)`, bootstraps and calls body(rank, store).
std::vector<int> runRanks(int ranks, const std::function<std::map<std::string, std::string>(int)>& env,
                          const std::function<int(int, JobStore&)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pids.push_back(forkChild([&] {
      for (const auto& [k, v] : env(r)) ::setenv(k.c_str(), v.c_str(), 1);
      auto info = bootstrapFromEnvironment();
      if (info.rank != r) return 10;
      try {
        JobStore job = openJobStore(info, 5s);
        return body(r, job);
      } catch (const Error& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        return contains(e.what(), "wrong secret") ? 5 : contains(e.what(), "not set within") ? 6 : 7;
      }
    }));
  }
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(waitChild(pid, 20s));
  return codes;
}

// This host's first non-loopback IPv4 address, if it has one.
std::optional<std::string> nonLoopbackIpv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    found = buf;
  }
  ::freeifaddrs(list);
  return found;
}

// True if a TCP connection to addr:port is accepted.
bool accepts(const std::string& addr, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

BootstrapInfo rankZeroOf(int size, int localSize, const std::string& storeAddr, int port) {
  BootstrapInfo info;
  info.rank = 0;
  info.size = size;
  info.localSize = localSize;
  info.storeAddr = storeAddr;
  info.storePort = port;
  info.secret = "listen-test-" + std::to_string(port);
  info.hostStore = true;
  info.source = "ringfold";
  return info;
}

// Rank 0 listens only where the ranks dial when that is known: a loopback store address keeps
// the store off the network (docs/launching.md: "Running under cluster managers").
TEST(JobStore, LoopbackStoreAddressListensOnLoopbackOnly) {
  const int port = freePort();
  JobStore job = openJobStore(rankZeroOf(2, 2, "127.0.0.1", port), 2s);
  ASSERT_NE(job.server, nullptr);
  EXPECT_EQ(job.server->address(), "127.0.0.1");
  EXPECT_TRUE(accepts("127.0.0.1", port));
  if (auto other = nonLoopbackIpv4()) {
    EXPECT_FALSE(accepts(*other, port)) << "the store answers on " << *other;
  }
  job.store->setString("k", "v");
  EXPECT_EQ(job.store->getString("k", 1s), "v");
}

TEST(JobStore, ListenAddressFollowsTheStoreAddress) {
  // localhost, all ranks on this host: loopback.
  EXPECT_EQ(storeListenAddress(rankZeroOf(2, 2, "localhost", 1)).rfind("127.", 0), 0u)
      << storeListenAddress(rankZeroOf(2, 2, "localhost", 1));
  // A host name on a multi-host job may resolve elsewhere to another address: everywhere.
  EXPECT_EQ(storeListenAddress(rankZeroOf(4, 2, "localhost", 1)), "");
  // A numeric address that is not this host's (forwarded to it, say): everywhere.
  EXPECT_EQ(storeListenAddress(rankZeroOf(4, 2, "198.51.100.77", 1)), "");
  EXPECT_EQ(storeListenAddress(rankZeroOf(2, 2, "::1", 1)), "::1");
  if (auto own = nonLoopbackIpv4()) {
    // One of this host's addresses: that one alone, as every rank dials exactly it.
    EXPECT_EQ(storeListenAddress(rankZeroOf(4, 2, *own, 1)), *own);
    const int port = freePort();
    JobStore job = openJobStore(rankZeroOf(2, 1, *own, port), 2s);
    EXPECT_EQ(job.server->address(), *own);
    EXPECT_TRUE(accepts(*own, port));
    EXPECT_FALSE(accepts("127.0.0.1", port));
  }
}

// A rank that finds no store says who should have been hosting it.
TEST(JobStore, StoreNobodyHostsIsNamedWithWhoShouldHostIt) {
  const int port = freePort();
  BootstrapInfo info = rankZeroOf(2, 2, "127.0.0.1", port);
  info.rank = 1;
  info.hostStore = false;
  for (const char* server : {"", "external"}) {
    SCOPED_TRACE(server);
    if (*server != 0) ::setenv("RINGFOLD_STORE_SERVER", server, 1);
    try {
      openJobStore(info, 200ms);
      ADD_FAILURE() << "no store is listening on port " << port;
    } catch (const TimeoutError& e) {
      EXPECT_TRUE(contains(e.what(), "could not connect to the rendezvous store at 127.0.0.1:" + std::to_string(port)))
          << e.what();
      EXPECT_TRUE(contains(e.what(), *server != 0 ? "RINGFOLD_STORE_SERVER=external: a launcher or another process"
                                                  : "rank 0 hosts it: is rank 0 running"))
          << e.what();
    }
    ::unsetenv("RINGFOLD_STORE_SERVER");
  }
}

TEST(JobStore, OneProcessIsInMemory) {
  BootstrapInfo info;
  JobStore job = openJobStore(info, 1s);
  EXPECT_EQ(job.server, nullptr);
  ASSERT_NE(dynamic_cast<HashStore*>(job.store.get()), nullptr);
  EXPECT_EQ(job.store->add("n", 1), 1);
}

// torchrun-style: store on MASTER_PORT + 1, secret derived from TORCHELASTIC_RUN_ID.
TEST(JobStore, TorchrunStyleRanksFindRankZero) {
  const int port = freePort();
  constexpr int kRanks = 3;
  auto env = [&](int r) {
    return std::map<std::string, std::string>{
        {"RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(kRanks)},
        {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", std::to_string(kRanks)},
        {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port - 1)},
        {"TORCHELASTIC_RUN_ID", "job-store-test"}, {"RINGFOLD_LOG_LEVEL", "error"}};
  };
  auto codes = runRanks(kRanks, env, [&](int r, JobStore& job) {
    if ((r == 0) != (job.server != nullptr)) return 11;
    job.store->setString("addr/" + std::to_string(r), "rank" + std::to_string(r));
    for (int p = 0; p < kRanks; ++p) {
      if (job.store->getString("addr/" + std::to_string(p), 5s) != "rank" + std::to_string(p)) return 12;
    }
    job.store->add("done", 1);
    if (r == 0) {  // the host keeps the store up until every rank has finished with it
      auto deadline = Clock::now() + 5s;
      while (job.store->getString("done", 1s) != std::to_string(kRanks)) {
        if (Clock::now() > deadline) return 13;
        std::this_thread::sleep_for(5ms);
      }
    }
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(kRanks, 0));
}

TEST(JobStore, RankWithAnotherSecretIsRefused) {
  const int port = freePort();
  auto env = [&](int r) {
    return std::map<std::string, std::string>{
        {"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
        {"RINGFOLD_STORE_PORT", std::to_string(port)}, {"RINGFOLD_SECRET", r == 0 ? "alpha" : "beta"},
        {"RINGFOLD_LOG_LEVEL", "fatal"}};
  };
  auto codes = runRanks(2, env, [&](int r, JobStore& job) {
    job.store->setString("hello/" + std::to_string(r), "x");
    job.store->get("hello/" + std::to_string(1 - r), 2s);
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{6, 5}));  // rank 0 times out waiting, rank 1 is refused
}

}  // namespace
}  // namespace ringfold::rendezvous::testing
