// Interface selection of the tcp_uring backend, on made-up interface lists (no network used),
// and the options of its data sockets.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>

#include "common/error.h"
#include "transport/tcp_uring/interfaces.h"
#include "transport/tcp_uring/mesh.h"
#include "transport/tcp_uring/socket.h"

namespace ringfold::transport::tcp_uring {
namespace {

constexpr uint32_t ip(unsigned a, unsigned b, unsigned c, unsigned d) { return (a << 24) | (b << 16) | (c << 8) | d; }

std::vector<Interface> host() {
  return {
      {"lo", ip(127, 0, 0, 1), ip(255, 0, 0, 0), true, true},
      {"docker0", ip(172, 17, 0, 1), ip(255, 255, 0, 0), true, false},
      {"eth0", ip(10, 1, 2, 3), ip(255, 255, 255, 0), true, false},
      {"eth1", ip(192, 168, 7, 9), ip(255, 255, 255, 0), false, false},
      {"eth10", ip(10, 9, 9, 9), ip(255, 255, 0, 0), true, false},
      {"ib0", ip(10, 50, 0, 4), ip(255, 255, 0, 0), true, false},
  };
}

TEST(IfnameSpec, PrefixExactAndExclude) {
  EXPECT_TRUE(ifnameSelected("eth", "eth0"));
  EXPECT_TRUE(ifnameSelected("eth", "eth10"));
  EXPECT_FALSE(ifnameSelected("eth", "ib0"));
  EXPECT_TRUE(ifnameSelected("=eth1", "eth1"));
  EXPECT_FALSE(ifnameSelected("=eth1", "eth10"));
  EXPECT_TRUE(ifnameSelected("ib,eth0", "ib0"));
  EXPECT_TRUE(ifnameSelected("ib,eth0", "eth0"));
  EXPECT_FALSE(ifnameSelected("ib,eth0", "docker0"));
  EXPECT_FALSE(ifnameSelected("^docker,lo", "docker0"));
  EXPECT_FALSE(ifnameSelected("^docker,lo", "lo"));
  EXPECT_TRUE(ifnameSelected("^docker,lo", "eth0"));
  EXPECT_TRUE(ifnameSelected("^=eth", "eth0"));
  EXPECT_FALSE(ifnameSelected("^=eth0", "eth0"));
}

TEST(ChooseListenAddress, SpecPicksTheFirstMatchThatIsUp) {
  EXPECT_EQ(chooseListenAddress("eth", 0, host()), "10.1.2.3");
  EXPECT_EQ(chooseListenAddress("=eth10", 0, host()), "10.9.9.9");
  EXPECT_EQ(chooseListenAddress("ib", 0, host()), "10.50.0.4");
  EXPECT_EQ(chooseListenAddress("^lo,docker,eth", 0, host()), "10.50.0.4");
  EXPECT_EQ(chooseListenAddress("lo", ip(10, 1, 2, 200), host()), "127.0.0.1");  // the spec wins
  EXPECT_THROW(chooseListenAddress("=eth1", 0, host()), InvalidArgument);     // down
  EXPECT_THROW(chooseListenAddress("wlan", 0, host()), InvalidArgument);
}

TEST(ChooseListenAddress, DefaultFollowsTheStoreAddress) {
  EXPECT_EQ(chooseListenAddress("", 0, host()), "127.0.0.1");                    // no store address
  EXPECT_EQ(chooseListenAddress("", ip(127, 0, 0, 1), host()), "127.0.0.1");     // store on loopback
  EXPECT_EQ(chooseListenAddress("", ip(10, 1, 2, 200), host()), "10.1.2.3");     // eth0's subnet
  EXPECT_EQ(chooseListenAddress("", ip(10, 9, 200, 1), host()), "10.9.9.9");     // eth10's subnet
  EXPECT_EQ(chooseListenAddress("", ip(10, 50, 3, 3), host()), "10.50.0.4");     // ib0's subnet
  EXPECT_EQ(chooseListenAddress("", ip(8, 8, 8, 8), host()), "172.17.0.1");      // first non-loopback up
  std::vector<Interface> onlyLo = {host()[0]};
  EXPECT_EQ(chooseListenAddress("", ip(8, 8, 8, 8), onlyLo), "127.0.0.1");
}

TEST(ListInterfaces, HasLoopback) {
  bool lo = false;
  for (const Interface& i : listInterfaces()) lo = lo || (i.loopback && i.address == ip(127, 0, 0, 1));
  EXPECT_TRUE(lo);
}

// A Unix socket gets a 4 MiB send buffer (the kernel caps the request at net.core.wmem_max and
// doubles it) and none of TCP's options, which it would refuse.
TEST(DataSocketOptions, UnixSocketGetsALargeSendBufferOnly) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Socket a(fds[0]), b(fds[1]);
  EXPECT_TRUE(isUnixSocket(a.fd()));
  ASSERT_NO_THROW(setDataSocketOptions(a.fd(), std::chrono::milliseconds(5000), 0));
  uint64_t cap = 0;
  std::ifstream("/proc/sys/net/core/wmem_max") >> cap;
  ASSERT_GT(cap, 0u);
  int got = 0;
  socklen_t len = sizeof(got);
  ASSERT_EQ(getsockopt(a.fd(), SOL_SOCKET, SO_SNDBUF, &got, &len), 0);
  EXPECT_EQ(static_cast<uint64_t>(got), 2 * std::min<uint64_t>(kUnixSendBufferBytes, cap));
  ASSERT_NO_THROW(setDataSocketOptions(b.fd(), std::chrono::milliseconds(5000), 64 << 10));
  ASSERT_EQ(getsockopt(b.fd(), SOL_SOCKET, SO_SNDBUF, &got, &len), 0);
  EXPECT_EQ(static_cast<uint64_t>(got), 2 * std::min<uint64_t>(64 << 10, cap));
}

// Over loopback, TCP gets fixed 4 MiB buffers only when the kernel's maxima allow them: a capped
// fixed size would be worse than autotuning.
TEST(DataSocketOptions, LoopbackTcpBufferBytesNeedsBothMaxima) {
  constexpr uint64_t M = 1u << 20;
  EXPECT_EQ(loopbackTcpBufferBytes(4 * M, 4 * M), kLoopbackTcpBufferBytes);
  EXPECT_EQ(loopbackTcpBufferBytes(32 * M, 8 * M), kLoopbackTcpBufferBytes);
  EXPECT_EQ(loopbackTcpBufferBytes(212992, 4 * M), 0u);  // Debian's default rmem_max
  EXPECT_EQ(loopbackTcpBufferBytes(4 * M, 212992), 0u);
}

// A connected loopback TCP pair: the accepted and the connecting socket.
std::pair<Socket, Socket> loopbackTcpPair() {
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listener.fd(), 1) != 0 ||
      getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return {};
  }
  Socket client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(client.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return {};
  Socket server(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  return {std::move(server), std::move(client)};
}

int bufferOf(int fd, int option) {
  int got = 0;
  socklen_t len = sizeof(got);
  return getsockopt(fd, SOL_SOCKET, option, &got, &len) == 0 ? got : -1;
}

TEST(DataSocketOptions, LoopbackTcpGetsFixedBuffersWhereTheKernelAllows) {
  auto [server, client] = loopbackTcpPair();
  ASSERT_TRUE(server.valid() && client.valid());
  uint64_t rmem = 0, wmem = 0;
  std::ifstream("/proc/sys/net/core/rmem_max") >> rmem;
  std::ifstream("/proc/sys/net/core/wmem_max") >> wmem;
  const int rcvBefore = bufferOf(server.fd(), SO_RCVBUF), sndBefore = bufferOf(server.fd(), SO_SNDBUF);
  ASSERT_NO_THROW(setDataSocketOptions(server.fd(), std::chrono::milliseconds(5000), 0));
  if (loopbackTcpBufferBytes(rmem, wmem) > 0) {
    // The kernel doubles what it is asked for (bookkeeping overhead).
    EXPECT_EQ(bufferOf(server.fd(), SO_RCVBUF), static_cast<int>(2 * kLoopbackTcpBufferBytes));
    EXPECT_EQ(bufferOf(server.fd(), SO_SNDBUF), static_cast<int>(2 * kLoopbackTcpBufferBytes));
  } else {
    EXPECT_EQ(bufferOf(server.fd(), SO_RCVBUF), rcvBefore) << "rmem_max " << rmem << " wmem_max " << wmem;
    EXPECT_EQ(bufferOf(server.fd(), SO_SNDBUF), sndBefore);
  }
  // An explicit RINGFOLD_SOCKET_BUFFER_BYTES wins.
  ASSERT_NO_THROW(setDataSocketOptions(client.fd(), std::chrono::milliseconds(5000), 64 << 10));
  EXPECT_EQ(bufferOf(client.fd(), SO_RCVBUF), 2 * std::min<int>(64 << 10, static_cast<int>(rmem)));
}

}  // namespace
}  // namespace ringfold::transport::tcp_uring
