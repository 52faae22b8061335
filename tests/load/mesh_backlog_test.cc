// The tcp_uring start-up mesh with hundreds of ranks (ctest MeshManyRanks.*, label load).
//
// With 256 ranks on 2 cores, the highest rank accepts 255 connections, and many of their
// connecting ranks get the CPU to send their hello only later. The mesh's flood guard (at most
// kMaxUnidentified = 128 accepted connections waiting for a hello) used to drop the oldest of
// those real ranks as strangers ("not a rank of this job"), which then had to reconnect, with
// at most 5 attempts each. Here one real mesh rank (the highest of 301) faces 300 lower ranks
// played by plain sockets that all connect before any sends its hello: every one must get its
// answer, and the mesh must complete.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rendezvous/hash_store.h"
#include "rendezvous/secret.h"
#include "transport/tcp_uring/mesh.h"

namespace {

using namespace std::chrono_literals;
namespace tu = ringfold::transport::tcp_uring;

TEST(MeshManyRanks, HundredsOfRanksWaitingForTheirHelloAreNotTakenForAFlood) {
  constexpr int kSize = 301;
  constexpr int kMe = kSize - 1;  // every lower rank connects to the highest
  ringfold::rendezvous::HashStore store;
  std::vector<std::string> tokens(kMe);
  for (int p = 0; p < kMe; ++p) {
    tokens[p] = ringfold::rendezvous::generateSecret();
    store.setString("m/addr/" + std::to_string(p), "127.0.0.1:1 " + tokens[p] + " - - -");
  }
  std::string error;
  std::vector<std::vector<tu::Socket>> sockets;
  std::thread mesh([&] {
    tu::MeshOptions o;
    o.prefix = "m";
    o.rank = kMe;
    o.size = kSize;
    o.listenAddress = "127.0.0.1";
    o.timeout = 20s;
    try {
      sockets = tu::connectMesh(store, o);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });

  std::istringstream published(store.getString("m/addr/" + std::to_string(kMe), 20s));
  std::string endpoint, token;
  published >> endpoint >> token;
  const auto colon = endpoint.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  ASSERT_EQ(inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &addr.sin_addr), 1);
  ASSERT_EQ(token.size(), tu::wire::kTokenBytes);

  // Every lower rank connects; none says hello until the mesh has accepted them all.
  std::vector<tu::Socket> conns;
  for (int p = 0; p < kMe; ++p) {
    tu::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << "rank " << p;
    timeval tv{20, 0};
    ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    conns.push_back(std::move(s));
  }
  std::this_thread::sleep_for(1500ms);  // the mesh accepts up to 64 per step, a step at least every 100 ms

  int answered = 0;
  std::string firstProblem;
  for (int p = 0; p < kMe; ++p) {
    tu::wire::Hello h{tu::wire::kHelloMagic, p, kSize, 0, 1, 0, {}};
    std::memcpy(h.token, token.data(), sizeof h.token);
    (void)::send(conns[p].fd(), &h, sizeof h, MSG_NOSIGNAL);
  }
  for (int p = 0; p < kMe; ++p) {
    tu::wire::Ack a{};
    size_t got = 0;
    while (got < sizeof a) {
      ssize_t r = ::recv(conns[p].fd(), reinterpret_cast<char*>(&a) + got, sizeof a - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    if (got == sizeof a && a.magic == tu::wire::kHelloMagic && a.rank == kMe &&
        std::string(a.token, tu::wire::kTokenBytes) == tokens[p]) {
      ++answered;
    } else if (firstProblem.empty()) {
      firstProblem = "rank " + std::to_string(p) + ": " +
                     (got == 0 ? std::string("connection closed before the answer (dropped as a stranger)")
                               : "a short or wrong answer (" + std::to_string(got) + " bytes)");
    }
  }
  mesh.join();
  EXPECT_EQ(answered, kMe) << firstProblem;
  EXPECT_EQ(error, "");
  ASSERT_EQ(sockets.size(), static_cast<size_t>(kSize));
  for (int p = 0; p < kMe; ++p) {
    ASSERT_EQ(sockets[p].size(), 1u);
    EXPECT_TRUE(sockets[p][0].valid()) << "rank " << p;
  }
}

}  // namespace
