// Fuzz target: tcp_uring's frame parsing (transport/tcp_uring/frame.h, peer_link_receive.cc):
// the bytes a peer's socket delivers, read by a real PairLink (transport/tcp_uring/pair.h)
// with its real io_uring, exactly as in a job.
//
// Each input is written by a loopback TCP peer into a fresh link that has receives posted for
// tags 0-3, and the peer then closes its end. Checks: the link never crashes or corrupts
// memory; every receive that completes holds at most its capacity; and the link ends, within
// 5 s, either failed with an error that says why (a peer that closes always ends it) -- never
// a hang, never a silent stop.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "transport/tcp_uring/pair.h"

namespace tu = ringfold::transport::tcp_uring;
namespace fz = ringfold::fuzz;

namespace {

constexpr const char* kTarget = "tcp_frames_fuzz";
int gListener = -1;
sockaddr_in gAddress{};

int connectedPair(int& accepted) {
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&gAddress), sizeof gAddress) != 0) {
    std::perror("tcp_frames_fuzz: connect");
    std::abort();
  }
  accepted = ::accept(gListener, nullptr, nullptr);
  if (accepted < 0) {
    std::perror("tcp_frames_fuzz: accept");
    std::abort();
  }
  return client;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);
  gListener = fz::listenOnLoopback(gAddress);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int accepted = -1;
  const int peer = connectedPair(accepted);
  std::vector<tu::Socket> sockets;
  sockets.emplace_back(accepted);
  auto link = std::make_unique<tu::PairLink>(std::move(sockets), 0);

  constexpr size_t kCapacity = 1 << 16;
  std::vector<std::vector<std::byte>> buffers(4, std::vector<std::byte>(kCapacity));
  std::vector<std::unique_ptr<tu::TcpRequest>> receives;
  for (uint64_t tag = 0; tag < 4; ++tag) receives.push_back(link->irecv(buffers[tag].data(), kCapacity, tag));

  for (size_t at = 0; at < size;) {
    const ssize_t n = ::send(peer, data + at, size - at, MSG_NOSIGNAL);
    if (n <= 0) break;  // the link closed its end after a bad frame
    at += static_cast<size_t>(n);
    link->progress();
  }
  ::close(peer);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!link->failed()) {
    if (std::chrono::steady_clock::now() > deadline) fz::fail(kTarget, "the link neither failed nor finished within 5 s of its peer closing");
    link->progress();
  }
  try {
    std::rethrow_exception(link->error());
  } catch (const ringfold::Error& e) {
    if (e.what()[0] == '\0') fz::fail(kTarget, "the link failed without a reason");
  }
  for (auto& r : receives) {
    try {
      if (r->test() && r->state().length > kCapacity) fz::fail(kTarget, "a receive holds more than its capacity");
    } catch (const ringfold::Error&) {
      // failed with the link: expected
    }
  }
  return 0;
}
