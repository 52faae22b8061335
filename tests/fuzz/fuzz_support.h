// What the fuzz targets here share: a failed invariant traps with a line saying which; a
// parser may reject its input only with InvalidArgument (the class every "bad input" error of
// ringfold derives from), never with another exception; and a loopback listener for the
// targets that play a peer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

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
