// transport/tcp_uring/pair.h, the entry point the NCCL net plugin uses: a PairLink over TCP
// sockets connected by hand (loopback, both ends in this thread), and its receives that may be
// larger than their message, both when the receive is posted first and when the message arrived
// first (unexpected, buffered, then copied), large messages striped over several sockets, a
// message larger than its receive (CheckMismatch), and a chunk of a later message that no open
// socket can complete (found by tests/fuzz/tcp_frames_fuzz: the link waited forever).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/tcp_uring/frame.h"
#include "transport/tcp_uring/pair.h"

namespace {

using namespace ringfold::transport::tcp_uring;
using Clock = std::chrono::steady_clock;

// n connected loopback TCP socket pairs: {accepted side, connecting side}.
std::pair<std::vector<Socket>, std::vector<Socket>> tcpPairs(int n) {
  Socket l(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(l.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  EXPECT_EQ(::listen(l.fd(), 16), 0);
  socklen_t len = sizeof(sa);
  EXPECT_EQ(::getsockname(l.fd(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::vector<Socket> a, c;
  for (int i = 0; i < n; ++i) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    EXPECT_EQ(::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    c.push_back(std::move(s));
    a.push_back(Socket(::accept(l.fd(), nullptr, nullptr)));
  }
  return {std::move(a), std::move(c)};
}

// Drives both links until every request is done (or 10 s pass).
bool drive(PairLink& x, PairLink& y, std::vector<TcpRequest*> reqs) {
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < end) {
    bool all = true;
    for (TcpRequest* r : reqs) all = r->test() && all;
    if (all) return true;
    x.progress();
    y.progress();
  }
  return false;
}

std::vector<char> bytes(size_t n, char seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed + i * 13);
  return v;
}

TEST(PairLink, ReceivesLargerThanTheirMessagesPostedFirstOrLast) {
  auto [acc, con] = tcpPairs(2);
  PairLink recv(std::move(acc), 0), send(std::move(con), 1);
  EXPECT_EQ(recv.socketCount(), 2u);
  const std::vector<size_t> sizes = {0, 10, 70000, 3 << 20};  // 3 MiB is striped over both sockets
  // Posted first: receives twice the size.
  std::vector<std::vector<char>> in(sizes.size()), out(sizes.size());
  std::vector<std::unique_ptr<TcpRequest>> reqs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in[i].assign(sizes[i] * 2 + 8, '#');
    reqs.push_back(recv.irecv(in[i].data(), in[i].size(), 100 + i));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i] = bytes(sizes[i], static_cast<char>(i));
    reqs.push_back(send.isend(out[i].data(), out[i].size(), 100 + i));
  }
  std::vector<TcpRequest*> raw;
  for (auto& r : reqs) raw.push_back(r.get());
  ASSERT_TRUE(drive(recv, send, raw));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(reqs[i]->state().length, sizes[i]) << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << i;
    EXPECT_EQ(in[i][sizes[i]], '#') << "wrote past the message " << i;
  }
  // Message first: sent and fully arrived (unexpected, buffered) before the receive is posted.
  std::vector<std::unique_ptr<TcpRequest>> sends;
  for (size_t i = 0; i < sizes.size(); ++i) sends.push_back(send.isend(out[i].data(), out[i].size(), 200 + i));
  raw.clear();
  for (auto& r : sends) raw.push_back(r.get());
  ASSERT_TRUE(drive(recv, send, raw));
  for (int i = 0; i < 200; ++i) recv.progress();
  std::vector<std::unique_ptr<TcpRequest>> recvs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in[i].assign(sizes[i] + 1, '#');
    recvs.push_back(recv.irecv(in[i].data(), in[i].size(), 200 + i));
  }
  raw.clear();
  for (auto& r : recvs) raw.push_back(r.get());
  ASSERT_TRUE(drive(recv, send, raw));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(recvs[i]->state().length, sizes[i]) << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << i;
  }
}

TEST(PairLink, MessageLargerThanItsReceiveFails) {
  auto [acc, con] = tcpPairs(1);
  PairLink recv(std::move(acc), 0), send(std::move(con), 1);
  std::vector<char> in(10), out(11, 'x');
  auto r = recv.irecv(in.data(), in.size(), 1);
  auto s = send.isend(out.data(), out.size(), 1);
  const auto end = Clock::now() + std::chrono::seconds(10);
  bool threw = false;
  while (Clock::now() < end && !threw) {
    try {
      r->test();
    } catch (const ringfold::transport::CheckMismatch&) {
      threw = true;
    }
    send.progress();
  }
  EXPECT_TRUE(threw);
  EXPECT_TRUE(recv.failed());
  EXPECT_NE(recv.error(), nullptr);
}

TEST(PairLink, RejectsBadArguments) {
  EXPECT_THROW(PairLink({}, 0), ringfold::InvalidArgument);
  auto [acc, con] = tcpPairs(1);
  EXPECT_THROW(PairLink(std::move(acc), 2), ringfold::InvalidArgument);
}

// One frame written by hand on `fd`: a header with these fields, then `payload`.
void sendFrame(int fd, FrameType type, uint64_t msgId, uint64_t tag, uint64_t total, uint64_t offset,
               const std::string& payload = "") {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = static_cast<uint8_t>(type);
  h.msgId = msgId;
  h.tag = tag;
  h.total = total;
  h.offset = offset;
  h.length = payload.size();
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
  frame += payload;
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
}

// A DATA frame of message `msgId`: the second half (4 bytes) of an 8-byte message.
void writeChunk(int fd, uint64_t msgId, uint64_t tag) {
  sendFrame(fd, FrameType::kData, msgId, tag, 8, 4, "xxxx");
}

// Drives `link` until it fails (true) or 10 s pass (false).
bool failsSoon(PairLink& link) {
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (!link.failed() && Clock::now() < end) link.progress();
  return link.failed();
}

std::string errorText(const PairLink& link) {
  try {
    std::rethrow_exception(link.error());
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(PairLink, ChunkOfALaterMessageOnTheOnlySocketIsAProtocolError) {
  auto [acc, con] = tcpPairs(1);
  PairLink link(std::move(acc), 0);
  std::vector<char> buf(64);
  auto r = link.irecv(buf.data(), buf.size(), 7);
  writeChunk(con[0].fd(), 5, 7);  // message 5 while message 0 has not begun
  ASSERT_TRUE(failsSoon(link));
  const std::string e = errorText(link);
  EXPECT_NE(e.find("protocol error"), std::string::npos) << e;
  EXPECT_NE(e.find("message 5 before message 0"), std::string::npos) << e;
}

TEST(PairLink, AbortWithoutTextStillSaysSomething) {
  auto [acc, con] = tcpPairs(1);
  PairLink link(std::move(acc), 0);
  sendFrame(con[0].fd(), FrameType::kAbort, 0, 0, 0, 0);
  ASSERT_TRUE(failsSoon(link));
  const std::string e = errorText(link);
  EXPECT_NE(e.find("rank 1 aborted the job without giving a reason"), std::string::npos) << e;
}

TEST(PairLink, AbortTextIsMadePrintable) {
  auto [acc, con] = tcpPairs(1);
  PairLink link(std::move(acc), 0);
  sendFrame(con[0].fd(), FrameType::kAbort, 0, 0, 0, 0, std::string("\0oops\x01", 6));
  ASSERT_TRUE(failsSoon(link));
  const std::string e = errorText(link);
  EXPECT_NE(e.find("\\x00oops\\x01"), std::string::npos) << e;
}

TEST(PairLink, UnexpectedMessageLargerThanMemoryFailsTheLinkNotTheProcess) {
  auto [acc, con] = tcpPairs(1);
  PairLink link(std::move(acc), 0);
  // Tag 3 has no receive posted, so the message would be buffered; 2^63 bytes: more than any host has.
  sendFrame(con[0].fd(), FrameType::kData, 0, 3, uint64_t{1} << 63, 0);
  ASSERT_TRUE(failsSoon(link));
  const std::string e = errorText(link);
  EXPECT_NE(e.find("no memory to hold it"), std::string::npos) << e;
  EXPECT_NE(e.find("9223372036854775808 bytes"), std::string::npos) << e;
}

TEST(PairLink, LaterChunkClaimingAnotherTotalIsAProtocolError) {
  auto [acc, con] = tcpPairs(1);
  PairLink link(std::move(acc), 0);
  std::vector<char> buf(64);
  auto r = link.irecv(buf.data(), buf.size(), 7);
  writeChunk(con[0].fd(), 0, 7);  // message 0: 8 bytes, its second half
  // The same message, now "1 TiB", with a chunk far past the 64 bytes.
  sendFrame(con[0].fd(), FrameType::kData, 0, 7, uint64_t{1} << 40, 1 << 20, "abcd");
  ASSERT_TRUE(failsSoon(link));
  const std::string e = errorText(link);
  EXPECT_NE(e.find("its first chunk said 8 bytes"), std::string::npos) << e;
}

TEST(PairLink, StalledSocketLeftAloneWhenTheOtherClosesFailsTheLink) {
  auto [acc, con] = tcpPairs(2);
  PairLink link(std::move(acc), 0);
  std::vector<char> buf(64);
  auto r = link.irecv(buf.data(), buf.size(), 7);
  // Message 1's chunk reaches one socket; message 0's header would come on the other, which
  // closes instead. Which accepted socket the link reads as which does not matter: try both.
  writeChunk(con[1].fd(), 1, 7);
  const auto settle = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < settle) link.progress();
  ASSERT_FALSE(link.failed()) << errorText(link);
  con[0].reset();
  ASSERT_TRUE(failsSoon(link)) << "the link waited on a socket no header can reach any more";
}

}  // namespace
