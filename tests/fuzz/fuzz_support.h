// What the fuzz targets here share: a failed invariant traps with a line saying which; a
// parser may reject its input only with InvalidArgument (the class every "bad input" error of
// ringfold derives from), never with another exception; a reader of the input for the targets
// that play a peer step by step, and a loopback listener for those that play one over TCP.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "common/error.h"

namespace ringfold::fuzz {

[[noreturn]] inline void fail(const char* target, const char* what) {
  std::fprintf(stderr, "%s: %s\n", target, what);
  __builtin_trap();
}

// Runs `parse`; returns true when it returned, false when it rejected the input with
// InvalidArgument (or a subclass). Any other exception is a finding.
template <typename F>
bool acceptsOrRejects(const char* target, F&& parse) {
  try {
    parse();
    return true;
  } catch (const InvalidArgument& e) {
    if (e.what()[0] == '\0') fail(target, "rejected without a message");
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected exception: %s\n", target, e.what());
    __builtin_trap();
  }
}

// Reads the input front to back; past its end every read gives zeros.
struct Input {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool empty() const { return at >= size; }
  uint8_t u8() { return at < size ? data[at++] : 0; }
  uint64_t le(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{u8()} << (8 * i);
    return v;
  }
  // A length: small mostly, any 64-bit value when the selector's top bit is set.
  uint64_t length() {
    const uint8_t sel = u8();
    if (sel & 0x80) return le(8);
    if (sel & 0x40) return le(2);
    return sel & 0x3f;
  }
};

// The message of a caught exception.
inline std::string errorText(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// A listening TCP socket on 127.0.0.1 at a free port (aborts if there is none).
inline int listenOnLoopback(sockaddr_in& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) != 0) {
    std::perror("fuzz: listen on 127.0.0.1");
    std::abort();
  }
  return fd;
}

}  // namespace ringfold::fuzz
