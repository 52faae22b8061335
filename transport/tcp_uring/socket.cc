#include "transport/tcp_uring/socket.h"

#include "rendezvous/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/secret.h"
#include "rendezvous/store.h"

namespace ringfold::transport::tcp_uring {

using Clock = std::chrono::steady_clock;

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---- interface selection --------------------------------------------------------------

std::vector<Interface> listInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    Interface itf;
    itf.name = i->ifa_name;
    itf.address = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if (i->ifa_netmask != nullptr) {
      itf.netmask = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    }
    itf.up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
    itf.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

bool ifnameSelected(const std::string& specIn, const std::string& name) {
  std::string spec = specIn;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool matched = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : name.compare(0, item.size(), item) == 0) matched = true;
  }
  return exclude ? !matched : matched;
}

namespace {

std::string dotted(uint32_t hostOrder) {
  in_addr a{htonl(hostOrder)};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

bool isLoopback(uint32_t hostOrder) { return (hostOrder >> 24) == 127; }

}  // namespace

int autoSocketsPerPeer(const std::string& listenAddress) {
  in_addr a{};
  if (inet_pton(AF_INET, listenAddress.c_str(), &a) == 1 && isLoopback(ntohl(a.s_addr))) return 1;
  return 2;
}

std::string chooseListenAddress(const std::string& spec, uint32_t storeAddress,
                                const std::vector<Interface>& interfaces) {
  if (!spec.empty()) {
    for (const Interface& i : interfaces) {
      if (i.up && ifnameSelected(spec, i.name)) return dotted(i.address);
    }
    std::string names;
    for (const Interface& i : interfaces) names += (names.empty() ? "" : ", ") + i.name + (i.up ? "" : " (down)");
    RF_THROW(InvalidArgument, params::kSocketIfname.name, "='", spec,
             "' selects no IPv4 interface that is up; this host has: ", names);
  }
  if (storeAddress == 0 || isLoopback(storeAddress)) return "127.0.0.1";
  for (const Interface& i : interfaces) {
    if (i.up && !i.loopback && i.netmask != 0 && (i.address & i.netmask) == (storeAddress & i.netmask)) {
      return dotted(i.address);
    }
  }
  for (const Interface& i : interfaces) {
    if (i.up && !i.loopback) return dotted(i.address);
  }
  return "127.0.0.1";
}

std::string listenAddressFromEnvironment() {
  uint32_t store = 0;
  std::string host = params::kStoreAddr.str();
  if (host.empty()) {
    // The store host the bootstrap derives (e.g. Slurm's first node): listen on the interface
    // that reaches it, not on loopback.
    try {
      host = rendezvous::bootstrapFromEnvironment().storeAddr;
    } catch (const Error&) {
      host.clear();  // a bad environment is reported by the bootstrap itself
    }
  }
  if (!host.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
      store = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
      freeaddrinfo(res);
    } else {
      RF_LOG(kWarning) << params::kStoreAddr.name << "='" << host
                       << "' does not resolve to IPv4; choosing the first interface that is up";
      store = 0xffffffffu;  // not loopback, matches no subnet
    }
  }
  return chooseListenAddress(params::kSocketIfname.str(), store, listInterfaces());
}

// ---- same-host identity ---------------------------------------------------------------

std::string hostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!(in >> boot) || boot.empty()) return "";
  struct stat netns {};
  if (::stat("/proc/self/ns/net", &netns) != 0) return "";
  return detail::concat(boot, ".", static_cast<unsigned long long>(netns.st_dev), ":",
                        static_cast<unsigned long long>(netns.st_ino));
}

bool isUnixSocket(int fd) {
  int domain = 0;
  socklen_t len = sizeof(domain);
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

// ---- socket options ---------------------------------------------------------------------

uint64_t loopbackTcpBufferBytes(uint64_t rmemMax, uint64_t wmemMax) {
  return rmemMax >= kLoopbackTcpBufferBytes && wmemMax >= kLoopbackTcpBufferBytes ? kLoopbackTcpBufferBytes : 0;
}

namespace {

uint64_t sysctlBytes(const char* path) {
  uint64_t v = 0;
  std::ifstream in(path);
  in >> v;
  return v;
}

bool peerIsLoopback(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

void setDataSocketOptions(int fd, std::chrono::milliseconds timeout, uint64_t bufferBytes) {
  // A Unix stream's send buffer bounds what is queued at the receiver (its receive buffer is not
  // used), and the default (net.core.wmem_default, 208 KiB) makes the sender wait several times
  // per 512 KiB segment. TCP autotunes both unless told a size, except over loopback (see
  // loopbackTcpBufferBytes).
  const bool unixSocket = isUnixSocket(fd);
  uint64_t want = bufferBytes;
  if (want == 0 && unixSocket) want = kUnixSendBufferBytes;
  if (want == 0 && peerIsLoopback(fd)) {
    want = loopbackTcpBufferBytes(sysctlBytes("/proc/sys/net/core/rmem_max"), sysctlBytes("/proc/sys/net/core/wmem_max"));
  }
  if (want > 0) {
    int b = static_cast<int>(std::min<uint64_t>(want, 1u << 30));
    RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b)), "SO_SNDBUF");
    if (!unixSocket) RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b)), "SO_RCVBUF");
  }
  if (unixSocket) return;
  int one = 1;
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "TCP_NODELAY");
  long long ms = std::max<long long>(timeout.count(), 1000);
  unsigned userTimeout = static_cast<unsigned>(std::min<long long>(ms, 0x7fffffff));
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, sizeof(userTimeout)),
                 "TCP_USER_TIMEOUT");
  int idle = static_cast<int>(std::clamp<long long>(ms / 2000, 1, 32767));
  int interval = static_cast<int>(std::clamp<long long>(ms / 6000, 1, 32767));
  int count = 3;
  RF_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), "SO_KEEPALIVE");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)), "TCP_KEEPIDLE");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)), "TCP_KEEPINTVL");
  RF_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)), "TCP_KEEPCNT");
}

// ---- mesh -------------------------------------------------------------------------------

namespace {

using wire::Ack;
using wire::Hello;
using wire::kHelloMagic;
using wire::kTokenBytes;

// Tokens are rendezvous::generateSecret() strings: kTokenBytes hex characters, sent as they are.
bool sameToken(const char* a, const std::string& b) {
  unsigned char diff = 0;  // constant time
  for (size_t i = 0; i < kTokenBytes; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  RF_CHECK_ERRNO(flags, "fcntl(F_GETFL)");
  RF_CHECK_ERRNO(fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)), "fcntl(F_SETFL)");
}

// A peer's published "ip:port token host unix-name" ("-" for an unknown host or no Unix socket).
struct PeerAddress {
  sockaddr_in address{};
  std::string token;
  std::string host;      // empty: unknown
  std::string unixName;  // empty: none
};

PeerAddress parseAddress(const std::string& text, int peer) {
  std::istringstream in(text);
  std::string endpoint, token, host, unixName, extra;
  in >> endpoint >> token >> host >> unixName;
  auto colon = endpoint.rfind(':');
  PeerAddress a;
  a.address.sin_family = AF_INET;
  if (unixName.empty() || (in >> extra) || colon == std::string::npos || token.size() != kTokenBytes ||
      inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.address.sin_addr) != 1) {
    throw IoError(peer, detail::concat("rank ", peer, " published a malformed address '", text,
                                       "' (expected 'ip:port token host unix-name'; ranks of different ringfold "
                                       "versions?)"));
  }
  a.address.sin_port = htons(static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  a.token = token;
  if (host != "-") a.host = host;
  if (unixName != "-") a.unixName = unixName;
  return a;
}

// The abstract-namespace address for `name` (a leading NUL byte: no file, gone with the socket).
socklen_t abstractAddress(const std::string& name, sockaddr_un& a) {
  a = {};
  a.sun_family = AF_UNIX;
  RF_ENFORCE(name.size() + 1 <= sizeof(a.sun_path), "Unix socket name '", name, "' is too long");
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// One socket being set up: connecting (ours) or accepted (theirs).
struct Pending {
  enum State { kConnecting, kReadAck, kReadHello };
  Pending(State st, Socket s, int p, int i) : state(st), sock(std::move(s)), peer(p), index(i) {}
  State state;
  Socket sock;
  int peer = -1;    // -1 until an accepted socket's hello names it
  int index = 0;
  unsigned char buf[sizeof(Hello)] = {};
  size_t got = 0;
  Clock::time_point retryAt{};  // a refused connect is retried after this
};

long long msLeft(Clock::time_point deadline) {
  return std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

class Mesh {
 public:
  Mesh(rendezvous::Store& store, const MeshOptions& o)
      : store_(store), o_(o), token_(rendezvous::generateSecret()), unixFailed_(o.size, false) {
    RF_ENFORCE_EQ(token_.size(), kTokenBytes, "mesh token length");
    result_.resize(o.size);
    // A lower rank that turns out to reach us by a Unix socket sends one (see onHello).
    for (int p = 0; p < o.size; ++p) {
      if (p != o.rank) result_[p].resize(o.socketsPerPeer);
    }
  }

  std::vector<std::vector<Socket>> run() {
    deadline_ = Clock::now() + o_.timeout;
    listen();
    for (int peer = o_.rank + 1; peer < o_.size; ++peer) {
      std::string key = o_.prefix + "/addr/" + std::to_string(peer);
      std::string text;
      try {
        text = store_.getString(key, std::chrono::milliseconds(msLeft(deadline_)));
      } catch (const TimeoutError&) {
        throw IoError(peer, detail::concat("rank ", peer, " did not publish its address ('", key, "') within ",
                                           o_.timeout.count() / 1000.0,
                                           " s: it did not start, or failed before connecting (",
                                           params::kStartTimeout.name, ")"));
      }
      addresses_.emplace_back(peer, parseAddress(text, peer));
      // One Unix socket is enough: several sockets help spread TCP flows over a link's queues
      // and paths, and between two processes of one kernel there are none.
      const int count = viaUnix(peer, addresses_.back().second) ? 1 : o_.socketsPerPeer;
      result_[peer].resize(count);
      for (int i = 0; i < count; ++i) startConnect(peer, i);
    }
    while (missing() > 0) step();
    for (auto& row : result_) {
      for (Socket& s : row) setNonBlocking(s.fd(), false);
    }
    return std::move(result_);
  }

 private:
  void listen() {
    listenUnix();
    listener_ = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    RF_CHECK_ERRNO(listener_.fd(), "socket()");
    int one = 1;
    setsockopt(listener_.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, o_.listenAddress.c_str(), &a.sin_addr) != 1) {
      RF_THROW(InvalidArgument, "listen address '", o_.listenAddress, "' is not an IPv4 address");
    }
    RF_CHECK_ERRNO(::bind(listener_.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), "bind(", o_.listenAddress, ")");
    RF_CHECK_ERRNO(::listen(listener_.fd(), SOMAXCONN), "listen()");
    socklen_t len = sizeof(a);
    RF_CHECK_ERRNO(getsockname(listener_.fd(), reinterpret_cast<sockaddr*>(&a), &len), "getsockname()");
    std::string addr = o_.listenAddress + ":" + std::to_string(ntohs(a.sin_port));
    const bool unixListening = unixListener_.valid();
    store_.setString(o_.prefix + "/addr/" + std::to_string(o_.rank),
                     detail::concat(addr, " ", token_, " ", unixListening ? o_.hostId : "-", " ",
                                    unixListening ? unixName_ : "-"));
    RF_LOG(kDebug) << "rank " << o_.rank << " listening on " << addr
                   << (unixListening ? " and on Unix socket @" + unixName_ : std::string());
  }

  // The Unix-domain listener for same-host peers; none when the local transport is tcp, the
  // host identity is unknown, or the socket cannot be made (then every peer uses TCP).
  void listenUnix() {
    if (!o_.localUnix || o_.hostId.empty()) return;
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    // The name is random and separate from the token: abstract names are listed in /proc/net/unix.
    std::string name = "ringfold-" + rendezvous::generateSecret().substr(0, 32);
    sockaddr_un a;
    socklen_t len = abstractAddress(name, a);
    if (!s.valid() || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s.fd(), SOMAXCONN) != 0) {
      RF_LOG(kWarning) << "no Unix socket for same-host peers (" << std::strerror(errno) << "); they use TCP";
      return;
    }
    unixListener_ = std::move(s);
    unixName_ = std::move(name);
  }

  // Whether to reach `peer` through its Unix socket: both ends listen on one and share a host,
  // and connecting to it has not failed.
  bool viaUnix(int peer, const PeerAddress& a) const {
    return unixListener_.valid() && !a.unixName.empty() && a.host == o_.hostId && !unixFailed_[peer];
  }

  const PeerAddress& addressOf(int peer) const {
    for (auto& [p, a] : addresses_) {
      if (p == peer) return a;
    }
    throw IoError(peer, "no address");
  }

  // The token of a lower rank that connected to us (it published before connecting).
  const std::string& tokenOf(int lower) {
    for (auto& [p, a] : addresses_) {
      if (p == lower) return a.token;
    }
    std::string key = o_.prefix + "/addr/" + std::to_string(lower);
    addresses_.emplace_back(lower, parseAddress(store_.getString(key, std::chrono::milliseconds(msLeft(deadline_))), lower));
    return addresses_.back().second.token;
  }

  void startConnect(int peer, int index) {
    const PeerAddress& to = addressOf(peer);
    const bool local = viaUnix(peer, to);
    Pending p(Pending::kConnecting, Socket(::socket(local ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)),
              peer, index);
    RF_CHECK_ERRNO(p.sock.fd(), "socket()");
    int r;
    if (local) {
      sockaddr_un a;
      socklen_t len = abstractAddress(to.unixName, a);
      r = ::connect(p.sock.fd(), reinterpret_cast<const sockaddr*>(&a), len);
    } else {
      r = ::connect(p.sock.fd(), reinterpret_cast<const sockaddr*>(&to.address), sizeof(to.address));
    }
    if (local && r != 0 && errno != EAGAIN && errno != EINTR) {
      // The name was published after listen(), so this is not "not yet": a security module
      // forbids the connection, or the peer's identity matched by accident. TCP still works.
      RF_LOG(kWarning) << "cannot connect to rank " << peer << "'s Unix socket (" << std::strerror(errno)
                       << "); using TCP to reach it";
      unixFailed_[peer] = true;
      result_[peer].resize(o_.socketsPerPeer);  // the one Unix socket becomes a TCP set
      for (int i = index + 1; i < o_.socketsPerPeer; ++i) startConnect(peer, i);
      return startConnect(peer, index);
    }
    if (r != 0 && errno != EINPROGRESS) {  // refused (TCP), or a Unix listener's backlog full (EAGAIN)
      p.retryAt = Clock::now() + std::chrono::milliseconds(50);
      p.sock.reset();
    }
    pending_.push_back(std::move(p));
  }

  int missing() const {
    int n = 0;
    for (const auto& row : result_) {
      for (const Socket& s : row) n += s.valid() ? 0 : 1;
    }
    return n;
  }

  [[noreturn]] void timedOut() {
    for (int peer = 0; peer < o_.size; ++peer) {
      if (peer == o_.rank) continue;
      for (const Socket& s : result_[peer]) {
        if (s.valid()) continue;
        double secs = o_.timeout.count() / 1000.0;
        if (peer > o_.rank) {
          throw IoError(peer, detail::concat("could not connect to rank ", peer, " within ", secs,
                                             " s: it published its address but did not answer"));
        }
        throw IoError(peer, detail::concat("rank ", peer, " never connected to rank ", o_.rank, " (listening on ",
                                           o_.listenAddress, ") within ", secs, " s"));
      }
    }
    RF_THROW(TimeoutError, "mesh set-up timed out");
  }

  void step() {
    long long left = msLeft(deadline_);
    if (left == 0) timedOut();
    Clock::time_point now = Clock::now();
    std::vector<std::pair<int, int>> retry;
    for (Pending& p : pending_) {
      if (!p.sock.valid() && p.peer >= 0 && now >= p.retryAt) {
        retry.emplace_back(p.peer, p.index);
        p.peer = -2;
      }
    }
    std::erase_if(pending_, [](const Pending& p) { return p.peer == -2; });
    for (auto [peer, index] : retry) startConnect(peer, index);

    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});
    fds.push_back({unixListener_.fd(), POLLIN, 0});  // fd -1 (no Unix listener): poll skips it
    for (Pending& p : pending_) {
      if (!p.sock.valid()) {
        left = std::min<long long>(left, 10);
        fds.push_back({-1, 0, 0});
        continue;
      }
      fds.push_back({p.sock.fd(), static_cast<short>(p.state == Pending::kConnecting ? POLLOUT : POLLIN), 0});
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 100)));
    if (n < 0 && errno != EINTR) RF_CHECK_ERRNO(n, "poll()");
    size_t before = pending_.size();
    for (size_t i = 0; i < before; ++i) {
      if (fds[i + 2].revents != 0) advance(pending_[i]);
    }
    if (fds[0].revents & POLLIN) acceptAll(listener_);
    if (fds[1].revents & POLLIN) acceptAll(unixListener_);
    std::erase_if(pending_, [](const Pending& p) { return p.peer == -2 || (!p.sock.valid() && p.peer < 0); });
  }

  void acceptAll(const Socket& listener) {
    for (;;) {
      int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      pending_.emplace_back(Pending::kReadHello, Socket(fd), -1, 0);
    }
  }

  // Reads into p.buf until `want` bytes; false while incomplete. A closed socket drops it.
  bool readSome(Pending& p, size_t want) {
    ssize_t r = ::recv(p.sock.fd(), p.buf + p.got, want - p.got, 0);
    if (r > 0) p.got += static_cast<size_t>(r);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      if (p.state == Pending::kReadAck) {
        throw IoError(p.peer, detail::concat("rank ", p.peer, " closed the connection during set-up"));
      }
      p.sock.reset();  // not one of ours, or a peer that died; it may reconnect
      p.peer = -1;
      return false;
    }
    return p.got == want;
  }

  void advance(Pending& p) {
    if (p.state == Pending::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(p.sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {  // refused: the peer may not listen yet (stale address); retry until the deadline
        p.sock.reset();
        p.retryAt = Clock::now() + std::chrono::milliseconds(50);
        return;
      }
      Hello h{kHelloMagic, o_.rank, o_.size, p.index, o_.socketsPerPeer, 0, {}};
      std::memcpy(h.token, addressOf(p.peer).token.data(), kTokenBytes);
      if (::send(p.sock.fd(), &h, sizeof(h), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(h))) {
        p.sock.reset();
        p.retryAt = Clock::now() + std::chrono::milliseconds(50);
        return;
      }
      p.state = Pending::kReadAck;
      p.got = 0;
      return;
    }
    if (p.state == Pending::kReadAck) {
      if (!readSome(p, sizeof(Ack))) return;
      Ack a;
      std::memcpy(&a, p.buf, sizeof(a));
      if (a.magic != kHelloMagic || a.rank != p.peer || !sameToken(a.token, token_)) {
        throw IoError(p.peer, detail::concat("the process at rank ", p.peer, "'s address is not rank ", p.peer,
                                             " of this job (it answered as rank ", a.rank,
                                             a.magic == kHelloMagic && a.rank == p.peer ? " without this job's token" : "",
                                             ")"));
      }
      result_[p.peer][p.index] = std::move(p.sock);
      p.peer = -2;
      return;
    }
    if (!readSome(p, sizeof(Hello))) return;
    Hello h;
    std::memcpy(&h, p.buf, sizeof(h));
    if (h.magic == kHelloMagic && h.socketsPerPeer != o_.socketsPerPeer) {
      RF_THROW(InvalidArgument, params::kSocketsPerPeer.name, " differs between ranks: rank ", h.rank, " uses ",
               h.socketsPerPeer, ", rank ", o_.rank, " uses ", o_.socketsPerPeer);
    }
    if (h.magic == kHelloMagic && h.size != o_.size) {
      RF_THROW(InvalidArgument, "rank ", h.rank, " was started with ", h.size, " ranks, rank ", o_.rank, " with ",
               o_.size);
    }
    // A lower rank on this host sends its one socket here (see run()).
    const bool overUnix = isUnixSocket(p.sock.fd());
    if (h.magic != kHelloMagic || h.rank < 0 || h.rank >= o_.rank || h.socketIndex < 0 ||
        h.socketIndex >= (overUnix ? 1 : o_.socketsPerPeer)) {
      RF_LOG(kWarning) << "dropping a connection with an unexpected hello (magic " << h.magic << ", rank " << h.rank
                       << ")";
      p.sock.reset();
      p.peer = -1;
      return;
    }
    if (!sameToken(h.token, token_)) {
      RF_LOG(kWarning) << "dropping a connection claiming to be rank " << h.rank
                       << " without this mesh's token (not a rank of this job)";
      p.sock.reset();
      p.peer = -1;
      return;
    }
    // A rank's sockets are all Unix or all TCP: it falls back to TCP only when its Unix connect
    // is refused, before any hello.
    std::vector<Socket>& row = result_[h.rank];
    const auto held = std::find_if(row.begin(), row.end(), [](const Socket& s) { return s.valid(); });
    if ((held != row.end() && isUnixSocket(held->fd()) != overUnix) ||
        (h.socketIndex < static_cast<int>(row.size()) && row[h.socketIndex].valid())) {
      RF_LOG(kWarning) << "dropping a second connection from rank " << h.rank << " socket " << h.socketIndex;
      p.sock.reset();
      p.peer = -1;
      return;
    }
    Ack a{kHelloMagic, o_.rank, {}};
    std::memcpy(a.token, tokenOf(h.rank).data(), kTokenBytes);
    if (::send(p.sock.fd(), &a, sizeof(a), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(a))) {
      p.sock.reset();
      p.peer = -1;
      return;
    }
    row.resize(overUnix ? 1 : o_.socketsPerPeer);
    row[h.socketIndex] = std::move(p.sock);
    p.peer = -2;
  }

  rendezvous::Store& store_;
  MeshOptions o_;
  Clock::time_point deadline_;
  Socket listener_;
  Socket unixListener_;
  std::string unixName_;
  std::string token_;
  std::vector<std::pair<int, PeerAddress>> addresses_;
  std::vector<bool> unixFailed_;  // by rank: its Unix socket refused us; TCP instead
  std::vector<Pending> pending_;
  std::vector<std::vector<Socket>> result_;
};

}  // namespace

std::vector<std::vector<Socket>> connectMesh(rendezvous::Store& store, const MeshOptions& options) {
  RF_ENFORCE(options.rank >= 0 && options.rank < options.size, "rank ", options.rank, " of ", options.size);
  RF_ENFORCE(options.socketsPerPeer >= 1 && options.socketsPerPeer <= 64, params::kSocketsPerPeer.name, "=",
             options.socketsPerPeer, " must be in [1, 64]");
  return Mesh(store, options).run();
}

}  // namespace ringfold::transport::tcp_uring
