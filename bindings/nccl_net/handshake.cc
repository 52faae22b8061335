// Listener and Connector (handshake.h).
#include "bindings/nccl_net/handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace ringfold::ncclnet {

namespace {

bool sameSecret(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

std::string addressText(uint32_t addressNet, uint16_t portNet) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = addressNet;
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return detail::concat(text, ":", ntohs(portNet));
}

bool wouldBlock(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

}  // namespace

void randomBytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      RF_THROW(Error, "getrandom failed: ", std::strerror(errno));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

bool validHandle(const Handle& h, std::string* why) {
  if (h.magic != kHandleMagic) {
    if (why) *why = "not a ringfold handle (wrong magic)";
    return false;
  }
  if (h.version != 2) {
    if (why) *why = detail::concat("handle version ", h.version, " (this plugin speaks 2)");
    return false;
  }
  if (h.carrier != static_cast<uint16_t>(Carrier::kTcp) && h.carrier != static_cast<uint16_t>(Carrier::kRdma)) {
    if (why) *why = detail::concat("handle names carrier ", h.carrier, " (0: tcp, 1: rdma)");
    return false;
  }
  if (h.sockets < 1 || h.sockets > kMaxSockets) {
    if (why) *why = detail::concat("handle asks for ", h.sockets, " sockets (1 to ", kMaxSockets, ")");
    return false;
  }
  if (h.port == 0) {
    if (why) *why = "handle has port 0";
    return false;
  }
  return true;
}

void setBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  RF_CHECK_ERRNO(flags, "fcntl(F_GETFL)");
  RF_CHECK_ERRNO(fcntl(fd, F_SETFL, flags & ~O_NONBLOCK), "fcntl(F_SETFL)");
}

// ---- Listener ------------------------------------------------------------------------------

Listener::Listener(const std::string& address, int sockets, std::chrono::milliseconds timeout, Carrier carrier)
    : timeout_(timeout) {
  RF_ENFORCE(sockets >= 1 && sockets <= kMaxSockets, "sockets per connection: ", sockets, " (1 to ", kMaxSockets, ")");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  RF_ENFORCE(inet_pton(AF_INET, address.c_str(), &sa.sin_addr) == 1, "not an IPv4 address: '", address, "'");
  listen_ = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  RF_CHECK_ERRNO(listen_.fd(), "socket");
  RF_CHECK_ERRNO(::bind(listen_.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), "bind to ", address);
  RF_CHECK_ERRNO(::listen(listen_.fd(), 128), "listen on ", address);
  socklen_t len = sizeof(sa);
  RF_CHECK_ERRNO(::getsockname(listen_.fd(), reinterpret_cast<sockaddr*>(&sa), &len), "getsockname");
  handle_.magic = kHandleMagic;
  handle_.version = 2;
  handle_.sockets = static_cast<uint16_t>(sockets);
  handle_.carrier = static_cast<uint16_t>(carrier);
  handle_.address = sa.sin_addr.s_addr;
  handle_.port = sa.sin_port;
  randomBytes(handle_.secret, kSecretBytes);
  slots_.resize(static_cast<size_t>(sockets));
}

void Listener::check(Pending& p) {
  const Hello& h = p.hello;
  const char* why = nullptr;
  if (h.magic != kHelloMagic) {
    why = "bad magic";
  } else if (!sameSecret(h.secret, handle_.secret)) {
    why = "wrong secret";
  } else if (h.sockets != handle_.sockets || h.index >= handle_.sockets) {
    why = "bad socket index or count";
  } else if (nonceSet_ && h.nonce != nonce_) {
    why = "another connect's socket";
  } else if (slots_[h.index].valid()) {
    why = "duplicate socket index";
  }
  if (why != nullptr) {
    RF_LOG(kWarning) << "NCCL net plugin: dropped a connection to " << addressText(handle_.address, handle_.port)
                     << ": " << why;
    p.sock.reset();
    return;
  }
  Ack ack{kAckMagic, h.index, 0, h.nonce};
  // 16 bytes on a fresh socket whose peer sends nothing more until it has them: they fit.
  ssize_t n = ::send(p.sock.fd(), &ack, sizeof(ack), MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(sizeof(ack))) {
    RF_LOG(kWarning) << "NCCL net plugin: could not acknowledge a connection: "
                     << (n < 0 ? std::strerror(errno) : "short send");
    p.sock.reset();
    return;
  }
  nonce_ = h.nonce;
  nonceSet_ = true;
  slots_[h.index] = std::move(p.sock);
  ++filled_;
}

std::optional<std::vector<Socket>> Listener::poll() {
  RF_ENFORCE(!done_, "accept() after the connection was made");
  const Clock::time_point now = Clock::now();
  if (!deadline_) deadline_ = now + timeout_;
  for (;;) {
    int fd = ::accept4(listen_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (wouldBlock(errno) || errno == ECONNABORTED) break;
      throw IoError(
          -1, detail::concat("accept on ", addressText(handle_.address, handle_.port), ": ", std::strerror(errno)));
    }
    pending_.push_back(Pending{Socket(fd), {}, 0, now});
  }
  for (Pending& p : pending_) {
    while (p.sock.valid() && p.got < sizeof(Hello)) {
      ssize_t n = ::recv(p.sock.fd(), reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, 0);
      if (n > 0) {
        p.got += static_cast<size_t>(n);
      } else if (n < 0 && wouldBlock(errno)) {
        if (now - p.since > timeout_) p.sock.reset();  // silent stranger
        break;
      } else {
        p.sock.reset();  // closed or failed before its hello
      }
    }
    if (p.sock.valid() && p.got == sizeof(Hello)) check(p);
  }
  std::erase_if(pending_, [](const Pending& p) { return !p.sock.valid(); });
  if (filled_ == static_cast<int>(slots_.size())) {
    done_ = true;
    pending_.clear();
    for (Socket& s : slots_) setBlocking(s.fd());
    return std::move(slots_);
  }
  if (now > *deadline_) {
    throw IoError(
        -1, detail::concat("no sender connected to ", addressText(handle_.address, handle_.port), " within ",
                           timeout_.count() / 1000.0, " s (", filled_, " of ", slots_.size(), " sockets arrived)"));
  }
  return std::nullopt;
}

// ---- Connector -----------------------------------------------------------------------------

Connector::Connector(const Handle& handle, std::chrono::milliseconds timeout)
    : handle_(handle), deadline_(Clock::now() + timeout) {
  std::string why;
  if (!validHandle(handle, &why)) RF_THROW(InvalidArgument, "NCCL net plugin: bad connect handle: ", why);
  hello_.magic = kHelloMagic;
  hello_.sockets = handle.sockets;
  randomBytes(&hello_.nonce, sizeof(hello_.nonce));
  std::memcpy(hello_.secret, handle.secret, kSecretBytes);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = handle.address;
  sa.sin_port = handle.port;
  conns_.resize(handle.sockets);
  for (Conn& c : conns_) {
    c.sock = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    RF_CHECK_ERRNO(c.sock.fd(), "socket");
    int one = 1;
    ::setsockopt(c.sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(c.sock.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0 && errno != EINPROGRESS) {
      throw IoError(-1, detail::concat("connect to ", peer(), ": ", std::strerror(errno)));
    }
  }
}

std::string Connector::peer() const { return addressText(handle_.address, handle_.port); }

std::optional<std::vector<Socket>> Connector::poll() {
  RF_ENFORCE(!done_, "connect() after the connection was made");
  bool all = true;
  for (size_t i = 0; i < conns_.size(); ++i) {
    Conn& c = conns_[i];
    if (c.stage == Stage::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      RF_CHECK_ERRNO(::getsockopt(c.sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len), "getsockopt(SO_ERROR)");
      if (err != 0) throw IoError(-1, detail::concat("connect to ", peer(), ": ", std::strerror(err)));
      sockaddr_in sa{};
      len = sizeof(sa);
      if (::getpeername(c.sock.fd(), reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
        c.stage = Stage::kHello;
      } else if (errno != ENOTCONN) {
        throw IoError(-1, detail::concat("connect to ", peer(), ": ", std::strerror(errno)));
      }
    }
    if (c.stage == Stage::kHello) {
      Hello h = hello_;
      h.index = static_cast<uint16_t>(i);
      while (c.sent < sizeof(h)) {
        ssize_t n = ::send(c.sock.fd(), reinterpret_cast<char*>(&h) + c.sent, sizeof(h) - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
          c.sent += static_cast<size_t>(n);
        } else if (n < 0 && wouldBlock(errno)) {
          break;
        } else {
          throw IoError(-1, detail::concat("handshake with ", peer(), ": ", std::strerror(errno)));
        }
      }
      if (c.sent == sizeof(h)) c.stage = Stage::kAck;
    }
    if (c.stage == Stage::kAck) {
      while (c.got < sizeof(Ack)) {
        ssize_t n = ::recv(c.sock.fd(), reinterpret_cast<char*>(&c.ack) + c.got, sizeof(Ack) - c.got, 0);
        if (n > 0) {
          c.got += static_cast<size_t>(n);
        } else if (n < 0 && wouldBlock(errno)) {
          break;
        } else {
          throw IoError(-1, detail::concat("the listener at ", peer(), " closed the connection during the handshake",
                                           n < 0 ? detail::concat(" (", std::strerror(errno), ")") : std::string(),
                                           ": a stale or wrong handle (secret), or the receiver went away"));
        }
      }
      if (c.got == sizeof(Ack)) {
        if (c.ack.magic != kAckMagic || c.ack.index != i || c.ack.nonce != hello_.nonce) {
          throw IoError(-1, detail::concat("bad handshake answer from ", peer()));
        }
        c.stage = Stage::kDone;
      }
    }
    all = all && c.stage == Stage::kDone;
  }
  if (all) {
    done_ = true;
    std::vector<Socket> out;
    for (Conn& c : conns_) {
      setBlocking(c.sock.fd());
      out.push_back(std::move(c.sock));
    }
    return out;
  }
  if (Clock::now() > deadline_) throw IoError(-1, detail::concat("no connection to ", peer(), " (timed out)"));
  return std::nullopt;
}

}  // namespace ringfold::ncclnet
