// Sockets of the tcp_uring backend: choosing the interface to listen on, socket options, and
// the start-up mesh (every rank connected to every other by socketsPerPeer TCP sockets, or one
// Unix socket on the same host).
//
// Interface selection (RINGFOLD_SOCKET_IFNAME, NCCL syntax): a comma-separated list of names;
// each matches interfaces whose name starts with it, or equals it exactly when the list starts
// with '='; a list starting with '^' excludes those instead. The first IPv4 interface that is up
// and matches wins. When the variable is unset: 127.0.0.1 if RINGFOLD_STORE_ADDR is unset or a
// loopback address; otherwise the interface whose subnet holds the store's address, else the
// first non-loopback interface that is up, else 127.0.0.1.
//
// Mesh (mesh.cc): each rank listens on the chosen address and, when it knows its host identity
// (see transport/host_identity.h), on a Unix-domain stream socket in the abstract namespace under a random
// name. It publishes "ip:port token host unix-name process" under "<prefix>/addr/<rank>" (token:
// a fresh rendezvous::generateSecret() per mesh; host, unix-name and process (processIdentity)
// "-" when unknown or absent), and the lower
// rank of every pair connects: through the Unix socket when both ranks have the same host
// identity and RINGFOLD_LOCAL_TRANSPORT is unix (the default), else through TCP. A Unix stream
// carries the same frames as a TCP one; only the kernel's work per byte differs (no TCP/IP
// stack: 0.08 vs 0.34 s of CPU per GB moved on the development machine).
// Each connecting socket sends a Hello {magic, rank, size, socket
// index, sockets per peer, the acceptor's token}; the accepting side drops a hello without its
// own token (a process that could not read the store, which only holders of the job secret can,
// is not a rank of this job), routes it by rank and index, and answers with an Ack carrying its
// rank and the connector's token, which the connector checks in turn. So both ends know the
// socket is the right one, of this job, before any data flows. Nothing in a hello is believed
// before its token matches: a stranger's connection (forged hello, garbage, a partial hello,
// silence) is dropped and counted in a rate-limited log, and cannot end or stall the start-up
// (mesh.cc says how).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/host_identity.h"

namespace ringfold::rendezvous {
class Store;
}

namespace ringfold::transport::tcp_uring {

// An owned file descriptor (closed on destruction).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct Interface {
  std::string name;
  uint32_t address = 0;  // IPv4, host byte order
  uint32_t netmask = 0;  // host byte order
  bool up = false;
  bool loopback = false;
};

// The IPv4 interfaces of this host, in getifaddrs order.
std::vector<Interface> listInterfaces();

// Whether `name` is selected by an NCCL-style spec ("eth", "=eth0", "^docker,lo", "ib0,eth1").
bool ifnameSelected(const std::string& spec, const std::string& name);

// The address to listen on (dotted quad), by the rules above. `storeAddress` is the store's
// resolved IPv4 address in host order, 0 when there is no store address. Throws
// InvalidArgument when a spec selects nothing. Pure, so tests can feed it made-up interfaces.
std::string chooseListenAddress(const std::string& ifnameSpec, uint32_t storeAddress,
                                const std::vector<Interface>& interfaces);

// chooseListenAddress() from RINGFOLD_SOCKET_IFNAME, RINGFOLD_STORE_ADDR and this host.
std::string listenAddressFromEnvironment();

// RINGFOLD_SOCKETS_PER_PEER=auto: 1 when listening on a loopback address (every peer is on this
// host, where a TCP flow is a kernel memcpy and a second flow only adds per-socket overhead on
// the same cores: measured 2.4-2.6 vs 1.6-2.2 GB/s busbw for a 2-rank 16 MiB allreduce), else 2
// so that one flow does not cap a fast link. All ranks of a job decide alike: they listen on
// loopback only when the store address is loopback (or the interface spec says so).
int autoSocketsPerPeer(const std::string& listenAddress);

// Whether `fd` is a Unix-domain socket: TCP's options do not apply, and neither does zero-copy.
bool isUnixSocket(int fd);

// The send buffer a Unix socket asks for when RINGFOLD_SOCKET_BUFFER_BYTES is 0 (the kernel caps
// it at net.core.wmem_max): +20-35% busbw at 4 ranks and 4-64 MiB over the 208 KiB default.
constexpr uint64_t kUnixSendBufferBytes = 4u << 20;

// The send and receive buffers of a loopback TCP socket when RINGFOLD_SOCKET_BUFFER_BYTES is 0,
// given net.core.rmem_max and wmem_max: kLoopbackTcpBufferBytes when both allow it, else 0
// (autotuning). Autotuning on loopback settles per connection, on the first messages: a job
// whose first allreduces are 256 KiB ran at about 2.2 GB/s busbw for its whole life at 2 ranks,
// against 4.4 with 4 MiB buffers, every launch; with a larger first message, or the fixed
// buffers, it ran at 4.4. A fixed size above the maxima would be capped small and stop
// autotuning (with Debian's 208 KiB, 2 MiB buffers halved busbw at 1 MiB), hence the check.
constexpr uint64_t kLoopbackTcpBufferBytes = 4u << 20;
uint64_t loopbackTcpBufferBytes(uint64_t rmemMax, uint64_t wmemMax);

// TCP_NODELAY; SO_SNDBUF/SO_RCVBUF when bufferBytes > 0, else loopbackTcpBufferBytes for a peer
// on a loopback address, else kernel autotuning; keepalive and TCP_USER_TIMEOUT from `timeout`,
// so the kernel also gives up on a vanished host. A Unix socket gets only its send buffer
// (bufferBytes, else kUnixSendBufferBytes): its peer is on this kernel, which reports its death
// at once.
void setDataSocketOptions(int fd, std::chrono::milliseconds timeout, uint64_t bufferBytes);

// The set-up messages on a mesh socket (host byte order: both ends run this code).
namespace wire {
constexpr uint32_t kHelloMagic = 0x52464832;  // "RFH2" (RFH1 had no tokens)
constexpr size_t kTokenBytes = 64;  // rendezvous::generateSecret()'s length: 32 random bytes in hex
struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  int32_t socketIndex;
  int32_t socketsPerPeer;
  int32_t reserved;
  char token[kTokenBytes];  // the accepting rank's token, read from the store
};
struct Ack {
  uint32_t magic;
  int32_t rank;
  char token[kTokenBytes];  // the connecting rank's token, read from the store
};
}  // namespace wire

struct MeshOptions {
  std::string prefix;
  int rank = 0;
  int size = 1;
  int socketsPerPeer = 1;
  std::string listenAddress;
  bool localUnix = true;        // RINGFOLD_LOCAL_TRANSPORT=unix: same-host peers over Unix sockets
  std::string hostId = hostIdentity();
  std::string processId = processIdentity();
  std::chrono::milliseconds timeout{60000};
  std::vector<bool> peers;  // by rank: connect it; empty: every peer
  bool wants(int peer) const { return peer != rank && (peers.empty() || peers[peer]); }
};

// Connects this rank to every other that options.wants(); returns sockets[peer][index] (empty
// at `rank` and at peers not wanted): one Unix
// socket to a peer on this host (see MeshOptions::localUnix), else socketsPerPeer TCP sockets.
// Blocking mode, options not yet set. Throws IoError naming the first rank that did not publish its
// address, could not be reached, or never connected within the timeout. With `peerPids`, fills it
// by rank with each peer's pid where this process can check it (the same kernel and pid namespace,
// another process), else 0.
std::vector<std::vector<Socket>> connectMesh(rendezvous::Store& store, const MeshOptions& options,
                                             std::vector<int>* peerPids = nullptr);

}  // namespace ringfold::transport::tcp_uring
