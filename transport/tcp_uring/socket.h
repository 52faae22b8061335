// Sockets of the tcp_uring backend: an owned descriptor, the socket family a device uses, and
// the options of its data sockets.
#pragma once

#include <chrono>
#include <cstdint>

namespace ringfold::transport::tcp_uring {

// Which sockets a device joins its peers with: TCP (any host), or Unix-domain stream sockets in
// the abstract namespace (same host and network namespace only). Chosen by the device's creator.
enum class Family { kTcp, kUnix };

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

// Whether `fd` is a Unix-domain socket: TCP's options do not apply, and neither does zero-copy.
bool isUnixSocket(int fd);

// The send buffer a Unix socket asks for when RINGFOLD_SOCKET_BUFFER_BYTES is 0 (the kernel caps
// it at net.core.wmem_max): faster than the 208 KiB default (docs/performance.md).
constexpr uint64_t kUnixSendBufferBytes = 4u << 20;

// The send and receive buffers of a loopback TCP socket when RINGFOLD_SOCKET_BUFFER_BYTES is 0,
// given net.core.rmem_max and wmem_max: kLoopbackTcpBufferBytes when both allow it, else 0
// (autotuning). Autotuning on loopback settles per connection, on the first messages, so a job
// whose first messages are small keeps small buffers for its whole life (docs/performance.md
// has the figures). A fixed size above the maxima would be capped small and stop autotuning,
// hence the check.
constexpr uint64_t kLoopbackTcpBufferBytes = 4u << 20;
uint64_t loopbackTcpBufferBytes(uint64_t rmemMax, uint64_t wmemMax);

// TCP_NODELAY; SO_SNDBUF/SO_RCVBUF when bufferBytes > 0, else loopbackTcpBufferBytes for a peer
// on a loopback address, else kernel autotuning; keepalive and TCP_USER_TIMEOUT from `timeout`,
// so the kernel also gives up on a vanished host. A Unix socket gets only its send buffer
// (bufferBytes, else kUnixSendBufferBytes): its peer is on this kernel, which reports its death
// at once.
void setDataSocketOptions(int fd, std::chrono::milliseconds timeout, uint64_t bufferBytes);

}  // namespace ringfold::transport::tcp_uring
