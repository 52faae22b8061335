// tcp_uring with ranks as threads of this process (each its own Device), over 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <thread>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <tuple>

#include "tcp_test_util.h"
#include "rendezvous/hash_store.h"
#include "transport/memory_region.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::test {
namespace {

using transport::PlainMemoryRegion;
using transport::Request;

struct Buffer {
  std::vector<uint8_t> bytes;
  PlainMemoryRegion region;
  explicit Buffer(size_t n) : bytes(n), region(bytes.data(), n) {}
  Buffer(uint64_t seed, size_t n) : bytes(patterned(seed, n)), region(bytes.data(), n) {}
};

void waitAll(std::vector<std::unique_ptr<Request>>& reqs, std::chrono::milliseconds timeout = 30s) {
  for (auto& r : reqs) r->wait(timeout);
}

// ---- point to point -----------------------------------------------------------------------

// (sockets per peer, RINGFOLD_LOCAL_TRANSPORT)
class SizesAndSockets : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(SizesAndSockets, EverySizeArrivesIntact) {
  std::string sockets = std::to_string(std::get<0>(GetParam()));
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", sockets.c_str()}, {"RINGFOLD_LOCAL_TRANSPORT", std::get<1>(GetParam())}};
  const std::vector<size_t> sizes = {0, 1, 4097, (1u << 20) + 7, 64u << 20};
  auto errors = runRanks(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<std::unique_ptr<Request>> reqs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (me.rank == 0) {
        bufs.push_back(std::make_unique<Buffer>(100 + i, sizes[i]));
        reqs.push_back(me.to(1).isend(bufs.back()->region, 0, sizes[i], i, 42));
      } else {
        bufs.push_back(std::make_unique<Buffer>(sizes[i]));
        reqs.push_back(me.to(0).irecv(bufs.back()->region, 0, sizes[i], i, 42));
      }
    }
    waitAll(reqs);
    if (me.rank == 1) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(firstWrong(bufs[i]->bytes, 100 + i, sizes[i]), -1) << "size " << sizes[i];
      }
    }
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(TcpUring, SizesAndSockets, ::testing::Combine(::testing::Values(1, 4), ::testing::Values("tcp", "unix")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "Sockets_" + std::get<1>(info.param);
                         });

TEST(TcpUring, OffsetsWithinARegion) {
  EnvGuard env;
  auto errors = runRanks(2, [&](Rank& me) {
    Buffer b = me.rank == 0 ? Buffer(7, 10000) : Buffer(10000);
    if (me.rank == 0) {
      me.to(1).isend(b.region, 1234, 5000, 1)->wait(10s);
    } else {
      me.to(0).irecv(b.region, 17, 5000, 1)->wait(10s);
      auto want = patterned(7, 10000);
      EXPECT_EQ(std::memcmp(b.bytes.data() + 17, want.data() + 1234, 5000), 0);
      EXPECT_EQ(b.bytes[16], 0);
      EXPECT_EQ(b.bytes[5017], 0);
    }
    EXPECT_THROW(me.to(1 - me.rank).isend(b.region, 9000, 1001, 2), InvalidArgument);
  });
  expectAllOk(errors);
}

TEST(TcpUring, FullDuplexBothWaysAtOnce) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  auto errors = runRanks(2, [&](Rank& me) {
    int peer = 1 - me.rank;
    std::vector<std::unique_ptr<Buffer>> out, in;
    std::vector<std::unique_ptr<Request>> reqs;
    const size_t sizes[] = {(8u << 20) + 3, 100, 300000, 0, 65536};
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < 5; ++i) {
        uint64_t tag = round * 10 + i;
        out.push_back(std::make_unique<Buffer>(me.rank * 1000 + tag, sizes[i]));
        in.push_back(std::make_unique<Buffer>(sizes[i]));
        reqs.push_back(me.to(peer).irecv(in.back()->region, 0, sizes[i], tag));
        reqs.push_back(me.to(peer).isend(out.back()->region, 0, sizes[i], tag));
      }
    }
    waitAll(reqs);
    for (size_t k = 0; k < in.size(); ++k) {
      uint64_t tag = (k / 5) * 10 + k % 5;
      EXPECT_EQ(firstWrong(in[k]->bytes, peer * 1000 + tag, in[k]->bytes.size()), -1) << "tag " << tag;
    }
  });
  expectAllOk(errors);
}

// Messages of 7 tags, sizes from 0 to striped, received tag by tag in another order than sent:
// each tag's messages must pair up first-sent with first-posted.
TEST(TcpUring, ManyTagsInterleavedFifoPerTag) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "4"}, {"RINGFOLD_STRIPE_MIN_BYTES", "64K"}};
  const int kMessages = 140;
  auto sizeOf = [](int i) -> size_t { return (i % 5 == 0) ? 300000 + i : (i % 3 == 0 ? 0 : 17 * i); };
  auto errors = runRanks(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs(kMessages);
    std::vector<std::unique_ptr<Request>> reqs;
    if (me.rank == 0) {
      for (int i = 0; i < kMessages; ++i) {
        bufs[i] = std::make_unique<Buffer>(i, sizeOf(i));
        reqs.push_back(me.to(1).isend(bufs[i]->region, 0, sizeOf(i), i % 7, sizeOf(i)));
      }
    } else {
      for (int tag = 6; tag >= 0; --tag) {  // post tag 6's messages first, then 5, ...
        for (int i = tag; i < kMessages; i += 7) {
          bufs[i] = std::make_unique<Buffer>(sizeOf(i));
          reqs.push_back(me.to(0).irecv(bufs[i]->region, 0, sizeOf(i), tag, sizeOf(i)));
        }
      }
    }
    waitAll(reqs);
    if (me.rank == 1) {
      for (int i = 0; i < kMessages; ++i) EXPECT_EQ(firstWrong(bufs[i]->bytes, i, sizeOf(i)), -1) << "message " << i;
    }
  });
  expectAllOk(errors);
}

TEST(TcpUring, EqualTagsPairUpInOrderAcrossSockets) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "4"}, {"RINGFOLD_STRIPE_MIN_BYTES", "32K"},
                {"RINGFOLD_STRIPE_CHUNK_BYTES", "16K"}};
  const int kMessages = 200;
  auto sizeOf = [](int i) -> size_t { return (i * 7919) % 5 == 0 ? 100000 + i : (i * 31) % 3000; };
  auto errors = runRanks(2, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> bufs(kMessages);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int i = 0; i < kMessages; ++i) {
      if (me.rank == 0) {
        bufs[i] = std::make_unique<Buffer>(i, sizeOf(i));
        reqs.push_back(me.to(1).isend(bufs[i]->region, 0, sizeOf(i), 5, sizeOf(i)));
      } else {
        bufs[i] = std::make_unique<Buffer>(sizeOf(i));
        reqs.push_back(me.to(0).irecv(bufs[i]->region, 0, sizeOf(i), 5, sizeOf(i)));
      }
    }
    waitAll(reqs);
    if (me.rank == 1) {
      for (int i = 0; i < kMessages; ++i) EXPECT_EQ(firstWrong(bufs[i]->bytes, i, sizeOf(i)), -1) << "message " << i;
    }
  });
  expectAllOk(errors);
}

// Tags 1 and 2 arrive before their receives exist (buffered as unexpected), which is certain
// because the receiver first waits for tag 3, sent after them on the same (only) socket.
TEST(TcpUring, MessageArrivesBeforeItsReceive) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "1"}};
  auto errors = runRanks(2, [&](Rank& me) {
    const size_t big = (4u << 20) + 1, small = 333;
    if (me.rank == 0) {
      Buffer a(1, big), b(2, small), c(3, 10);
      std::vector<std::unique_ptr<Request>> reqs;
      reqs.push_back(me.to(1).isend(a.region, 0, big, 1));
      reqs.push_back(me.to(1).isend(b.region, 0, small, 2));
      reqs.push_back(me.to(1).isend(c.region, 0, 10, 3));
      waitAll(reqs);
      Buffer done(1);
      me.to(1).irecv(done.region, 0, 1, 9)->wait(10s);
    } else {
      Buffer a(big), b(small), c(10);
      me.to(0).irecv(c.region, 0, 10, 3)->wait(10s);
      auto rb = me.to(0).irecv(b.region, 0, small, 2);
      auto ra = me.to(0).irecv(a.region, 0, big, 1);
      EXPECT_TRUE(rb->test());  // already here: completes without waiting
      EXPECT_TRUE(ra->test());
      EXPECT_EQ(firstWrong(a.bytes, 1, big), -1);
      EXPECT_EQ(firstWrong(b.bytes, 2, small), -1);
      EXPECT_EQ(firstWrong(c.bytes, 3, 10), -1);
      Buffer done(1);
      me.to(0).isend(done.region, 0, 1, 9)->wait(10s);
    }
  });
  expectAllOk(errors);
}

// The receive is posted while its (striped) message is partly buffered as unexpected: the part
// already here is copied once and the rest lands in place. Which bytes arrive before the receive
// varies from run to run; the data must be right either way.
TEST(TcpUring, ReceivePostedWhileTheMessageArrives) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "4"}, {"RINGFOLD_STRIPE_CHUNK_BYTES", "256K"}};
  auto errors = runRanks(2, [&](Rank& me) {
    const size_t n = (48u << 20) + 13;
    Buffer flag(1);
    if (me.rank == 0) {
      Buffer out(6, n);
      auto start = me.to(1).isend(flag.region, 0, 1, 8);
      me.to(1).isend(out.region, 0, n, 6)->wait(20s);
      start->wait(20s);
      me.to(1).isend(flag.region, 0, 1, 9)->wait(20s);
      return;
    }
    Buffer in(n);
    me.to(0).irecv(flag.region, 0, 1, 8)->wait(20s);  // the big one follows right behind
    auto marker = me.to(0).irecv(flag.region, 0, 1, 9);
    auto until = std::chrono::steady_clock::now() + 3ms;
    while (std::chrono::steady_clock::now() < until) marker->test();  // part of tag 6 arrives
    me.to(0).irecv(in.region, 0, n, 6)->wait(20s);
    marker->wait(20s);
    EXPECT_EQ(firstWrong(in.bytes, 6, n), -1);
  });
  expectAllOk(errors);
}

TEST(TcpUring, ReceivePostedBeforeTheMessage) {
  EnvGuard env;
  std::atomic<bool> posted{false};
  auto errors = runRanks(2, [&](Rank& me) {
    const size_t n = (2u << 20) + 5;
    if (me.rank == 1) {
      Buffer in(n);
      auto r = me.to(0).irecv(in.region, 0, n, 4);
      EXPECT_FALSE(r->test());
      posted = true;
      r->wait(10s);
      EXPECT_EQ(firstWrong(in.bytes, 4, n), -1);
    } else {
      auto until = std::chrono::steady_clock::now() + 10s;
      while (!posted && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      Buffer out(4, n);
      me.to(1).isend(out.region, 0, n, 4)->wait(10s);
    }
  });
  expectAllOk(errors);
}

class ZeroCopyModes : public ::testing::TestWithParam<const char*> {};

TEST_P(ZeroCopyModes, LargeAndSmallSendsArriveIntact) {
  EnvGuard env{{"RINGFOLD_ZEROCOPY", GetParam()}, {"RINGFOLD_ZEROCOPY_MIN_BYTES", "16K"},
                {"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  auto errors = runRanks(2, [&](Rank& me) {
    const size_t sizes[] = {(3u << 20) + 11, 20000, 100, (1u << 20)};
    int peer = 1 - me.rank;
    for (int round = 0; round < 4; ++round) {
      std::vector<std::unique_ptr<Buffer>> out, in;
      std::vector<std::unique_ptr<Request>> reqs;
      for (size_t i = 0; i < 4; ++i) {
        uint64_t seed = me.rank * 100 + round * 10 + i;
        out.push_back(std::make_unique<Buffer>(seed, sizes[i]));
        in.push_back(std::make_unique<Buffer>(sizes[i]));
        reqs.push_back(me.to(peer).isend(out.back()->region, 0, sizes[i], i));
        reqs.push_back(me.to(peer).irecv(in.back()->region, 0, sizes[i], i));
      }
      waitAll(reqs);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(firstWrong(in[i]->bytes, peer * 100 + round * 10 + i, sizes[i]), -1);
      }
    }
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(TcpUring, ZeroCopyModes, ::testing::Values("on", "off", "auto"));

// ---- meshes -------------------------------------------------------------------------------

TEST(TcpUring, SingleRankHasNoPeers) {
  EnvGuard env;
  rendezvous::HashStore store;
  auto device = transport::createDevice("tcp_uring");
  EXPECT_STREQ(device->name(), "tcp_uring");
  auto peers = device->connectAll(store, "one", 0, 1, 5s);
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0], nullptr);
  EXPECT_TRUE(store.check({"one/addr/0"}));
  EXPECT_EQ(store.getString("one/addr/0", 1s).rfind("127.0.0.1:", 0), 0u);
  EXPECT_FALSE(device->aborted());
}

// (ranks, RINGFOLD_LOCAL_TRANSPORT)
class Mesh : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(Mesh, EveryPairExchanges) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}, {"RINGFOLD_LOCAL_TRANSPORT", std::get<1>(GetParam())}};
  const int n = std::get<0>(GetParam());
  auto errors = runRanks(n, [&](Rank& me) {
    std::vector<std::unique_ptr<Buffer>> out(n), in(n);
    std::vector<std::unique_ptr<Request>> reqs;
    auto sizeOf = [](int from, int to) -> size_t { return 1000 + 300001 * ((from + 2 * to) % 3); };
    for (int p = 0; p < n; ++p) {
      if (p == me.rank) continue;
      out[p] = std::make_unique<Buffer>(me.rank * 10 + p, sizeOf(me.rank, p));
      in[p] = std::make_unique<Buffer>(sizeOf(p, me.rank));
      reqs.push_back(me.to(p).irecv(in[p]->region, 0, sizeOf(p, me.rank), 77));
      reqs.push_back(me.to(p).isend(out[p]->region, 0, sizeOf(me.rank, p), 77));
    }
    waitAll(reqs);
    for (int p = 0; p < n; ++p) {
      if (p == me.rank) continue;
      EXPECT_EQ(firstWrong(in[p]->bytes, p * 10 + me.rank, sizeOf(p, me.rank)), -1) << "from " << p;
    }
    EXPECT_EQ(me.peers[me.rank], nullptr);
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(TcpUring, Mesh, ::testing::Combine(::testing::Values(3, 5), ::testing::Values("tcp", "unix")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "Ranks_" + std::get<1>(info.param);
                         });

// ---- same-host peers: Unix sockets or TCP -------------------------------------------------

namespace tu = transport::tcp_uring;

// Meshes two ranks (threads) with the given options through `store`; returns each rank's
// sockets to the other.
std::pair<std::vector<tu::Socket>, std::vector<tu::Socket>> meshRows(rendezvous::Store& store,
                                                                     const tu::MeshOptions& for0,
                                                                     const tu::MeshOptions& for1) {
  std::vector<std::vector<tu::Socket>> zeros, ones;
  std::exception_ptr err;
  std::thread one([&] {
    try {
      tu::MeshOptions o = for1;
      o.rank = 1;
      ones = tu::connectMesh(store, o);
    } catch (...) {
      err = std::current_exception();
    }
  });
  tu::MeshOptions o = for0;
  o.rank = 0;
  zeros = tu::connectMesh(store, o);
  one.join();
  if (err) std::rethrow_exception(err);
  return {std::move(zeros[1]), std::move(ones[0])};
}

// The same, for one socket per peer: each rank's socket to the other.
std::pair<tu::Socket, tu::Socket> meshPair(rendezvous::Store& store, const tu::MeshOptions& for0,
                                           const tu::MeshOptions& for1) {
  auto [row0, row1] = meshRows(store, for0, for1);
  return {std::move(row0.at(0)), std::move(row1.at(0))};
}

std::pair<tu::Socket, tu::Socket> meshPair(const tu::MeshOptions& for0, const tu::MeshOptions& for1) {
  rendezvous::HashStore store;
  return meshPair(store, for0, for1);
}

tu::MeshOptions pairOptions(tu::Family family = tu::Family::kUnix) {
  tu::MeshOptions o;
  o.family = family;
  o.prefix = "pair";
  o.size = 2;
  o.listenAddress = "127.0.0.1";
  o.timeout = 10s;
  return o;
}

TEST(TcpUringMesh, HostIdentityNamesBootAndNetworkNamespace) {
  std::string id = transport::hostIdentity();
  ASSERT_FALSE(id.empty()) << "no /proc/sys/kernel/random/boot_id or /proc/self/ns/net here";
  EXPECT_EQ(id, transport::hostIdentity());
  EXPECT_EQ(id.find(' '), std::string::npos) << id;  // it is one field of the published address
  EXPECT_NE(id.find('.'), std::string::npos) << id;
}

TEST(TcpUringMesh, SameHostPeersAreJoinedByUnixSockets) {
  EnvGuard env;
  auto [at0, at1] = meshPair(pairOptions(), pairOptions());
  EXPECT_TRUE(tu::isUnixSocket(at0.fd()));
  EXPECT_TRUE(tu::isUnixSocket(at1.fd()));
  char byte = 0;
  ASSERT_EQ(::send(at1.fd(), "u", 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(::recv(at0.fd(), &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'u');
}

// Several sockets per peer spread TCP flows; a same-host peer gets one Unix socket whatever the
// setting, and the two ends agree on it.
TEST(TcpUringMesh, SameHostPeersGetOneUnixSocketWhateverSocketsPerPeer) {
  EnvGuard env;
  tu::MeshOptions o = pairOptions();
  o.socketsPerPeer = 3;
  rendezvous::HashStore store;
  auto [row0, row1] = meshRows(store, o, o);
  ASSERT_EQ(row0.size(), 1u);
  ASSERT_EQ(row1.size(), 1u);
  EXPECT_TRUE(tu::isUnixSocket(row0[0].fd()));
  EXPECT_TRUE(tu::isUnixSocket(row1[0].fd()));
}

// Rows of sockets to one peer: sizes and kinds.
void expectTcpRows(const std::vector<tu::Socket>& row0, const std::vector<tu::Socket>& row1, size_t count) {
  ASSERT_EQ(row0.size(), count);
  ASSERT_EQ(row1.size(), count);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(row0[i].valid() && row1[i].valid()) << i;
    EXPECT_FALSE(tu::isUnixSocket(row0[i].fd())) << i;
    EXPECT_FALSE(tu::isUnixSocket(row1[i].fd())) << i;
  }
}

// The family is the caller's choice (RINGFOLD_LOCAL_TRANSPORT=tcp makes the per-peer selector
// give same-host peers a TCP device): a TCP mesh uses TCP on one host too.
TEST(TcpUringMesh, TcpFamilyUsesTcpOnOneHost) {
  EnvGuard env;
  auto [at0, at1] = meshPair(pairOptions(tu::Family::kTcp), pairOptions(tu::Family::kTcp));
  EXPECT_FALSE(tu::isUnixSocket(at0.fd()));
  EXPECT_FALSE(tu::isUnixSocket(at1.fd()));
}

// Ranks in other network namespaces or on other machines cannot reach an abstract Unix socket:
// the selector gives them a TCP device, whose mesh does not look at host identities.
TEST(TcpUringMesh, PeersOnAnotherHostUseTcp) {
  EnvGuard env;
  tu::MeshOptions a = pairOptions(tu::Family::kTcp), b = pairOptions(tu::Family::kTcp);
  a.socketsPerPeer = b.socketsPerPeer = 2;
  b.hostId = "another-boot.0:0";
  rendezvous::HashStore store;
  auto [row0, row1] = meshRows(store, a, b);
  expectTcpRows(row0, row1, 2);
}


// A process that never read the store (so does not hold the job secret) connects to a rank's
// published port first and claims to be rank 0: the rank drops it (the hello lacks the mesh's
// token) and still meshes with the real rank 0.
// A store whose readers see every published Unix socket name replaced by one nobody listens on.
class BrokenUnixNameStore : public rendezvous::HashStore {
 public:
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::vector<uint8_t> v = HashStore::get(key, timeout);
    std::istringstream in(std::string(v.begin(), v.end()));
    std::vector<std::string> fields;
    for (std::string f; in >> f;) fields.push_back(f);
    if (key.find("/addr/") == std::string::npos || fields.size() != 5) return v;
    fields[3] = "ringfold-nobody-listens-here";  // ip:port token host unix-name process
    std::string text = fields[0];
    for (size_t i = 1; i < fields.size(); ++i) text += " " + fields[i];
    return {text.begin(), text.end()};
  }
};

// A Unix socket that refuses the connection (here: no such name; in life, a security module)
// makes both ranks of the pair leave it out at once, saying why, instead of retrying until the
// timeout: the per-peer device then joins them by TCP (transport_per_peer tests).
TEST(TcpUringMesh, UnreachableUnixSocketIsReportedAtBothEnds) {
  EnvGuard env;
  BrokenUnixNameStore store;
  auto start = std::chrono::steady_clock::now();
  tu::MeshOptions o = pairOptions();
  std::vector<std::vector<tu::Socket>> zeros, ones;
  std::vector<std::string> why0, why1;
  std::thread one([&] {
    tu::MeshOptions mine = o;
    mine.rank = 1;
    ones = tu::connectMesh(store, mine, nullptr, &why1);
  });
  o.rank = 0;
  zeros = tu::connectMesh(store, o, nullptr, &why0);
  one.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(zeros[1].empty());
  EXPECT_TRUE(ones[0].empty());
  EXPECT_NE(why0.at(1).find("cannot connect to rank 1's Unix socket"), std::string::npos) << why0.at(1);
  EXPECT_EQ(why1.at(0), why0.at(1));
}

// The same through Devices: unix_uring returns no connection for the peer, at both ends.
TEST(TcpUringMesh, UnreachableUnixPeerHasNoConnection) {
  EnvGuard env;
  BrokenUnixNameStore store;
  std::vector<std::vector<std::unique_ptr<transport::Connection>>> peers(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto device = transport::createDevice("unix_uring");
      EXPECT_STREQ(device->name(), "unix_uring");
      peers[r] = device->connectAll(store, "u", r, 2, 10s);
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_EQ(peers[0].size(), 2u);
  ASSERT_EQ(peers[1].size(), 2u);
  EXPECT_EQ(peers[0][1], nullptr);
  EXPECT_EQ(peers[1][0], nullptr);
}

// The published "ip:port token host unix-name process" of `rank`, split at spaces.
std::vector<std::string> publishedFields(rendezvous::Store& store, const std::string& key) {
  std::istringstream in(store.getString(key, 5s));
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

// The forged hello of the test below; true if it was dropped (closed without an answer).
bool forgedHelloDropped(tu::Socket& intruder) {
  tu::wire::Hello forged{tu::wire::kHelloMagic, 0, 2, 0, 1, 0, {}};
  if (::send(intruder.fd(), &forged, sizeof forged, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof forged)) return false;
  timeval tv{5, 0};
  setsockopt(intruder.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char byte;
  return ::recv(intruder.fd(), &byte, 1, 0) == 0;
}

// The same through the Unix socket a rank listens on: its name is public (/proc/net/unix), the
// token is not.
TEST(TcpUringMesh, HelloWithoutTheTokenIsDroppedOnTheUnixSocket) {
  EnvGuard env;
  rendezvous::HashStore store;
  tu::MeshOptions o = pairOptions();
  std::vector<std::vector<tu::Socket>> ones;
  std::thread one([&] {
    tu::MeshOptions mine = o;
    mine.rank = 1;
    ones = tu::connectMesh(store, mine);
  });
  auto fields = publishedFields(store, "pair/addr/1");
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_EQ(fields[0], "-");  // a Unix mesh has no TCP listener
  EXPECT_EQ(fields[2], transport::hostIdentity());
  ASSERT_NE(fields[3], "-");
  EXPECT_EQ(fields[4], transport::processIdentity());
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, fields[3].data(), fields[3].size());
  tu::Socket intruder(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(intruder.fd(), reinterpret_cast<sockaddr*>(&a),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + fields[3].size())),
            0)
      << std::strerror(errno);
  EXPECT_TRUE(forgedHelloDropped(intruder)) << "the forged hello was answered instead of dropped";
  tu::MeshOptions mine = o;
  mine.rank = 0;
  auto zeros = tu::connectMesh(store, mine);
  one.join();
  ASSERT_TRUE(zeros[1][0].valid());
  EXPECT_TRUE(tu::isUnixSocket(zeros[1][0].fd()));
}

TEST(TcpUringMesh, HelloWithoutTheTokenIsDropped) {
  EnvGuard env;
  rendezvous::HashStore store;
  tu::MeshOptions o;
  o.prefix = "tok";
  o.size = 2;
  o.listenAddress = "127.0.0.1";
  o.timeout = 10s;
  std::vector<std::vector<tu::Socket>> ones, zeros;
  std::thread one([&] {
    tu::MeshOptions mine = o;
    mine.rank = 1;
    ones = tu::connectMesh(store, mine);
  });
  std::string published = store.getString("tok/addr/1", 5s);
  auto colon = published.rfind(':', published.find(' '));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(published.c_str() + colon + 1)));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  tu::Socket intruder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(intruder.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_TRUE(forgedHelloDropped(intruder)) << "the forged hello was answered instead of dropped";
  char byte;

  tu::MeshOptions mine = o;
  mine.rank = 0;
  zeros = tu::connectMesh(store, mine);
  one.join();
  ASSERT_EQ(ones.size(), 2u);
  ASSERT_TRUE(ones[0][0].valid());
  ASSERT_TRUE(zeros[1][0].valid());
  // the socket rank 1 kept is rank 0's: a byte sent by rank 0 arrives on it
  ASSERT_EQ(::send(zeros[1][0].fd(), "x", 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(::recv(ones[0][0].fd(), &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'x');
}

}  // namespace
}  // namespace ringfold::test
