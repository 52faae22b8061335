// tcp_uring mesh start-up while a stranger (a process that cannot read the store, so does not
// know the per-mesh tokens) talks to the ranks' listening TCP ports and abstract Unix sockets:
// forged hellos that claim other rank counts or sockets per peer, garbage, partial hellos,
// connections held open in silence, and a flood of them. The mesh must still form, quickly, and
// the ranks' logs must not grow by a line per connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <sstream>

#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::test {
namespace {

namespace tu = transport::tcp_uring;
using Clock = std::chrono::steady_clock;
using transport::PlainMemoryRegion;

// Where a rank listens, from what it published ("ip:port token host unix-name ...").
struct Listening {
  bool hasTcp = false;  // a Unix mesh publishes "-" for ip:port
  sockaddr_in tcp{};
  std::string unixName;  // empty: none
};

Listening listeningOf(rendezvous::Store& store, const std::string& key) {
  std::istringstream in(store.getString(key, 20s));
  std::string endpoint, token, host, unixName;
  in >> endpoint >> token >> host >> unixName;
  Listening l;
  l.hasTcp = endpoint != "-";
  if (l.hasTcp) {  // "-" has no ':' (c_str() + npos + 1 would overflow the pointer: UBSan)
    auto colon = endpoint.rfind(':');
    l.tcp.sin_family = AF_INET;
    l.tcp.sin_port = htons(static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
    inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &l.tcp.sin_addr);
  }
  if (unixName != "-") l.unixName = unixName;
  return l;
}

// A connected blocking socket to `l` (TCP, or its Unix socket); invalid if the connect failed.
tu::Socket dial(const Listening& l, bool viaUnix) {
  if (!viaUnix) {
    tu::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&l.tcp), sizeof l.tcp) != 0) return {};
    return s;
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, l.unixName.data(), l.unixName.size());
  tu::Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&a),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + l.unixName.size())) != 0) {
    return {};
  }
  return s;
}

void sendAll(const tu::Socket& s, const void* data, size_t n) {
  (void)::send(s.fd(), data, n, MSG_NOSIGNAL);
}

// What the stranger sends on one connection, then keeps the connection open (or closes it).
struct Forgery {
  const char* what;
  std::function<void(const tu::Socket&)> send;
  bool close = false;
};

std::vector<Forgery> forgeries(int size) {
  auto hello = [](int rank, int n, int index, int perPeer) {
    return tu::wire::Hello{tu::wire::kHelloMagic, rank, n, index, perPeer, 0, {}};
  };
  std::vector<Forgery> f;
  f.push_back({"hello for 99 ranks", [=](const tu::Socket& s) {
                 auto h = hello(0, 99, 0, 1);
                 sendAll(s, &h, sizeof h);
               }});
  f.push_back({"hello with 7 sockets per peer", [=](const tu::Socket& s) {
                 auto h = hello(0, size, 0, 7);
                 sendAll(s, &h, sizeof h);
               }});
  f.push_back({"hello claiming rank 0 with a made-up token", [=](const tu::Socket& s) {
                 auto h = hello(0, size, 0, 1);
                 std::memset(h.token, 'a', sizeof h.token);
                 sendAll(s, &h, sizeof h);
               }});
  f.push_back({"hello claiming this rank's own rank and a negative index", [=](const tu::Socket& s) {
                 auto h = hello(size - 1, -5, -1, -1);
                 sendAll(s, &h, sizeof h);
               }});
  f.push_back({"88 random bytes", [](const tu::Socket& s) {
                 std::mt19937 rng(7);
                 unsigned char junk[sizeof(tu::wire::Hello)];
                 for (auto& b : junk) b = static_cast<unsigned char>(rng());
                 sendAll(s, junk, sizeof junk);
               }});
  f.push_back({"a partial hello, then silence", [=](const tu::Socket& s) {
                 auto h = hello(0, 99, 0, 1);
                 sendAll(s, &h, 10);
               }});
  f.push_back({"nothing at all", [](const tu::Socket&) {}});
  f.push_back({"a partial hello, then close", [=](const tu::Socket& s) {
                 auto h = hello(0, size, 0, 1);
                 sendAll(s, &h, 20);
               },
               true});
  f.push_back({"two forged hellos back to back", [=](const tu::Socket& s) {
                 tu::wire::Hello two[2] = {hello(0, 99, 0, 1), hello(0, size, 0, 64)};
                 sendAll(s, two, sizeof two);
               }});
  return f;
}

struct Case {
  const char* local;  // RINGFOLD_LOCAL_TRANSPORT
  int silentFlood;    // extra connections held open in silence, per listener
};

class MeshWithStranger : public ::testing::TestWithParam<Case> {};

// Ranks 1..3 start and publish their addresses; the stranger then does all of forgeries() to
// each of them (TCP, and the Unix socket when they have one), holding its connections open, and
// only then does rank 0 start. Every rank must mesh and exchange a message with every other.
TEST_P(MeshWithStranger, MeshFormsAndTheLogStaysShort) {
  const Case c = GetParam();
  EnvGuard env{{"RINGFOLD_LOCAL_TRANSPORT", c.local}, {"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  const bool unix = std::string(c.local) == "unix";
  const int n = 4;
  rendezvous::HashStore store;
  std::vector<std::exception_ptr> errors(n);
  std::vector<double> connectSeconds(n, 0);
  std::vector<tu::Socket> held;
  testing::internal::CaptureStderr();
  auto rankBody = [&](int r) {
    try {
      auto device = transport::createDevice(localBackend());
      const auto t0 = Clock::now();
      auto peers = device->connectAll(store, "s", r, n, 20s);
      connectSeconds[r] = std::chrono::duration<double>(Clock::now() - t0).count();
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<std::unique_ptr<PlainMemoryRegion>> regions;
      std::vector<std::unique_ptr<transport::Request>> reqs;
      out.reserve(n);
      in.reserve(n);
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        out.push_back(patterned(r * 10 + p, 1000));
        in.emplace_back(1000);
        regions.push_back(std::make_unique<PlainMemoryRegion>(out.back().data(), 1000));
        reqs.push_back(peers[p]->isend(*regions.back(), 0, 1000, 1));
        regions.push_back(std::make_unique<PlainMemoryRegion>(in.back().data(), 1000));
        reqs.push_back(peers[p]->irecv(*regions.back(), 0, 1000, 1));
      }
      for (auto& q : reqs) q->wait(20s);
      size_t k = 0;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        if (firstWrong(in[k++], p * 10 + r, 1000) != -1) RF_THROW(Error, "wrong data from rank ", p);
      }
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 1; r < n; ++r) ranks.emplace_back(rankBody, r);
  int forged = 0;
  for (int r = 1; r < n; ++r) {
    const Listening l = listeningOf(store, "s/addr/" + std::to_string(r));
    for (bool viaUnix : {false, true}) {
      if (viaUnix && (!unix || l.unixName.empty())) continue;
      if (!viaUnix && !l.hasTcp) continue;
      for (const Forgery& f : forgeries(n)) {
        tu::Socket s = dial(l, viaUnix);
        if (!s.valid()) continue;  // the rank finished meshing already: the test fails below
        f.send(s);
        ++forged;
        if (!f.close) held.push_back(std::move(s));
      }
      for (int i = 0; i < c.silentFlood; ++i) {
        tu::Socket s = dial(l, viaUnix);
        if (s.valid()) held.push_back(std::move(s));
      }
    }
  }
  std::this_thread::sleep_for(300ms);  // the ranks read what the stranger sent
  ranks.emplace_back(rankBody, 0);
  for (auto& t : ranks) t.join();
  const std::string log = testing::internal::GetCapturedStderr();
  held.clear();
  expectAllOk(errors);
  EXPECT_GT(forged, 0);
  for (int r = 0; r < n; ++r) EXPECT_LT(connectSeconds[r], 8.0) << "rank " << r << "'s mesh took too long";
  // One line per rank at start (the first drop), at most a summary at the end: not one per
  // connection.
  size_t lines = 0;
  for (size_t at = 0; (at = log.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_LE(lines, 3u * (n - 1)) << log;
  EXPECT_NE(log.find("not a rank of this job"), std::string::npos) << log;
  std::cout << log;
}

// A hello with the mesh's token is a rank of this job (it read the store), and its mismatches end
// the start-up; when it claims the receiving rank's own number (two processes started as the
// same rank), the message says so instead of naming one rank twice ("rank 1 uses 7, rank 1 uses
// 1").
TEST(TcpUringStranger, AuthenticatedHelloClaimingTheSameRankIsNamedApart) {
  EnvGuard env;
  rendezvous::HashStore store;
  std::string error;
  std::thread one([&] {
    tu::MeshOptions o;
    o.prefix = "dup";
    o.rank = 1;
    o.size = 2;
    o.listenAddress = "127.0.0.1";
    o.timeout = 10s;
    try {
      tu::connectMesh(store, o);
      error = "meshed";
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::istringstream in(store.getString("dup/addr/1", 10s));
  std::string endpoint, token;
  in >> endpoint >> token;
  const Listening l = listeningOf(store, "dup/addr/1");
  tu::Socket s = dial(l, false);
  tu::wire::Hello h{tu::wire::kHelloMagic, 1, 2, 0, 7, 0, {}};
  ASSERT_EQ(token.size(), sizeof h.token);
  std::memcpy(h.token, token.data(), sizeof h.token);
  sendAll(s, &h, sizeof h);
  one.join();
  EXPECT_NE(error.find("differs between ranks: another process started as rank 1 uses 7, rank 1 uses 1"),
            std::string::npos)
      << error;
}

INSTANTIATE_TEST_SUITE_P(TcpUringStranger, MeshWithStranger,
                         ::testing::Values(Case{"tcp", 0}, Case{"unix", 0}, Case{"tcp", 200}, Case{"unix", 200}),
                         [](const auto& info) {
                           return std::string(info.param.local) + (info.param.silentFlood > 0 ? "Flood" : "Forged");
                         });

}  // namespace
}  // namespace ringfold::test
