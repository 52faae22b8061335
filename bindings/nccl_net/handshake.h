// How one plugin connection is set up: NCCL's listen / connect / accept, without blocking.
//
// The receiving side listens on its chosen address and gives NCCL a Handle (carried to the
// sender by NCCL's bootstrap): the address, the number of sockets the connection will use and
// a fresh 32-byte random secret. The sender opens that many non-blocking TCP connections and
// sends a Hello on each {magic, socket index, socket count, a random nonce of this connect,
// the secret}; the listener checks it (constant-time secret comparison), keeps the socket under
// its index and answers an Ack {magic, index, nonce}. The connection is made when every socket
// has been acknowledged (sender) or has presented a valid hello (receiver). A socket with a
// wrong magic, secret, count, index or nonce (a stranger, a stale sender) is closed and the
// listener carries on; one silent past the timeout is dropped the same way. Nothing else is
// read from a socket before tcp_uring (transport/tcp_uring/pair.h) takes it over, so data can
// follow the handshake at once.
//
// Contract: poll() never blocks; it returns the sockets (in index order, blocking mode) once,
// when the connection is made, and nothing before. Connector::poll throws IoError when the
// listener refuses or closes the connection, or none is made within `timeout`; the Listener's
// accept side throws IoError when no valid sender arrives within `timeout` of its first poll.
// A malformed handle makes the Connector's constructor throw InvalidArgument.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "transport/tcp_uring/socket.h"

namespace ringfold::ncclnet {

using transport::tcp_uring::Socket;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kHandleMagic = 0x52464e48;  // "RFNH"
constexpr uint32_t kHelloMagic = 0x52464e31;   // "RFN1"
constexpr uint32_t kAckMagic = 0x52464e41;     // "RFNA"
constexpr size_t kSecretBytes = 32;
constexpr int kMaxSockets = 64;

// What carries a connection's data once the handshake is done: tcp_uring over the handshaken
// sockets, or the rdma transport (the one socket then only carries its start-up and heartbeat).
// The listener decides, and the connector follows its handle.
enum class Carrier : uint16_t { kTcp = 0, kRdma = 1 };

// What NCCL carries from listen() to connect(), in its opaque handle (first 48 of 128 bytes).
struct Handle {
  uint32_t magic;
  uint16_t version;  // 2 (1: before the carrier)
  uint16_t sockets;  // TCP connections this connection uses
  uint32_t address;  // IPv4, network order
  uint16_t port;     // network order
  uint16_t carrier;  // Carrier
  uint8_t secret[kSecretBytes];
};
static_assert(sizeof(Handle) == 48);

struct Hello {
  uint32_t magic;
  uint16_t index;
  uint16_t sockets;
  uint64_t nonce;
  uint8_t secret[kSecretBytes];
};
static_assert(sizeof(Hello) == 48);

struct Ack {
  uint32_t magic;
  uint16_t index;
  uint16_t reserved;
  uint64_t nonce;
};
static_assert(sizeof(Ack) == 16);

// The receiving side: a listening socket and the sockets presented to it.
class Listener {
 public:
  // Listens on `address` (dotted IPv4) at a free port; the connection will use `sockets` sockets
  // and `carrier`.
  Listener(const std::string& address, int sockets, std::chrono::milliseconds timeout,
           Carrier carrier = Carrier::kTcp);
  const Handle& handle() const { return handle_; }
  std::optional<std::vector<Socket>> poll();

 private:
  struct Pending {
    Socket sock;
    Hello hello{};
    size_t got = 0;
    Clock::time_point since;
  };
  void check(Pending& p);

  Socket listen_;
  Handle handle_{};
  std::chrono::milliseconds timeout_;
  std::optional<Clock::time_point> deadline_;
  std::vector<Pending> pending_;
  std::vector<Socket> slots_;
  int filled_ = 0;
  uint64_t nonce_ = 0;
  bool nonceSet_ = false;
  bool done_ = false;
};

// The sending side: the sockets being connected to a Handle.
class Connector {
 public:
  Connector(const Handle& handle, std::chrono::milliseconds timeout);
  std::optional<std::vector<Socket>> poll();
  std::string peer() const;  // "a.b.c.d:port", for messages

 private:
  enum class Stage { kConnecting, kHello, kAck, kDone };
  struct Conn {
    Socket sock;
    Stage stage = Stage::kConnecting;
    size_t sent = 0, got = 0;
    Ack ack{};
  };
  Handle handle_;
  Hello hello_{};
  Clock::time_point deadline_;
  std::vector<Conn> conns_;
  bool done_ = false;
};

// 32 random bytes from the kernel (getrandom); throws Error if it fails.
void randomBytes(void* out, size_t n);

// Whether a handle looks like one of ours (magic, version, socket count, carrier); `why` says
// what not.
bool validHandle(const Handle& handle, std::string* why);

// `fd` back to blocking mode (tcp_uring's sockets are).
void setBlocking(int fd);

}  // namespace ringfold::ncclnet
