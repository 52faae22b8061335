// TcpStoreServer: one thread, epoll over non-blocking sockets, one small state machine per
// connection:
//
//   kHandshake --(valid client proof)--> kReady <--(value / CANCEL)--> kParked (GET waiting)
//
// Vocabulary: `in` holds bytes read but not yet parsed; `out` holds bytes not yet written.
// A connection reads only while `out` is empty (back-pressure: a client that does not read
// its answers stops being read), and parses one request at a time. A GET on a missing key parks
// the connection under waiters_[key]; set/add of that key answers it (a DELETE_PREFIX leaves it
// parked). Lengths are checked as
// soon as their prefix arrives, before the body is buffered, so `in` never grows past one
// bounded request plus one read chunk.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/refusal_log.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"
#include "rendezvous/tcp_store_request.h"

namespace ringfold::rendezvous {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr int kBacklog = 4096;         // the kernel clamps it to net.core.somaxconn
constexpr size_t kReadChunk = 65536;
constexpr int kReadsPerEvent = 16;     // fairness: at most 1 MiB per connection per wakeup

std::string numericHost(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, host, sizeof host);
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, host, sizeof host);
  }
  return host;
}

int portOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

std::string peerName(const sockaddr_storage& addr) {
  const std::string port = ":" + std::to_string(portOf(addr));
  if (addr.ss_family == AF_INET) return numericHost(addr) + port;
  return "[" + numericHost(addr) + "]" + port;
}

}  // namespace

struct TcpStoreServer::Impl {
  enum class State { kHandshake, kReady, kParked };
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    std::string peer;
    State state = State::kHandshake;
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t outPos = 0;
    uint32_t events = 0;
    bool dead = false;
    uint8_t nonce[wire::kNonceBytes];
    std::string parkedKey;
  };

  std::string secret;
  std::chrono::milliseconds handshakeTimeout;
  uint32_t maxValue = wire::maxValueBytes();
  int listenFd = -1;
  int epollFd = -1;
  int wakeFd = -1;
  int port = 0;
  std::string address;  // numeric, as bound ("0.0.0.0": every interface)
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> authenticated{0};
  std::atomic<int64_t> keyCount{0};   // data.size(), readable from other threads
  std::atomic<int64_t> keyBytes{0};   // the bytes of data's keys and values
  std::atomic<bool> stop{false};
  std::thread thread;

  // Owned by the server thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t nextId = 2;
  std::deque<std::pair<Clock::time_point, uint64_t>> handshakeDeadlines;
  std::unordered_map<std::string, std::vector<uint8_t>> data;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;
  std::vector<uint64_t> toClose;
  std::deque<uint64_t> toProcess;
  std::optional<Clock::time_point> acceptPausedUntil;
  std::unique_ptr<RefusalLog> refusalLog;
  std::optional<Clock::time_point> refusalSummaryDue;

  ~Impl() {
    for (auto& [id, c] : conns) ::close(c->fd);
    if (listenFd >= 0) ::close(listenFd);
    if (wakeFd >= 0) ::close(wakeFd);
    if (epollFd >= 0) ::close(epollFd);
  }

  void listenOn(const std::string& bindAddr, int wantPort) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(wantPort);
    const char* node = (bindAddr.empty() || bindAddr == "0.0.0.0") ? nullptr : bindAddr.c_str();
    if (node == nullptr) hints.ai_family = AF_INET;
    int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
    if (rc != 0) {
      RF_THROW(InvalidArgument, "rendezvous store cannot resolve bind address '", bindAddr,
               "': ", gai_strerror(rc));
    }
    std::string lastError = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        lastError = std::strerror(errno);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, kBacklog) == 0) {
        listenFd = fd;
        break;
      }
      lastError = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (listenFd < 0) {
      RF_THROW(Error, "rendezvous store cannot listen on ", bindAddr.empty() ? "*" : bindAddr, ":",
               wantPort, ": ", lastError);
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    RF_CHECK_ERRNO(::getsockname(listenFd, reinterpret_cast<sockaddr*>(&addr), &len));
    port = portOf(addr);
    address = numericHost(addr);
  }

  void setup() {
    epollFd = ::epoll_create1(EPOLL_CLOEXEC);
    RF_CHECK_ERRNO(epollFd, "epoll_create1");
    wakeFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    RF_CHECK_ERRNO(wakeFd, "eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeId;
    RF_CHECK_ERRNO(::epoll_ctl(epollFd, EPOLL_CTL_ADD, wakeFd, &ev));
    ev.data.u64 = kListenId;
    RF_CHECK_ERRNO(::epoll_ctl(epollFd, EPOLL_CTL_ADD, listenFd, &ev));
  }

  // ---- connection bookkeeping ------------------------------------------------------------

  Conn* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }

  void markDead(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    toClose.push_back(c.id);
  }

  // Counts and logs the refusal (rate-limited: refusal_log.h), sends `farewell` if any (best
  // effort: nothing else is queued on a connection refused in its handshake), then drops the
  // connection.
  void refuse(Conn& c, const std::string& why, const uint8_t* farewell = nullptr, size_t farewellBytes = 0) {
    if (c.dead) return;
    refused.fetch_add(1);
    refusalLog->refused(c.peer, why, Clock::now());
    if (farewell) {
      ssize_t ignored = ::send(c.fd, farewell, farewellBytes, MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)ignored;
    }
    markDead(c);
  }

  void unpark(Conn& c) {
    auto it = waiters.find(c.parkedKey);
    if (it != waiters.end()) {
      std::erase(it->second, c.id);
      if (it->second.empty()) waiters.erase(it);
    }
    c.parkedKey.clear();
    c.state = State::kReady;
  }

  void closeDead() {
    for (uint64_t id : toClose) {
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      if (c.state == State::kParked) unpark(c);
      ::epoll_ctl(epollFd, EPOLL_CTL_DEL, c.fd, nullptr);
      ::close(c.fd);
      conns.erase(it);
    }
    toClose.clear();
  }

  void setEvents(Conn& c) {
    uint32_t want = c.outPos < c.out.size() ? EPOLLOUT : EPOLLIN;
    if (want == c.events || c.dead) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c.id;
    if (::epoll_ctl(epollFd, EPOLL_CTL_MOD, c.fd, &ev) != 0) {
      RF_LOG(kWarning) << "rendezvous store: epoll_ctl failed for " << c.peer << ": "
                       << std::strerror(errno);
      markDead(c);
      return;
    }
    c.events = want;
  }

  // Writes what it can of `out`; switches the connection to EPOLLOUT while bytes remain.
  void flush(Conn& c) {
    while (c.outPos < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.outPos, c.out.size() - c.outPos, MSG_NOSIGNAL);
      if (n > 0) {
        c.outPos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      RF_LOG(kDebug) << "rendezvous store: write to " << c.peer << " failed: " << std::strerror(errno);
      markDead(c);
      return;
    }
    if (c.outPos == c.out.size()) {
      c.out.clear();
      c.outPos = 0;
    }
    setEvents(c);
  }

  // ---- accept --------------------------------------------------------------------------

  void pauseAccept(Clock::time_point until) {
    epoll_event ev{};
    ev.data.u64 = kListenId;
    ::epoll_ctl(epollFd, EPOLL_CTL_MOD, listenFd, &ev);
    acceptPausedUntil = until;
  }

  void resumeAcceptIfDue(Clock::time_point now) {
    if (!acceptPausedUntil || now < *acceptPausedUntil) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    ::epoll_ctl(epollFd, EPOLL_CTL_MOD, listenFd, &ev);
    acceptPausedUntil.reset();
  }

  void acceptAll() {
    for (int i = 0; i < 1024; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors or memory: stop accepting briefly instead of spinning.
        RF_LOG(kWarning) << "rendezvous store cannot accept: " << std::strerror(errno)
                         << "; pausing new connections for 100 ms";
        pauseAccept(Clock::now() + std::chrono::milliseconds(100));
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->id = nextId++;
      c->peer = peerName(addr);
      try {
        wire::randomBytes(c->nonce, sizeof c->nonce);
      } catch (const std::exception& e) {
        RF_LOG(kError) << "rendezvous store: " << e.what();
        ::close(fd);
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = c->id;
      if (::epoll_ctl(epollFd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        RF_LOG(kWarning) << "rendezvous store: epoll_ctl failed: " << std::strerror(errno);
        ::close(fd);
        continue;
      }
      c->events = EPOLLIN;
      Conn& ref = *c;
      conns.emplace(ref.id, std::move(c));
      handshakeDeadlines.emplace_back(Clock::now() + handshakeTimeout, ref.id);
      ref.out.assign(ref.nonce, ref.nonce + sizeof ref.nonce);
      flush(ref);
    }
  }

  // ---- requests ------------------------------------------------------------------------

  void reply(Conn& c, uint8_t status) { c.out.push_back(status); }

  void sendValue(Conn& c, const std::vector<uint8_t>& v) {
    reply(c, wire::kOk);
    wire::putField(c.out, v.data(), v.size());
  }

  // Answers every connection parked on `key`.
  void wake(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    waiters.erase(it);
    const std::vector<uint8_t>& v = data[key];
    for (uint64_t id : ids) {
      Conn* w = find(id);
      if (w == nullptr || w->state != State::kParked || w->parkedKey != key) continue;
      w->parkedKey.clear();
      w->state = State::kReady;
      sendValue(*w, v);
      flush(*w);
      if (!w->in.empty()) toProcess.push_back(id);
    }
  }

  // Stores `value` under `key`, keeping keyCount and keyBytes.
  void put(const std::string& key, std::vector<uint8_t> value) {
    auto [it, fresh] = data.try_emplace(key);
    if (fresh) {
      keyCount.fetch_add(1);
      keyBytes.fetch_add(static_cast<int64_t>(key.size()));
    }
    keyBytes.fetch_add(static_cast<int64_t>(value.size()) - static_cast<int64_t>(it->second.size()));
    it->second = std::move(value);
  }

  // Removes every key that begins with `prefix`; parked GETs stay parked (waiters is keyed by
  // name and untouched). One pass over the map: deletes are rare (a process set's end).
  int64_t erasePrefix(const std::string& prefix) {
    int64_t removed = 0, bytes = 0;
    for (auto it = data.begin(); it != data.end();) {
      if (it->first.starts_with(prefix)) {
        bytes += static_cast<int64_t>(it->first.size() + it->second.size());
        it = data.erase(it);
        ++removed;
      } else {
        ++it;
      }
    }
    keyCount.fetch_sub(removed);
    keyBytes.fetch_sub(bytes);
    return removed;
  }

  void handle(Conn& c, Request& req) {
    switch (req.op) {
      case wire::kSet:
        put(req.key, std::move(req.value));
        reply(c, wire::kOk);
        wake(req.key);
        break;
      case wire::kGet: {
        auto it = data.find(req.key);
        if (it != data.end()) {
          sendValue(c, it->second);
        } else {
          c.state = State::kParked;
          c.parkedKey = req.key;
          waiters[req.key].push_back(c.id);
        }
        break;
      }
      case wire::kAdd: {
        int64_t value = 0;
        auto it = data.find(req.key);
        if (it != data.end()) {
          std::string text(it->second.begin(), it->second.end());
          try {
            value = params::parseInt(text, "store counter '" + req.key + "'");
          } catch (const std::exception& e) {
            reply(c, wire::kError);
            std::string msg = e.what();
            wire::putField(c.out, msg.data(), msg.size());
            break;
          }
        }
        value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(req.delta));
        std::string text = std::to_string(value);
        put(req.key, std::vector<uint8_t>(text.begin(), text.end()));
        reply(c, wire::kOk);
        wire::putU64(c.out, static_cast<uint64_t>(value));
        wake(req.key);
        break;
      }
      case wire::kCheck: {
        bool all = true;
        for (const auto& k : req.keys) all = all && data.count(k) > 0;
        reply(c, wire::kOk);
        c.out.push_back(all ? 1 : 0);
        break;
      }
      case wire::kCancel:
        break;  // the GET it cancels was already answered
      case wire::kDeletePrefix: {
        const int64_t removed = erasePrefix(req.key);
        reply(c, wire::kOk);
        wire::putU64(c.out, static_cast<uint64_t>(removed));
        break;
      }
    }
  }

  bool finishHandshake(Conn& c) {
    if (c.in.size() < wire::kClientHelloBytes) return false;
    uint8_t expect[wire::kMacBytes];
    wire::proof(secret, wire::kClientLabel, c.nonce, expect);
    if (!wire::macEqual(expect, c.in.data())) {
      // Say so before closing (wire::kRefusal), so the client reports a wrong secret at once
      // instead of taking the close for a store that is shutting down.
      refuse(c, "wrong secret (handshake HMAC mismatch)", wire::kRefusal, sizeof wire::kRefusal);
      return false;
    }
    uint8_t answer[wire::kMacBytes];
    wire::proof(secret, wire::kServerLabel, c.in.data() + wire::kMacBytes, answer);
    c.out.insert(c.out.end(), answer, answer + sizeof answer);
    c.in.erase(c.in.begin(), c.in.begin() + wire::kClientHelloBytes);
    c.state = State::kReady;
    authenticated.fetch_add(1);
    return true;
  }

  // Parses and serves buffered requests while the connection may take another one.
  void process(Conn& c) {
    for (;;) {
      if (c.dead) return;
      bool progressed = false;
      if (c.state == State::kHandshake) {
        if (!finishHandshake(c)) return;
        progressed = true;
      }
      size_t start = 0;
      while (!c.dead && c.out.empty() && start < c.in.size()) {
        if (c.state == State::kParked) {
          if (c.in[start] != wire::kCancel) {
            refuse(c, "sent a request while its GET was waiting (protocol violation)");
            return;
          }
          ++start;
          unpark(c);
          reply(c, wire::kCancelled);
          progressed = true;
          continue;
        }
        Request req;
        size_t used = 0;
        std::string why;
        Parse r = parseRequest(c.in.data() + start, c.in.size() - start, maxValue, req, used, why);
        if (r == Parse::kBad) {
          refuse(c, why);
          return;
        }
        if (r == Parse::kIncomplete) break;
        start += used;
        handle(c, req);
        progressed = true;
      }
      if (c.dead) return;
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(start));
      flush(c);
      // Loop again only if the answer went out at once and more requests are buffered.
      if (c.dead || !progressed || !c.out.empty() || c.in.empty()) return;
    }
  }

  void onReadable(Conn& c) {
    uint8_t buf[kReadChunk];
    for (int i = 0; i < kReadsPerEvent; ++i) {
      ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        process(c);
        if (c.dead || !c.out.empty()) return;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (c.state == State::kHandshake) {
        refuse(c, n == 0 ? "closed the connection before completing the handshake"
                         : std::string("handshake failed: ") + std::strerror(errno));
      } else {
        RF_LOG(kDebug) << "rendezvous store: " << c.peer << " disconnected";
        markDead(c);
      }
      return;
    }
  }

  void onEvent(uint64_t id, uint32_t events) {
    Conn* c = find(id);
    if (c == nullptr) return;
    if (events & EPOLLOUT) {
      flush(*c);
      if (!c->dead && c->out.empty() && !c->in.empty()) process(*c);
    }
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->dead) {
      if (c->events & EPOLLIN) {
        onReadable(*c);
      } else if (events & (EPOLLHUP | EPOLLERR)) {
        markDead(*c);  // the peer went away while we still had bytes for it
      }
    }
  }

  void expireHandshakes(Clock::time_point now) {
    while (!handshakeDeadlines.empty() && handshakeDeadlines.front().first <= now) {
      uint64_t id = handshakeDeadlines.front().second;
      handshakeDeadlines.pop_front();
      Conn* c = find(id);
      if (c != nullptr && c->state == State::kHandshake) {
        refuse(*c, "did not complete the handshake within " +
                       std::to_string(handshakeTimeout.count()) + " ms");
      }
    }
  }

  int waitMillis(Clock::time_point now) const {
    std::optional<Clock::time_point> next;
    if (!handshakeDeadlines.empty()) next = handshakeDeadlines.front().first;
    if (acceptPausedUntil && (!next || *acceptPausedUntil < *next)) next = acceptPausedUntil;
    if (refusalSummaryDue && (!next || *refusalSummaryDue < *next)) next = refusalSummaryDue;
    if (!next) return -1;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
    return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 60000)));
  }

  void run() {
    epoll_event events[256];
    while (!stop.load()) {
      int n = ::epoll_wait(epollFd, events, 256, waitMillis(Clock::now()));
      if (n < 0 && errno != EINTR) {
        RF_LOG(kError) << "rendezvous store: epoll_wait failed: " << std::strerror(errno);
        return;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) continue;
        if (id == kListenId) {
          try {
            acceptAll();
          } catch (const std::exception& e) {  // e.g. out of memory: keep serving the others
            RF_LOG(kWarning) << "rendezvous store: accept failed: " << e.what();
          }
          continue;
        }
        try {
          onEvent(id, events[i].events);
        } catch (const std::exception& e) {
          Conn* c = find(id);
          RF_LOG(kWarning) << "rendezvous store: dropping " << (c ? c->peer : "a connection")
                           << ": " << e.what();
          if (c) markDead(*c);
        }
      }
      while (!toProcess.empty()) {
        Conn* c = find(toProcess.front());
        toProcess.pop_front();
        if (c != nullptr && c->out.empty()) process(*c);
      }
      auto now = Clock::now();
      expireHandshakes(now);
      refusalSummaryDue = refusalLog->flush(now);
      resumeAcceptIfDue(now);
      closeDead();
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& bindAddr, int port, std::string secret,
                               std::chrono::milliseconds handshakeTimeout,
                               std::chrono::milliseconds refusalLogInterval)
    : impl_(std::make_unique<Impl>()) {
  RF_ENFORCE(!secret.empty(), "the rendezvous store needs a non-empty secret (RINGFOLD_SECRET)");
  RF_ENFORCE(port >= 0 && port <= 65535, "store port ", port, " is out of range");
  impl_->secret = std::move(secret);
  impl_->handshakeTimeout = handshakeTimeout;
  impl_->refusalLog = std::make_unique<RefusalLog>(refusalLogInterval);
  impl_->listenOn(bindAddr, port);
  impl_->setup();
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  RF_LOG(kInfo) << "rendezvous store listening on " << impl_->address << ":" << impl_->port;
}

TcpStoreServer::~TcpStoreServer() { stop(); }

void TcpStoreServer::stop() {
  if (impl_->stop.exchange(true)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wakeFd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->refusalLog->finish();  // the refusals not reported yet
}

int TcpStoreServer::port() const { return impl_->port; }

const std::string& TcpStoreServer::address() const { return impl_->address; }

int64_t TcpStoreServer::refusedCount() const { return impl_->refused.load(); }

int64_t TcpStoreServer::authenticatedCount() const { return impl_->authenticated.load(); }

int64_t TcpStoreServer::keyCount() const { return impl_->keyCount.load(); }

int64_t TcpStoreServer::keyBytes() const { return impl_->keyBytes.load(); }

}  // namespace ringfold::rendezvous
