// Fuzz target: the store client's reading of replies (rendezvous/tcp_store.h, TcpStore): what
// a store server, or whatever answers on its port after a correct handshake, sends back.
//
// A fake server in this process completes the real handshake (it knows the secret), reads one
// whole request, answers with the input's bytes and closes the connection. The first input
// byte picks the call (SET, GET, ADD, CHECK or DELETE_PREFIX). Checks: the call returns or throws a
// ringfold::Error that says why, within 10 s (never hangs, never any other exception), and
// never allocates what a hostile length prefix claims (the sanitizer's allocation limit).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_support.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"
#include "rendezvous/tcp_store_request.h"

namespace rv = ringfold::rendezvous;
namespace wire = ringfold::rendezvous::wire;
namespace fz = ringfold::fuzz;
using namespace std::chrono_literals;

namespace {

constexpr const char* kTarget = "store_client_fuzz";
const std::string kSecret = "fuzz-secret";
int gListener = -1;
int gPort = 0;

bool readExactly(int fd, uint8_t* out, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, out, n, 0);
    if (r <= 0) return false;
    out += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void writeAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The server's side of one connection: handshake, one request, `reply`, close.
void serveOnce(std::vector<uint8_t> reply) {
  const int fd = ::accept(gListener, nullptr, nullptr);
  if (fd < 0) return;
  uint8_t nonce[wire::kNonceBytes];
  wire::randomBytes(nonce, sizeof nonce);
  writeAll(fd, nonce, sizeof nonce);
  uint8_t hello[wire::kClientHelloBytes];
  if (readExactly(fd, hello, sizeof hello)) {
    uint8_t proof[wire::kMacBytes];
    wire::proof(kSecret, wire::kServerLabel, hello + wire::kMacBytes, proof);
    writeAll(fd, proof, sizeof proof);
    std::vector<uint8_t> request;
    uint8_t chunk[4096];
    for (;;) {
      rv::Request req;
      size_t used = 0;
      std::string why;
      if (rv::parseRequest(request.data(), request.size(), wire::maxValueBytes(), req, used, why) !=
          rv::Parse::kIncomplete) {
        break;
      }
      const ssize_t r = ::recv(fd, chunk, sizeof chunk, 0);
      if (r <= 0) break;
      request.insert(request.end(), chunk, chunk + r);
    }
    writeAll(fd, reply.data(), reply.size());
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);
  sockaddr_in address{};
  gListener = fz::listenOnLoopback(address);
  gPort = ntohs(address.sin_port);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t call = data[0] % 5;
  std::thread server(serveOnce, std::vector<uint8_t>(data + 1, data + size));
  const auto start = std::chrono::steady_clock::now();
  try {
    rv::TcpStore store("127.0.0.1", gPort, kSecret, 5s);
    switch (call) {
      case 0: store.set("key", {1, 2, 3}); break;
      case 1: (void)store.get("key", 5s); break;
      case 2: (void)store.add("counter", 7); break;
      case 3: (void)store.check({"a", "b"}); break;
      default: (void)store.deletePrefix("rf/split/ps1/"); break;
    }
  } catch (const ringfold::Error& e) {
    if (e.what()[0] == '\0') fz::fail(kTarget, "a failed call without a reason");
  }
  server.join();
  if (std::chrono::steady_clock::now() - start > 10s) fz::fail(kTarget, "a call took more than 10 s");
  return 0;
}
