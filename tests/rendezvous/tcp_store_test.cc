// TcpStoreServer + TcpStore over 127.0.0.1: the Store contract, authentication, bounded input,
// a vanishing server, 1000 concurrent clients, and clients in forked processes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "child_process.h"
#include "rendezvous/secret.h"
#include "rendezvous/refusal_log.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"
#include "rendezvous/tcp_store_request.h"
#include "store_contract.h"

namespace ringfold::rendezvous::testing {
namespace {

const std::string kSecret = "test-secret-0123456789";

std::unique_ptr<TcpStore> connect(int port, const std::string& secret = kSecret,
                                  std::chrono::milliseconds timeout = 5s) {
  return std::make_unique<TcpStore>("127.0.0.1", port, secret, timeout);
}

class TcpBackend : public Backend {
 public:
  TcpBackend() : server_("127.0.0.1", 0, kSecret) {}
  std::shared_ptr<Store> client() override { return connect(server_.port()); }
 private:
  TcpStoreServer server_;
};

INSTANTIATE_TEST_SUITE_P(Tcp, StoreContract,
                         ::testing::Values(BackendFactory{
                             "Tcp", [] { return std::make_unique<TcpBackend>(); }}),
                         [](const auto& info) { return info.param.name; });

// ---- raw sockets speaking (or failing to speak) the protocol --------------------------------

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("raw connect failed");
    }
  }
  ~RawClient() { ::close(fd_); }

  void send(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  // Reads exactly n bytes within the timeout; nullopt on EOF or timeout.
  std::optional<std::vector<uint8_t>> recv(size_t n, std::chrono::milliseconds timeout = 3s) {
    std::vector<uint8_t> out(n);
    size_t done = 0;
    auto deadline = Clock::now() + timeout;
    while (done < n) {
      if (!readable(deadline)) return std::nullopt;
      ssize_t r = ::recv(fd_, out.data() + done, n - done, 0);
      if (r <= 0) return std::nullopt;
      done += static_cast<size_t>(r);
    }
    return out;
  }
  // True if the server closes the connection within the timeout.
  bool closedWithin(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    uint8_t buf[256];
    for (;;) {
      if (!readable(deadline)) return false;
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return true;
    }
  }
  // Completes a correct handshake with `secret`.
  void handshake(const std::string& secret) {
    auto nonce = recv(wire::kNonceBytes);
    ASSERT_TRUE(nonce);
    std::vector<uint8_t> hello(wire::kClientHelloBytes, 7);
    wire::proof(secret, wire::kClientLabel, nonce->data(), hello.data());
    send(hello);
    auto answer = recv(wire::kMacBytes);
    ASSERT_TRUE(answer);
    uint8_t expect[wire::kMacBytes];
    wire::proof(secret, wire::kServerLabel, hello.data() + wire::kMacBytes, expect);
    ASSERT_TRUE(wire::macEqual(expect, answer->data()));
  }

 private:
  bool readable(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) > 0;
  }
  int fd_ = -1;
};

bool waitForCount(const TcpStoreServer& server, int64_t want, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (server.refusedCount() < want && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  return server.refusedCount() >= want;
}

int64_t vmPeakKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmPeak:", 0) == 0) return std::stoll(line.substr(7));
  }
  return -1;
}

TEST(TcpStore, WrongSecretIsRefusedAndCounted) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  try {
    connect(server.port(), "not-the-secret");
    FAIL() << "expected the server to refuse a wrong secret";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
    EXPECT_TRUE(contains(e.what(), "wrong secret")) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(server.port()))) << e.what();
  }
  EXPECT_EQ(server.refusedCount(), 1);
  auto good = connect(server.port());
  good->setString("k", "v");
  EXPECT_EQ(good->getString("k", 1s), "v");
  EXPECT_EQ(server.refusedCount(), 1);
}

TEST(TcpStore, GarbageHandshakeIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  RawClient raw(server.port());
  ASSERT_TRUE(raw.recv(wire::kNonceBytes));
  raw.send(std::vector<uint8_t>(wire::kClientHelloBytes, 0x41));
  EXPECT_TRUE(raw.closedWithin(3s));
  EXPECT_TRUE(waitForCount(server, 1, 3s));
}

TEST(TcpStore, SilentHandshakeTimesOut) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, 300ms);
  RawClient silent(server.port());
  RawClient partial(server.port());
  partial.send({1, 2, 3});  // starts an answer and never finishes it
  auto start = Clock::now();
  EXPECT_TRUE(silent.closedWithin(3s));
  EXPECT_TRUE(partial.closedWithin(3s));
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_TRUE(waitForCount(server, 2, 3s));
  auto good = connect(server.port());  // the server still serves others
  EXPECT_EQ(good->add("n", 1), 1);
}

// Lines of `log` that report refusals, and the connections they account for: one each for a
// line per refusal, N for a summary "refused N more connection(s)".
struct RefusalLines {
  int lines = 0;
  int64_t accounted = 0;
  std::string lastSummary;
};
RefusalLines refusalLines(const std::string& log) {
  RefusalLines r;
  std::istringstream in(log);
  std::string line;
  const std::regex summary(R"(rendezvous store refused (\d+) more connection\(s\))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, summary)) {
      ++r.lines;
      r.accounted += std::stoll(m[1]);
      r.lastSummary = line;
    } else if (contains(line, "rendezvous store refused connection from")) {
      ++r.lines;
      ++r.accounted;
    }
  }
  return r;
}

// A flood of bad connections costs a few log lines, not one each, and the summaries count
// every refusal.
TEST(TcpStore, FloodOfRefusedConnectionsLogsBoundedLinesWithCounts) {
  constexpr int kBad = 600;
  ::testing::internal::CaptureStderr();
  const auto start = Clock::now();
  {
    TcpStoreServer server("127.0.0.1", 0, kSecret, 5s, /*refusalLogInterval=*/300ms);
    for (int i = 0; i < kBad; ++i) {
      RawClient raw(server.port());
      if (i % 2 == 0) raw.send(std::vector<uint8_t>(wire::kClientHelloBytes, 0x41));  // wrong proof
      // odd ones close before completing the handshake
    }
    EXPECT_TRUE(waitForCount(server, kBad, 20s));
    std::this_thread::sleep_for(400ms);  // one summary falls due while the server runs
  }  // the destructor reports what is still pending
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string log = ::testing::internal::GetCapturedStderr();
  RefusalLines r = refusalLines(log);
  // 5 one by one, then at most one summary per 300 ms interval (+1 at the end).
  EXPECT_LE(r.lines, 5 + static_cast<int>(seconds / 0.3) + 2) << log.substr(0, 4000);
  EXPECT_LT(r.lines, 60) << log.substr(0, 4000);
  EXPECT_EQ(r.accounted, kBad) << log.substr(0, 4000);
  EXPECT_TRUE(contains(r.lastSummary, std::to_string(kBad) + " refused in all")) << r.lastSummary;
  EXPECT_TRUE(contains(r.lastSummary, "from 1 address(es)")) << r.lastSummary;
  EXPECT_TRUE(contains(log, "further refusals are counted and summarized every 0.3 s")) << log.substr(0, 2000);
}

TEST(RefusalLog, BurstReturnsOnlyAfterAQuietInterval) {
  using namespace std::chrono;
  RefusalLog log(1s, 2);
  auto t = RefusalLog::Clock::time_point{} + 100s;
  ::testing::internal::CaptureStderr();
  log.refused("1.2.3.4:1", "a", t);
  log.refused("1.2.3.4:2", "b", t);                        // burst used up
  for (int i = 0; i < 10; ++i) log.refused("5.6.7.8:" + std::to_string(i), "c", t + milliseconds(i));
  EXPECT_FALSE(log.flush(t + 500ms) == std::nullopt);      // a summary is pending
  EXPECT_EQ(log.flush(t + 1s), std::nullopt);              // ... and logged when due
  log.refused("1.2.3.4:3", "d", t + 1005ms);               // < 1 s after the last: still counted
  log.flush(t + 2500ms);
  log.refused("1.2.3.4:4", "e", t + 4000ms);               // a quiet interval later: one by one
  const std::string out = ::testing::internal::GetCapturedStderr();
  RefusalLines r = refusalLines(out);
  EXPECT_EQ(r.accounted, 14) << out;
  EXPECT_EQ(r.lines, 5) << out;  // a, b, summary of 10, summary of 1, e
  EXPECT_TRUE(contains(out, "refused 10 more connection(s)")) << out;
  EXPECT_TRUE(contains(out, "from 1 address(es); latest from 5.6.7.8:9: c; 12 refused in all")) << out;
  EXPECT_TRUE(contains(out, "1.2.3.4:4: e")) << out;
  EXPECT_EQ(log.total(), 14);
}

TEST(TcpStore, OversizedLengthIsRejectedBeforeAllocating) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  const int64_t peakBefore = vmPeakKiB();
  {
    RawClient raw(server.port());
    raw.handshake(kSecret);
    std::vector<uint8_t> req = {wire::kSet};
    wire::putU32(req, 3);
    req.insert(req.end(), {'k', 'e', 'y'});
    wire::putU32(req, 1u << 31);  // a 2 GiB value that never comes
    raw.send(req);
    EXPECT_TRUE(raw.closedWithin(3s));
  }
  {
    RawClient raw(server.port());
    raw.handshake(kSecret);
    std::vector<uint8_t> req = {wire::kGet};
    wire::putU32(req, 0xFFFFFFF0u);  // oversized key
    raw.send(req);
    EXPECT_TRUE(raw.closedWithin(3s));
  }
  {
    RawClient raw(server.port());
    raw.handshake(kSecret);
    raw.send({0x77});  // unknown op
    EXPECT_TRUE(raw.closedWithin(3s));
  }
  EXPECT_TRUE(waitForCount(server, 3, 3s));
  // Nothing near 2 GiB was ever reserved (VmPeak counts address space, touched or not).
  if (peakBefore > 0) {
    EXPECT_LT(vmPeakKiB() - peakBefore, 1 << 20);
  }
  auto fresh = connect(server.port());
  fresh->setString("k", "still serving");
  EXPECT_EQ(fresh->getString("k", 1s), "still serving");
}

TEST(TcpStore, DeletePrefixGivesBackTheServersKeysAndBytes) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = connect(server.port());
  EXPECT_EQ(server.keyCount(), 0);
  EXPECT_EQ(server.keyBytes(), 0);
  s->setString("keep", "12345");
  const int64_t baseCount = server.keyCount(), baseBytes = server.keyBytes();
  EXPECT_EQ(baseCount, 1);
  EXPECT_EQ(baseBytes, 4 + 5);
  for (int i = 0; i < 20; ++i) {
    const std::string p = "rf/split/ps" + std::to_string(i) + "/";
    s->setString(p + "addr/0", "10.0.0.1:" + std::to_string(4000 + i));
    s->setString(p + "addr/0", "10.0.0.1:1");  // replaced: counted once, at its new size
    s->add(p + "ready", 1);
    s->add(p + "ready", 1);
  }
  EXPECT_EQ(server.keyCount(), baseCount + 40);
  EXPECT_GT(server.keyBytes(), baseBytes + 40 * 10);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s->deletePrefix("rf/split/ps" + std::to_string(i) + "/"), 2);
  EXPECT_EQ(server.keyCount(), baseCount);
  EXPECT_EQ(server.keyBytes(), baseBytes);
  EXPECT_EQ(s->getString("keep", 1s), "12345");
  EXPECT_EQ(server.authenticatedCount(), s->connectionsOpened());
  EXPECT_EQ(server.refusedCount(), 0);
}

TEST(TcpStore, DeletePrefixInputIsBounded) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = connect(server.port());
  EXPECT_THROW(s->deletePrefix(std::string(wire::kMaxKeyBytes + 1, 'p')), InvalidArgument);  // not sent
  EXPECT_EQ(s->deletePrefix(std::string(wire::kMaxKeyBytes, 'p')), 0);
  {
    RawClient raw(server.port());
    raw.handshake(kSecret);
    std::vector<uint8_t> req = {wire::kDeletePrefix};
    wire::putU32(req, wire::kMaxKeyBytes + 1);  // an oversized prefix whose bytes never come
    raw.send(req);
    EXPECT_TRUE(raw.closedWithin(3s));
  }
  EXPECT_TRUE(waitForCount(server, 1, 3s));
  {
    RawClient raw(server.port());  // a well-formed one over the raw wire: status, u64 count
    raw.handshake(kSecret);
    s->setString("a/1", "x");
    std::vector<uint8_t> req = {wire::kDeletePrefix};
    wire::putField(req, "a/", 2);
    raw.send(req);
    auto answer = raw.recv(9);
    ASSERT_TRUE(answer);
    EXPECT_EQ((*answer)[0], wire::kOk);
    EXPECT_EQ(wire::getU64(answer->data() + 1), 1u);
  }
  s->setString("k", "still serving");
  EXPECT_EQ(s->getString("k", 1s), "still serving");
}

TEST(TcpStore, RequestWhileGetWaitsIsAProtocolViolation) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  RawClient raw(server.port());
  raw.handshake(kSecret);
  std::vector<uint8_t> get = {wire::kGet};
  wire::putField(get, "absent", 6);
  raw.send(get);
  raw.send(get);
  EXPECT_TRUE(raw.closedWithin(3s));
  EXPECT_TRUE(waitForCount(server, 1, 3s));
}

TEST(TcpStore, LargeValuesRoundTrip) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto a = connect(server.port());
  auto b = connect(server.port());
  std::vector<uint8_t> big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  std::thread setter([&] { a->set("big", big); });
  EXPECT_EQ(b->get("big", 5s), big);
  setter.join();
}

TEST(TcpStore, ClientRejectsOversizedInputBeforeSending) {
  setenv("RINGFOLD_STORE_MAX_VALUE_BYTES", "1K", 1);
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = connect(server.port());
  unsetenv("RINGFOLD_STORE_MAX_VALUE_BYTES");
  EXPECT_THROW(s->set("k", std::vector<uint8_t>(2048)), InvalidArgument);
  EXPECT_THROW(s->set(std::string(5000, 'k'), {}), InvalidArgument);
  s->set("k", std::vector<uint8_t>(1024));
  EXPECT_EQ(s->get("k", 1s).size(), 1024u);
  EXPECT_EQ(server.refusedCount(), 0);
}

TEST(TcpStore, OneClientSharedByThreadsDoesNotBlockOnAWaitingGet) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = connect(server.port());
  std::thread waiter([&] { EXPECT_EQ(s->getString("x", 5s), "y"); });
  std::this_thread::sleep_for(50ms);
  auto start = Clock::now();
  s->setString("x", "y");  // must not wait for the get above
  EXPECT_LT(Clock::now() - start, 2s);
  waiter.join();
}

// A get that times out just as the key is set: either outcome is fine, but the connection
// must stay in step (the CANCEL and the late answer must not be confused with later replies).
TEST(TcpStore, GetTimeoutRacingWithSetKeepsTheConnectionInStep) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto getter = connect(server.port());
  auto setter = connect(server.port());
  int got = 0, timedOut = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "race/" + std::to_string(i);
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(500 + (i % 7) * 150));
      setter->setString(key, key);
    });
    try {
      EXPECT_EQ(getter->getString(key, 1ms), key);
      ++got;
    } catch (const TimeoutError&) {
      ++timedOut;
    }
    t.join();
    getter->setString("probe", std::to_string(i));
    ASSERT_EQ(getter->getString("probe", 1s), std::to_string(i));
  }
  EXPECT_EQ(got + timedOut, 200);
  EXPECT_EQ(server.refusedCount(), 0);
}

TEST(TcpStore, ConnectRetriesUntilTheServerStarts) {
  int port;
  { TcpStoreServer probe("127.0.0.1", 0, kSecret); port = probe.port(); }
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, kSecret);
  });
  auto s = connect(port, kSecret, 5s);
  starter.join();
  EXPECT_EQ(s->add("n", 2), 2);
}

TEST(TcpStore, ConnectTimeoutNamesTheAddress) {
  int port;
  { TcpStoreServer probe("127.0.0.1", 0, kSecret); port = probe.port(); }
  auto start = Clock::now();
  try {
    connect(port, kSecret, 300ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s);
}

TEST(TcpStore, VanishedServerIsAnIoError) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  const std::string where = "127.0.0.1:" + std::to_string(server->port());
  auto idle = connect(server->port());
  auto waiting = connect(server->port());
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  try {
    waiting->get("never", 5s);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peerRank(), -1);
    EXPECT_TRUE(contains(e.what(), "rendezvous store at " + where + " closed the connection")) << e.what();
  }
  killer.join();
  EXPECT_THROW(idle->setString("k", "v"), IoError);
}

TEST(TcpStore, ThousandConcurrentClients) {
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 4096) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 8192);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2200) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << lim.rlim_max << " < 2200";

  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kThreads = 50, kPerThread = 20, kClients = kThreads * kPerThread;
  std::atomic<int> connected{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::vector<std::unique_ptr<TcpStore>> clients;
        for (int i = 0; i < kPerThread; ++i) clients.push_back(connect(server.port(), kSecret, 20s));
        connected.fetch_add(kPerThread);
        // Every client is connected before any works: 1000 simultaneous connections.
        auto deadline = Clock::now() + 20s;
        while (connected.load() < kClients && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
        for (int i = 0; i < kPerThread; ++i) {
          int id = t * kPerThread + i;
          clients[i]->setString("client/" + std::to_string(id), std::to_string(id));
          clients[i]->add("total", 1);
        }
        for (int i = 0; i < kPerThread; ++i) {
          int peer = (t * kPerThread + i + 1) % kClients;  // waits on a key another thread sets
          if (clients[i]->getString("client/" + std::to_string(peer), 20s) != std::to_string(peer)) {
            failures.fetch_add(1);
          }
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto check = connect(server.port());
  EXPECT_EQ(check->getString("total", 1s), std::to_string(kClients));
  EXPECT_EQ(server.refusedCount(), 0);
}

TEST(TcpStore, ClientsInForkedProcesses) {
  // Fork before any server thread exists; the child learns the port through a pipe.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t child = forkChild([&] {
    ::close(fds[1]);
    int port = 0;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1 || ::read(fds[0], &port, sizeof port) != sizeof port) return 3;
    TcpStore s("127.0.0.1", port, kSecret, 5s);
    s.setString("from-child", std::to_string(::getpid()));
    s.add("n", 1);
    return s.getString("from-parent", 5s) == "hello" ? 0 : 4;
  });
  ::close(fds[0]);
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  int port = server.port();
  ASSERT_EQ(::write(fds[1], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(fds[1]);
  auto s = connect(port);
  EXPECT_EQ(s->getString("from-child", 5s), std::to_string(child));
  s->setString("from-parent", "hello");
  EXPECT_EQ(waitChild(child, 10s), 0);
  EXPECT_EQ(s->add("n", 1), 2);
}

TEST(TcpStoreRequest, ParsesByteByByteAndRejectsLengthsOnTheirPrefix) {
  std::vector<uint8_t> set = {wire::kSet};
  wire::putField(set, "key", 3);
  wire::putField(set, "value", 5);
  Request req;
  size_t used = 0;
  std::string why;
  for (size_t n = 0; n < set.size(); ++n) {
    ASSERT_EQ(parseRequest(set.data(), n, 1024, req, used, why), Parse::kIncomplete) << n;
  }
  set.push_back(wire::kGet);  // the next request's first byte is not consumed
  ASSERT_EQ(parseRequest(set.data(), set.size(), 1024, req, used, why), Parse::kDone);
  EXPECT_EQ(used, set.size() - 1);
  EXPECT_EQ(req.key, "key");
  EXPECT_EQ(std::string(req.value.begin(), req.value.end()), "value");

  // An oversized value is refused as soon as its 4-byte length is complete.
  std::vector<uint8_t> big = {wire::kSet};
  wire::putField(big, "k", 1);
  wire::putU32(big, 1025);
  EXPECT_EQ(parseRequest(big.data(), big.size() - 1, 1024, req, used, why), Parse::kIncomplete);
  EXPECT_EQ(parseRequest(big.data(), big.size(), 1024, req, used, why), Parse::kBad);
  EXPECT_TRUE(contains(why, "1025")) << why;

  std::vector<uint8_t> key = {wire::kGet};
  wire::putU32(key, wire::kMaxKeyBytes + 1);
  EXPECT_EQ(parseRequest(key.data(), key.size(), 1u << 30, req, used, why), Parse::kBad);

  std::vector<uint8_t> check = {wire::kCheck};
  wire::putU32(check, wire::kMaxCheckKeys + 1);
  EXPECT_EQ(parseRequest(check.data(), check.size(), 1u << 30, req, used, why), Parse::kBad);
  check = {wire::kCheck};
  wire::putU32(check, 3);
  for (int i = 0; i < 3; ++i) wire::putField(check, "abcd", 4);
  EXPECT_EQ(parseRequest(check.data(), check.size(), 8, req, used, why), Parse::kBad);  // 12 > 8
  EXPECT_EQ(parseRequest(check.data(), check.size(), 12, req, used, why), Parse::kDone);
  EXPECT_EQ(req.keys.size(), 3u);

  std::vector<uint8_t> add = {wire::kAdd};
  wire::putField(add, "n", 1);
  wire::putU64(add, static_cast<uint64_t>(-5));
  ASSERT_EQ(parseRequest(add.data(), add.size(), 16, req, used, why), Parse::kDone);
  EXPECT_EQ(req.delta, -5);
  uint8_t unknown = 0;
  EXPECT_EQ(parseRequest(&unknown, 1, 16, req, used, why), Parse::kBad);

  std::vector<uint8_t> del = {wire::kDeletePrefix};
  wire::putField(del, "rf/split/ps1/", 13);
  for (size_t n = 0; n < del.size(); ++n) {
    ASSERT_EQ(parseRequest(del.data(), n, 16, req, used, why), Parse::kIncomplete) << n;
  }
  ASSERT_EQ(parseRequest(del.data(), del.size(), 16, req, used, why), Parse::kDone);
  EXPECT_EQ(used, del.size());
  EXPECT_EQ(req.key, "rf/split/ps1/");
  del = {wire::kDeletePrefix};
  wire::putU32(del, wire::kMaxKeyBytes + 1);
  EXPECT_EQ(parseRequest(del.data(), del.size(), 1u << 30, req, used, why), Parse::kBad);
  EXPECT_TRUE(contains(why, "prefix")) << why;
}

TEST(Secret, GeneratesDistinctHex) {
  std::string a = generateSecret(), b = generateSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(Secret, FromHexInvertsToHexAndRefusesWhatIsNotHex) {
  const std::string bytes("\x00\x01\x7f\x80\xfe\xff", 6);
  const std::string text = toHex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_EQ(text, "00017f80feff");
  EXPECT_EQ(fromHex(text), bytes);
  EXPECT_EQ(fromHex("7F80FE"), std::string("\x7f\x80\xfe", 3));
  EXPECT_EQ(fromHex(""), "");
  EXPECT_THROW(fromHex("abc"), InvalidArgument);
  EXPECT_THROW(fromHex("0g"), InvalidArgument);
}

TEST(TcpStoreServer, RejectsAnEmptySecret) {
  EXPECT_THROW(TcpStoreServer("127.0.0.1", 0, ""), Error);
}

}  // namespace
}  // namespace ringfold::rendezvous::testing
