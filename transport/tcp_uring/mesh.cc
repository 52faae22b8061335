// The start-up mesh of the tcp_uring backend (connectMesh, mesh.h).
//
// Strangers. A rank's listening TCP port and abstract Unix socket (whose name any local user can
// read in /proc/net/unix) accept connections from anyone while the mesh forms. Nothing an
// accepted connection sends is believed before its hello carries this mesh's token, which only
// a process that read the secret-protected store has: a hello without it, garbage, a partial
// hello, or no hello within kHelloTimeout, drops the connection and counts it (logged at most
// every kDropLogInterval, with counts); at most kMaxUnidentified accepted connections, beyond
// those this rank still expects from lower ranks, wait for their hello at once (beyond that the
// oldest is dropped: with many ranks on few cores, hundreds of real ranks may be accepted before
// they get the CPU to send their hellos, and they must not be taken for a flood), and one step accepts at most
// kAcceptsPerStep, so a flood can neither exhaust descriptors nor starve the loop. A rank whose
// connection is closed before the answer (its hello dropped in such a flood) connects again, up
// to kConnectAttempts times. Only an authenticated hello can end the start-up with an error
// (ranks started with different sizes or socket counts).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/test_hook.h"
#include "rendezvous/secret.h"
#include "rendezvous/store.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::transport::tcp_uring {

using Clock = std::chrono::steady_clock;

namespace {

using wire::Ack;
using wire::Hello;
using wire::kHelloMagic;
using wire::kTokenBytes;

constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr size_t kMaxUnidentified = 128;
constexpr int kAcceptsPerStep = 64;
constexpr int kConnectAttempts = 5;
constexpr auto kDropLogInterval = std::chrono::seconds(5);

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

// A peer's published "ip:port token host unix-name process" ("-" for no TCP listener, an
// unknown host, no Unix socket, or an unknown process identity).
struct PeerAddress {
  bool tcp = false;  // published an ip:port
  sockaddr_in address{};
  std::string token;
  std::string host;      // empty: unknown
  std::string unixName;  // empty: none
  std::string process;   // processIdentity(); empty: unknown
};

PeerAddress parseAddress(const std::string& text, int peer) {
  std::istringstream in(text);
  std::string endpoint, token, host, unixName, process, extra;
  in >> endpoint >> token >> host >> unixName >> process;
  auto colon = endpoint.rfind(':');
  PeerAddress a;
  a.address.sin_family = AF_INET;
  a.tcp = endpoint != "-";
  if (process.empty() || (in >> extra) || token.size() != kTokenBytes ||
      (a.tcp && (colon == std::string::npos ||
                 inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.address.sin_addr) != 1))) {
    throw IoError(peer, detail::concat("rank ", peer, " published a malformed address '", text,
                                       "' (expected 'ip:port token host unix-name process'; ranks of different "
                                       "ringfold versions?)"));
  }
  if (a.tcp) a.address.sin_port = htons(static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  a.token = token;
  if (host != "-") a.host = host;
  if (unixName != "-") a.unixName = unixName;
  if (process != "-") a.process = process;
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

// Who is at the other end of an accepted socket, for the log: "ip:port", or a local process.
std::string describePeer(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    char buf[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof(buf));
    return detail::concat(buf, ":", ntohs(in.sin_port));
  }
  ucred cred{};
  socklen_t clen = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
    return detail::concat("local process ", cred.pid, " (uid ", cred.uid, ") on the Unix socket");
  }
  return "an unknown peer";
}

// Connections dropped because they are not ranks of this job: counted, and logged at most
// every kDropLogInterval (the first at once), so a stranger cannot flood the log.
class DropLog {
 public:
  explicit DropLog(int rank) : rank_(rank) {}
  void drop(const std::string& from, const std::string& why) {
    ++total_;
    ++unlogged_;
    latest_ = from + ": " + why;
    const Clock::time_point now = Clock::now();
    if (logged_ && now - lastLog_ < kDropLogInterval) return;
    flush();
  }
  void flush() {
    if (unlogged_ == 0) return;
    RF_LOG(kWarning) << "rank " << rank_ << " dropped " << unlogged_ << (unlogged_ == 1 ? " connection" : " connections")
                     << " to its mesh listener that did not present this job's token (not a rank of this job; "
                     << "latest from " << latest_ << "); " << total_ << " since start-up";
    unlogged_ = 0;
    logged_ = true;
    lastLog_ = Clock::now();
  }
  size_t total() const { return total_; }

 private:
  int rank_;
  size_t total_ = 0, unlogged_ = 0;
  bool logged_ = false;
  Clock::time_point lastLog_{};
  std::string latest_;
};

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
  Clock::time_point retryAt{};   // a refused connect is retried after this
  Clock::time_point acceptedAt{};  // an accepted socket's hello is due by acceptedAt + kHelloTimeout
};

long long msLeft(Clock::time_point deadline) {
  return std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

class Mesh {
 public:
  Mesh(rendezvous::Store& store, const MeshOptions& o)
      : store_(store),
        o_(o),
        unix_(o.family == Family::kUnix),
        perPeer_(unix_ ? 1 : o.socketsPerPeer),
        token_(rendezvous::generateSecret()),
        unreachable_(o.size),
        drops_(o.rank) {
    RF_ENFORCE_EQ(token_.size(), kTokenBytes, "mesh token length");
    result_.resize(o.size);
    attempts_.assign(o.size, std::vector<int>(perPeer_, 0));
    for (int p = 0; p < o.size; ++p) {
      if (o.wants(p)) result_[p].resize(perPeer_);
    }
  }

  std::vector<std::vector<Socket>> run(std::vector<int>* peerPids, std::vector<std::string>* unreachable) {
    deadline_ = Clock::now() + o_.timeout;
    listen();
    for (int peer = o_.rank + 1; peer < o_.size; ++peer) {
      if (!o_.wants(peer)) continue;
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
      const PeerAddress& a = addresses_.back().second;
      if (unix_ && a.unixName.empty()) {
        giveUp(peer, "it has no Unix socket");
        continue;
      }
      if (!unix_ && !a.tcp) {
        throw IoError(peer, detail::concat("rank ", peer, " published no TCP address ('", text,
                                           "'): the ranks chose different socket families"));
      }
      // One Unix socket is enough: several sockets help spread TCP flows over a link's queues
      // and paths, and between two processes of one kernel there are none.
      for (int i = 0; i < perPeer_; ++i) startConnect(peer, i);
    }
    while (missing() > 0) step();
    drops_.flush();
    for (auto& row : result_) {
      for (Socket& s : row) setNonBlocking(s.fd(), false);
    }
    if (peerPids != nullptr) {
      peerPids->assign(o_.size, 0);
      for (int p = 0; p < o_.size; ++p) {
        if (o_.wants(p) && unreachable_[p].empty()) (*peerPids)[p] = localPid(publishedAddress(p).process, o_.processId);
      }
    }
    if (unreachable != nullptr) *unreachable = unreachable_;
    return std::move(result_);
  }

 private:
  void listen() {
    if (unix_) {
      listenUnix();
    } else {
      listenTcp();
    }
    const std::string addr = listener_.valid() ? listenerAddress() : "-";
    const bool unixListening = unixListener_.valid();
    store_.setString(o_.prefix + "/addr/" + std::to_string(o_.rank),
                     detail::concat(addr, " ", token_, " ", o_.hostId.empty() ? "-" : o_.hostId, " ",
                                    unixListening ? unixName_ : "-", " ",
                                    o_.processId.empty() ? "-" : o_.processId));
    RF_LOG(kDebug) << "rank " << o_.rank << " listening on "
                   << (unixListening ? "Unix socket @" + unixName_ : addr);
    testhook::stopAt("mesh", o_.rank);
  }

  void listenTcp() {
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
  }

  std::string listenerAddress() const {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    RF_CHECK_ERRNO(getsockname(listener_.fd(), reinterpret_cast<sockaddr*>(&a), &len), "getsockname()");
    return o_.listenAddress + ":" + std::to_string(ntohs(a.sin_port));
  }

  // The Unix-domain listener; none when the socket cannot be made (published as "-": the lower
  // ranks then report this rank unreachable, and the caller joins the pairs another way).
  void listenUnix() {
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    // The name is random and separate from the token: abstract names are listed in /proc/net/unix.
    std::string name = "ringfold-" + rendezvous::generateSecret().substr(0, 32);
    sockaddr_un a;
    socklen_t len = abstractAddress(name, a);
    if (!s.valid() || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s.fd(), SOMAXCONN) != 0) {
      RF_LOG(kWarning) << "no Unix socket for same-host peers (" << std::strerror(errno)
                       << "); they are reported unreachable over Unix sockets";
      return;
    }
    unixListener_ = std::move(s);
    unixName_ = std::move(name);
  }

  // `peer` cannot be reached over Unix sockets: leave it out, and tell it (or, for a higher
  // rank, the store tells it) so that it stops waiting for this rank's connection.
  void giveUp(int peer, const std::string& why) {
    unreachable_[peer] = why;
    result_[peer].clear();
    for (Pending& p : pending_) {
      if (p.peer == peer && p.state != Pending::kReadHello) {
        p.sock.reset();
        p.peer = -2;
      }
    }
    if (peer > o_.rank) store_.setString(unreachableKey(o_.rank, peer), why);
  }

  std::string unreachableKey(int lower, int higher) const {
    return detail::concat(o_.prefix, "/unix-unreachable/", lower, "/", higher);
  }

  // A lower rank that could not reach this one over Unix sockets says so in the store.
  void checkUnreachable() {
    const Clock::time_point now = Clock::now();
    if (now < nextUnreachableCheck_) return;
    nextUnreachableCheck_ = now + std::chrono::milliseconds(100);
    for (int peer = 0; peer < o_.rank; ++peer) {
      if (!o_.wants(peer) || result_[peer].empty() || result_[peer][0].valid()) continue;
      const std::string key = unreachableKey(peer, o_.rank);
      if (store_.check({key})) giveUp(peer, store_.getString(key, std::chrono::milliseconds(1000)));
    }
  }

  const PeerAddress& addressOf(int peer) const {
    for (auto& [p, a] : addresses_) {
      if (p == peer) return a;
    }
    throw IoError(peer, "no address");
  }

  // The published address of `peer`, read from the store the first time (a lower rank that
  // connected to us published it before connecting).
  const PeerAddress& publishedAddress(int peer) {
    for (auto& [p, a] : addresses_) {
      if (p == peer) return a;
    }
    std::string key = o_.prefix + "/addr/" + std::to_string(peer);
    addresses_.emplace_back(peer, parseAddress(store_.getString(key, std::chrono::milliseconds(std::max<long long>(
                                                                             msLeft(deadline_), 1000))),
                                               peer));
    return addresses_.back().second;
  }

  void startConnect(int peer, int index) {
    if (!unreachable_[peer].empty()) return;
    const PeerAddress& to = addressOf(peer);
    const bool local = unix_;
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
      const std::string why = detail::concat("cannot connect to rank ", peer, "'s Unix socket (", std::strerror(errno), ")");
      RF_LOG(kWarning) << why << "; reporting it unreachable over Unix sockets (the caller may use TCP)";
      return giveUp(peer, why);
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
    drops_.flush();
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
                                           o_.listenAddress, ") within ", secs, " s",
                                           drops_.total() > 0 ? detail::concat("; ", drops_.total(),
                                                                               " connections from processes that are "
                                                                               "not ranks of this job were dropped")
                                                              : std::string()));
      }
    }
    RF_THROW(TimeoutError, "mesh set-up timed out");
  }

  // Drops an accepted connection that is not (or not yet shown to be) a rank of this job.
  void dropStranger(Pending& p, const std::string& why) {
    drops_.drop(describePeer(p.sock.fd()), why);
    p.sock.reset();
    p.peer = -2;
  }

  void step() {
    if (unix_) checkUnreachable();
    long long left = msLeft(deadline_);
    if (left == 0) timedOut();
    Clock::time_point now = Clock::now();
    std::vector<std::pair<int, int>> retry;
    for (Pending& p : pending_) {
      if (!p.sock.valid() && p.peer >= 0 && now >= p.retryAt) {
        retry.emplace_back(p.peer, p.index);
        p.peer = -2;
      } else if (p.state == Pending::kReadHello && p.sock.valid() && now - p.acceptedAt >= kHelloTimeout) {
        dropStranger(p, detail::concat("no hello within ", kHelloTimeout.count(), " s (", p.got, " bytes)"));
      }
    }
    std::erase_if(pending_, [](const Pending& p) { return p.peer == -2; });
    for (auto [peer, index] : retry) startConnect(peer, index);

    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});      // fd -1 (no listener of that family): poll skips it
    fds.push_back({unixListener_.fd(), POLLIN, 0});
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
      if (fds[i + 2].revents != 0 && pending_[i].sock.valid()) advance(pending_[i]);
    }
    if (fds[0].revents & POLLIN) acceptSome(listener_);
    if (fds[1].revents & POLLIN) acceptSome(unixListener_);
    std::erase_if(pending_, [](const Pending& p) { return p.peer == -2 || (!p.sock.valid() && p.peer < 0); });
  }

  // Sockets this rank still expects lower ranks to open to it.
  size_t inboundMissing() const {
    size_t n = 0;
    for (int p = 0; p < o_.rank; ++p) {
      if (!o_.wants(p)) continue;
      for (const Socket& s : result_[p]) n += s.valid() ? 0 : 1;
    }
    return n;
  }

  void acceptSome(const Socket& listener) {
    const size_t cap = kMaxUnidentified + inboundMissing();
    for (int i = 0; i < kAcceptsPerStep; ++i) {
      int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      size_t waiting = 0;
      Pending* oldest = nullptr;
      for (Pending& p : pending_) {
        if (p.state != Pending::kReadHello || !p.sock.valid()) continue;
        ++waiting;
        if (oldest == nullptr || p.acceptedAt < oldest->acceptedAt) oldest = &p;
      }
      if (waiting >= cap && oldest != nullptr) {
        dropStranger(*oldest, detail::concat("one of more than ", cap, " connections waiting for their hello at once"));
      }
      pending_.emplace_back(Pending::kReadHello, Socket(fd), -1, 0);
      pending_.back().acceptedAt = Clock::now();
      advance(pending_.back());  // a rank sends its hello at once: it is usually here already
    }
  }

  // Reads into p.buf until `want` bytes; false while incomplete, or when the socket closed.
  bool readSome(Pending& p, size_t want) {
    ssize_t r = ::recv(p.sock.fd(), p.buf + p.got, want - p.got, 0);
    if (r > 0) p.got += static_cast<size_t>(r);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (p.state == Pending::kReadAck) {
        // Dropped before its answer (a peer that died, or one shedding a flood of strangers'
        // connections): connect again, a few times.
        if (++attempts_[p.peer][p.index] >= kConnectAttempts) {
          throw IoError(p.peer, detail::concat("rank ", p.peer, " closed the connection during set-up ",
                                               kConnectAttempts, " times"));
        }
        p.sock.reset();
        p.retryAt = Clock::now() + std::chrono::milliseconds(50);
        return false;
      }
      dropStranger(p, detail::concat("closed after ", p.got, " bytes, before a whole hello"));
      return false;
    }
    return p.got == want;
  }

  // "rank R", or the words for a process that claims this rank's own number.
  std::string whoIs(int rank) const {
    return rank == o_.rank ? detail::concat("another process started as rank ", rank) : detail::concat("rank ", rank);
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
    // The token first: until it matches, the bytes are a stranger's and decide nothing.
    if (h.magic != kHelloMagic || !sameToken(h.token, token_)) {
      return dropStranger(p, h.magic == kHelloMagic ? "a hello without this mesh's token" : "not a hello");
    }
    // The sender read this mesh's address from the store: a rank of this job, whose word counts.
    if (h.size != o_.size) {
      RF_THROW(InvalidArgument, whoIs(h.rank), " was started with ", h.size, " ranks, rank ", o_.rank, " with ",
               o_.size);
    }
    if (h.socketsPerPeer != o_.socketsPerPeer) {
      RF_THROW(InvalidArgument, params::kSocketsPerPeer.name, " differs between ranks: ", whoIs(h.rank), " uses ",
               h.socketsPerPeer, ", rank ", o_.rank, " uses ", o_.socketsPerPeer);
    }
    if (h.rank < 0 || h.rank >= o_.rank) {
      RF_THROW(InvalidArgument, whoIs(h.rank), " connected to rank ", o_.rank,
               "; only lower ranks connect to a rank (were two processes started with the same rank?)");
    }
    if (!o_.wants(h.rank)) {
      RF_THROW(InvalidArgument, "rank ", h.rank, " connected to rank ", o_.rank, " through a backend (",
               o_.prefix, ") that rank ", o_.rank, " does not use for it: the ranks chose backends differently");
    }
    // The listener this came through has this mesh's family.
    const bool overUnix = unix_;
    std::vector<Socket>& row = result_[h.rank];
    if (h.socketIndex < 0 || h.socketIndex >= perPeer_ || h.socketIndex >= static_cast<int>(row.size()) ||
        row[h.socketIndex].valid()) {
      RF_LOG(kWarning) << "dropping an unexpected connection from rank " << h.rank << " (socket " << h.socketIndex
                       << (overUnix ? ", Unix" : ", TCP") << ")";
      p.sock.reset();
      p.peer = -2;
      return;
    }
    Ack a{kHelloMagic, o_.rank, {}};
    std::memcpy(a.token, publishedAddress(h.rank).token.data(), kTokenBytes);
    if (::send(p.sock.fd(), &a, sizeof(a), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(a))) {
      p.sock.reset();
      p.peer = -2;
      return;
    }
    row[h.socketIndex] = std::move(p.sock);
    p.peer = -2;
  }

  rendezvous::Store& store_;
  MeshOptions o_;
  bool unix_;    // Family::kUnix
  int perPeer_;  // sockets per peer: 1 over Unix
  Clock::time_point nextUnreachableCheck_{};
  Clock::time_point deadline_;
  Socket listener_;
  Socket unixListener_;
  std::string unixName_;
  std::string token_;
  std::vector<std::pair<int, PeerAddress>> addresses_;
  std::vector<std::string> unreachable_;   // by rank: why its Unix socket cannot be reached
  std::vector<std::vector<int>> attempts_;  // [peer][socket]: connections closed before the answer
  std::vector<Pending> pending_;
  std::vector<std::vector<Socket>> result_;
  DropLog drops_;
};

}  // namespace

std::vector<std::vector<Socket>> connectMesh(rendezvous::Store& store, const MeshOptions& options,
                                             std::vector<int>* peerPids, std::vector<std::string>* unreachable) {
  RF_ENFORCE(options.rank >= 0 && options.rank < options.size, "rank ", options.rank, " of ", options.size);
  RF_ENFORCE(options.socketsPerPeer >= 1 && options.socketsPerPeer <= 64, params::kSocketsPerPeer.name, "=",
             options.socketsPerPeer, " must be in [1, 64]");
  return Mesh(store, options).run(peerPids, unreachable);
}

}  // namespace ringfold::transport::tcp_uring
