// TcpStore: the client side of the protocol described in tcp_store.h.
//
// Every socket is non-blocking and every wait is a poll() with a deadline, so no call can hang
// past its timeout: get() uses the caller's timeout, the handshake kHandshakeWait, and the other
// calls RINGFOLD_TIMEOUT (a store that stops answering is an IoError, not a hang).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/deadline.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"

namespace ringfold::rendezvous {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kHandshakeWait{10000};
constexpr milliseconds kCancelWait{10000};
constexpr uint32_t kMaxErrorMessage = 65536;

std::string shortKey(const std::string& key) {
  return key.size() <= 80 ? key : key.substr(0, 77) + "...";
}

int remainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30)));
}

// poll() for `events` until the deadline; false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remainingMs(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) RF_CHECK_ERRNO(-1, "poll on the rendezvous store socket");
  }
}

}  // namespace

struct TcpStore::Impl {
  std::string host;
  int port = 0;
  std::string secret;
  milliseconds connectTimeout{0};
  milliseconds opTimeout{0};
  uint32_t maxValue = wire::maxValueBytes();
  std::mutex mu;
  std::vector<int> idle;  // authenticated connections not in use
  bool everConnected = false;
  std::atomic<int64_t> opened{0};  // connections authenticated so far

  ~Impl() {
    for (int fd : idle) ::close(fd);
  }

  std::string where() const { return host + ":" + std::to_string(port); }

  [[noreturn]] void throwClosed(const std::string& detail = "") const {
    throw IoError(-1, "rendezvous store at " + where() + " closed the connection" +
                          (detail.empty() ? "" : " (" + detail + ")"));
  }

  [[noreturn]] void throwSilent(const char* doing, milliseconds waited) const {
    throw IoError(-1, "rendezvous store at " + where() + " did not " + doing + " within " +
                          std::to_string(waited.count()) + " ms");
  }

  void sendAll(int fd, const std::vector<uint8_t>& bytes, Clock::time_point deadline,
               milliseconds budget) const {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!waitFor(fd, POLLOUT, deadline)) throwSilent("accept the request", budget);
        continue;
      }
      throwClosed(std::strerror(errno));
    }
  }

  void recvAll(int fd, void* out, size_t size, Clock::time_point deadline,
               milliseconds budget) const {
    auto* p = static_cast<uint8_t*>(out);
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::recv(fd, p + done, size - done, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) throwClosed();
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!waitFor(fd, POLLIN, deadline)) throwSilent("answer", budget);
        continue;
      }
      throwClosed(std::strerror(errno));
    }
  }

  // Opens one TCP connection, or returns -1 and sets lastError.
  int tryConnect(Clock::time_point deadline, std::string& lastError, bool& refused) const {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      lastError = std::string("cannot resolve host: ") + gai_strerror(rc);
      return -1;
    }
    int result = -1;
    for (addrinfo* ai = res; ai != nullptr && result < 0; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        lastError = std::strerror(errno);
        continue;
      }
      int err = 0;
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          auto attemptDeadline = std::min(deadline, Clock::now() + std::chrono::seconds(2));
          if (!waitFor(fd, POLLOUT, attemptDeadline)) {
            err = ETIMEDOUT;
          } else {
            socklen_t len = sizeof err;
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          }
        }
      }
      if (err == 0) {
        result = fd;
      } else {
        lastError = std::strerror(err);
        refused = refused || err == ECONNREFUSED;
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    return result;
  }

  // Thrown by handshake() when the connection closed before the server's greeting: a ringfold
  // store always greets first (it refuses a wrong secret only after the client's hello), so this
  // is a store that is shutting down (a re-init racing the previous incarnation's store on the
  // same port) or not yet serving: worth another attempt, not a verdict about the secret.
  struct NoGreeting {
    std::string reason;
  };
  // Thrown by handshake() when the store closed the connection after the client's hello without
  // answering (a wrong secret gets wire::kRefusal first): a store shutting down in the middle
  // of the handshake, as when a re-init races the previous incarnation's store on the same
  // port. connect() retries for kClosedAfterHelloGrace before giving up on it.
  struct ClosedAfterHello {
    std::string reason;
  };
  static constexpr auto kClosedAfterHelloGrace = std::chrono::seconds(3);

  [[noreturn]] void throwClosedInHandshake(const std::string& reason) const {
    RF_THROW(Error, "rendezvous store at ", where(),
             " closed the connection during the handshake, again for ",
             std::chrono::duration_cast<milliseconds>(kClosedAfterHelloGrace).count(),
             " ms: not a ringfold store, or one that keeps shutting down [", reason, "]");
  }

  [[noreturn]] void throwWrongSecret(const std::string& reason) const {
    RF_THROW(Error, "rendezvous store at ", where(),
             " refused: wrong secret (RINGFOLD_SECRET must be the same on every rank) or not a "
             "ringfold store [", reason, "]");
  }

  // Proves the secret to the server and checks the server's proof.
  void handshake(int fd) const {
    const auto deadline = Clock::now() + kHandshakeWait;
    uint8_t serverNonce[wire::kNonceBytes];
    uint8_t hello[wire::kClientHelloBytes];
    uint8_t answer[wire::kMacBytes];
    uint8_t expect[wire::kMacBytes];
    try {
      recvAll(fd, serverNonce, sizeof serverNonce, deadline, kHandshakeWait);
    } catch (const IoError& e) {
      throw NoGreeting{e.what()};
    }
    try {
      wire::proof(secret, wire::kClientLabel, serverNonce, hello);
      wire::randomBytes(hello + wire::kMacBytes, wire::kNonceBytes);
      sendAll(fd, std::vector<uint8_t>(hello, hello + sizeof hello), deadline, kHandshakeWait);
      recvAll(fd, answer, sizeof answer, deadline, kHandshakeWait);
    } catch (const IoError& e) {
      throw ClosedAfterHello{e.what()};
    }
    if (std::memcmp(answer, wire::kRefusal, sizeof answer) == 0) {
      throwWrongSecret("the store says the proof of the secret is wrong");
    }
    wire::proof(secret, wire::kServerLabel, hello + wire::kMacBytes, expect);
    if (!wire::macEqual(expect, answer)) {
      RF_THROW(Error, "rendezvous store at ", where(),
               " refused: it could not prove it holds the secret (wrong secret, or another "
               "service listens on that port)");
    }
  }

  int connect(milliseconds timeout) {
    const auto deadline = deadlineAfter(timeout);
    auto backoff = milliseconds(10);
    std::string lastError = "timed out";
    std::optional<Clock::time_point> firstClosedAfterHello;
    std::string closedAfterHelloReason;
    for (;;) {
      bool refused = false;
      int fd = tryConnect(deadline, lastError, refused);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        try {
          handshake(fd);
          everConnected = true;
          opened.fetch_add(1);
          return fd;
        } catch (const NoGreeting& e) {
          ::close(fd);
          lastError = "the store closed the connection before greeting (" + e.reason + ")";
          if (everConnected) throwClosed("reconnect: " + lastError);
        } catch (const ClosedAfterHello& e) {
          ::close(fd);
          if (!firstClosedAfterHello) firstClosedAfterHello = Clock::now();
          closedAfterHelloReason = e.reason;
          if (everConnected || Clock::now() - *firstClosedAfterHello >= kClosedAfterHelloGrace ||
              Clock::now() >= deadline) {
            throwClosedInHandshake(e.reason);
          }
        } catch (...) {
          ::close(fd);
          throw;
        }
      }
      // A store we reached before and that now refuses connections has gone away.
      if (everConnected && refused) throwClosed("reconnect: " + lastError);
      auto now = Clock::now();
      if (now >= deadline && firstClosedAfterHello) throwClosedInHandshake(closedAfterHelloReason);
      if (now >= deadline) {
        RF_THROW(TimeoutError, "could not connect to the rendezvous store at ", where(), " within ",
                 timeout.count(), " ms: ", lastError);
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, milliseconds(250));
    }
  }

  // A borrowed connection: returned to the pool only if its exchange completed in sync.
  struct Lease {
    Impl& impl;
    int fd;
    bool ok = false;
    ~Lease() {
      if (ok) {
        std::lock_guard<std::mutex> lock(impl.mu);
        impl.idle.push_back(fd);
      } else {
        ::close(fd);
      }
    }
  };

  Lease borrow() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        int fd = idle.back();
        idle.pop_back();
        return Lease{*this, fd};
      }
    }
    return Lease{*this, connect(connectTimeout)};
  }

  void checkKey(const std::string& key) const {
    if (key.size() > wire::kMaxKeyBytes) {
      RF_THROW(InvalidArgument, "store key '", shortKey(key), "' is ", key.size(),
               " bytes, over the limit of ", wire::kMaxKeyBytes);
    }
  }

  // Reads the status byte; on ERROR reads the message and throws it (the connection stays in
  // sync, so the lease is marked ok first).
  uint8_t readStatus(Lease& lease, Clock::time_point deadline, milliseconds budget) const {
    uint8_t status = 0;
    recvAll(lease.fd, &status, 1, deadline, budget);
    if (status == wire::kError) {
      std::vector<uint8_t> msg = readField(lease.fd, kMaxErrorMessage, deadline, budget);
      lease.ok = true;
      // Found by tests/fuzz/store_client_fuzz: the text was passed on as it came, so an empty
      // or binary answer made an error without words.
      throw InvalidArgument("rendezvous store at " + where() + " refused the request: " +
                            detail::printable(std::string_view(reinterpret_cast<const char*>(msg.data()), msg.size()),
                                              "(no reason given)"));
    }
    if (status != wire::kOk && status != wire::kCancelled) {
      throwClosed("unexpected status byte " + std::to_string(status));
    }
    return status;
  }

  // One request on a pooled connection within opTimeout: sends `req`, reads the status, then
  // `replyBytes` bytes of answer into `reply` (set, add, check, deletePrefix).
  void request(const std::vector<uint8_t>& req, void* reply, size_t replyBytes) {
    auto lease = borrow();
    const auto budget = opTimeout;
    const auto deadline = Clock::now() + budget;
    sendAll(lease.fd, req, deadline, budget);
    readStatus(lease, deadline, budget);
    if (replyBytes > 0) recvAll(lease.fd, reply, replyBytes, deadline, budget);
    lease.ok = true;
  }

  std::vector<uint8_t> readField(int fd, uint32_t limit, Clock::time_point deadline,
                                 milliseconds budget) const {
    uint8_t lenBytes[4];
    recvAll(fd, lenBytes, 4, deadline, budget);
    uint32_t len = wire::getU32(lenBytes);
    if (len > limit) {
      throw IoError(-1, "rendezvous store at " + where() + " sent a length of " +
                            std::to_string(len) + " bytes, over the limit of " +
                            std::to_string(limit));
    }
    std::vector<uint8_t> out(len);
    recvAll(fd, out.data(), len, deadline, budget);
    return out;
  }
};

TcpStore::TcpStore(const std::string& host, int port, std::string secret,
                   std::chrono::milliseconds connectTimeout)
    : impl_(std::make_unique<Impl>()) {
  RF_ENFORCE(!secret.empty(), "the rendezvous store needs a non-empty secret (RINGFOLD_SECRET)");
  RF_ENFORCE(port > 0 && port <= 65535, "store port ", port, " is out of range");
  impl_->host = host;
  impl_->port = port;
  impl_->secret = std::move(secret);
  impl_->connectTimeout = connectTimeout;
  impl_->opTimeout = params::kTimeout.asSeconds();
  impl_->idle.push_back(impl_->connect(connectTimeout));
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  impl_->checkKey(key);
  if (value.size() > impl_->maxValue) {
    RF_THROW(InvalidArgument, "value for store key '", shortKey(key), "' is ", value.size(),
             " bytes, over ", params::kStoreMaxValueBytes.name, "=", impl_->maxValue);
  }
  std::vector<uint8_t> req;
  req.reserve(9 + key.size() + value.size());
  req.push_back(wire::kSet);
  wire::putField(req, key.data(), key.size());
  wire::putField(req, value.data(), value.size());
  impl_->request(req, nullptr, 0);
}

std::vector<uint8_t> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  impl_->checkKey(key);
  std::vector<uint8_t> req;
  req.push_back(wire::kGet);
  wire::putField(req, key.data(), key.size());
  auto lease = impl_->borrow();
  const auto budget = impl_->opTimeout;
  const auto waitDeadline = deadlineAfter(timeout);
  impl_->sendAll(lease.fd, req, Clock::now() + budget, budget);
  // The server answers when the key exists; the timeout is ours to enforce.
  if (waitFor(lease.fd, POLLIN, waitDeadline)) {
    const auto deadline = Clock::now() + budget;
    uint8_t status = impl_->readStatus(lease, deadline, budget);
    if (status != wire::kOk) impl_->throwClosed("unexpected CANCELLED answer");
    auto value = impl_->readField(lease.fd, impl_->maxValue, deadline, budget);
    lease.ok = true;
    return value;
  }
  // Timed out: withdraw the GET so the connection stays usable. The server answers with
  // CANCELLED, or with the value if a set raced with the cancel.
  const auto deadline = Clock::now() + kCancelWait;
  impl_->sendAll(lease.fd, std::vector<uint8_t>{wire::kCancel}, deadline, kCancelWait);
  uint8_t status = impl_->readStatus(lease, deadline, kCancelWait);
  if (status == wire::kOk) {
    auto value = impl_->readField(lease.fd, impl_->maxValue, deadline, kCancelWait);
    lease.ok = true;
    return value;
  }
  lease.ok = true;
  RF_THROW(TimeoutError, "store key '", shortKey(key), "' not set within ", timeout.count(),
           " ms (rendezvous store at ", impl_->where(), ")");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  impl_->checkKey(key);
  std::vector<uint8_t> req;
  req.push_back(wire::kAdd);
  wire::putField(req, key.data(), key.size());
  wire::putU64(req, static_cast<uint64_t>(delta));
  uint8_t value[8];
  impl_->request(req, value, sizeof value);
  return static_cast<int64_t>(wire::getU64(value));
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  RF_ENFORCE(keys.size() <= wire::kMaxCheckKeys, "check() of ", keys.size(),
             " keys exceeds the limit of ", wire::kMaxCheckKeys);
  std::vector<uint8_t> req;
  req.push_back(wire::kCheck);
  wire::putU32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    impl_->checkKey(k);
    wire::putField(req, k.data(), k.size());
  }
  uint8_t all = 0;
  impl_->request(req, &all, 1);
  return all != 0;
}

int64_t TcpStore::deletePrefix(const std::string& prefix) {
  impl_->checkKey(prefix);
  std::vector<uint8_t> req;
  req.push_back(wire::kDeletePrefix);
  wire::putField(req, prefix.data(), prefix.size());
  uint8_t removed[8];
  impl_->request(req, removed, sizeof removed);
  return static_cast<int64_t>(wire::getU64(removed));
}

std::string TcpStore::describe() const { return "the rendezvous store at " + impl_->where(); }

int64_t TcpStore::connectionsOpened() const { return impl_->opened.load(); }

}  // namespace ringfold::rendezvous
