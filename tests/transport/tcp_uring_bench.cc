// tcp_uring_bench: loopback throughput and latency of the tcp_uring transport between two
// forked processes (a measuring tool, not a test; bench/ holds the user-facing benchmarks).
//
//   tcp_uring_bench bw SIZE [REPS]        one-way throughput, a window of 4 messages in flight, median of REPS
//   tcp_uring_bench lat SIZE [ITERS]      ping-pong, one-way latency = round trip / 2, median
//   tcp_uring_bench exchange SIZE [ITERS] both ranks send and receive SIZE at once, then sum
//                                         floats (a 2-rank "direct" allreduce), median per call
// The transport settings come from the environment (RINGFOLD_SOCKETS_PER_PEER, RINGFOLD_ZEROCOPY,
// RINGFOLD_URING_SETUP, RINGFOLD_SPIN_US, ...). Listens on 127.0.0.1 only.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rendezvous/file_store.h"
#include "transport/device.h"
#include "transport/memory_region.h"

using namespace ringfold;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int runRank(int rank, const std::string& dir, const std::string& mode, size_t size, int reps, int resultFd) {
  rendezvous::FileStore store(dir);
  auto device = transport::createDevice("tcp_uring");
  auto peers = device->connectAll(store, "bench", rank, 2, std::chrono::seconds(30));
  transport::Connection& peer = *peers[1 - rank];
  const auto t = std::chrono::seconds(60);
  const int window = 4;
  std::vector<std::vector<char>> bufs(window, std::vector<char>(std::max<size_t>(size, 1), static_cast<char>(rank)));
  std::vector<std::unique_ptr<transport::PlainMemoryRegion>> regions;
  for (auto& b : bufs) regions.push_back(std::make_unique<transport::PlainMemoryRegion>(b.data(), size));
  std::vector<char> ack(1);
  transport::PlainMemoryRegion ackRegion(ack.data(), 1);
  std::vector<double> samples;
  uint64_t tag = 0;

  if (mode == "bw") {
    size_t perRep = std::max<size_t>(size * window, std::min<size_t>(512u << 20, size * 256));
    int msgs = static_cast<int>(perRep / std::max<size_t>(size, 1));
    msgs = std::max(window, msgs - msgs % window);
    for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
      auto start = Clock::now();
      // A sliding window: message m + window is posted as soon as message m completes, as a
      // pipelined collective would.
      std::vector<std::unique_ptr<transport::Request>> inflight(window);
      for (int m = 0; m < msgs + window; ++m) {
        int slot = m % window;
        if (inflight[slot]) inflight[slot]->wait(t);
        if (m < msgs) {
          inflight[slot] = rank == 0 ? peer.isend(*regions[slot], 0, size, tag + m)
                                     : peer.irecv(*regions[slot], 0, size, tag + m);
        } else {
          inflight[slot].reset();
        }
      }
      tag += msgs;
      if (rank == 1) {
        peer.isend(ackRegion, 0, 1, ++tag)->wait(t);
      } else {
        peer.irecv(ackRegion, 0, 1, ++tag)->wait(t);
      }
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      if (rep >= 0) samples.push_back(static_cast<double>(msgs) * size / secs / 1e9);
    }
  } else if (mode == "lat") {
    for (int i = -100; i < reps; ++i) {
      auto start = Clock::now();
      if (rank == 0) {
        auto r = peer.irecv(*regions[1], 0, size, 2);
        peer.isend(*regions[0], 0, size, 1)->wait(t);
        r->wait(t);
      } else {
        auto r = peer.irecv(*regions[1], 0, size, 1);
        r->wait(t);
        peer.isend(*regions[0], 0, size, 2)->wait(t);
      }
      if (i >= 0) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
    }
  } else if (mode == "exchange") {
    std::vector<float> acc(size / sizeof(float), 1.0f);
    for (int i = -100; i < reps; ++i) {
      auto start = Clock::now();
      auto r = peer.irecv(*regions[1], 0, size, 1);
      auto s = peer.isend(*regions[0], 0, size, 1);
      r->wait(t);
      const float* in = reinterpret_cast<const float*>(bufs[1].data());
      for (size_t k = 0; k < acc.size(); ++k) acc[k] += in[k];
      s->wait(t);
      if (i >= 0) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (rank == 0) {
    double m = median(samples);
    (void)!write(resultFd, &m, sizeof(m));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s bw|lat|exchange SIZE [REPS]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  size_t size = std::strtoull(argv[2], nullptr, 10);
  int reps = argc > 3 ? std::atoi(argv[3]) : (mode == "bw" ? 5 : 2000);
  char tmpl[] = "/tmp/rf_bench_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) {
      int rc = 1;
      try {
        rc = runRank(r, dir, mode, size, reps, fds[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(rc);
    }
  }
  int ok = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  std::filesystem::remove_all(dir);
  double result = 0;
  if (ok != 2 || read(fds[0], &result, sizeof(result)) != sizeof(result)) return 1;
  const char* unit = mode == "bw" ? "GB/s" : "us";
  std::printf("%-8s size=%-10zu sockets=%-2s zc=%-4s setup=%-5s median=%.3f %s\n", mode.c_str(), size,
              getenv("RINGFOLD_SOCKETS_PER_PEER") ? getenv("RINGFOLD_SOCKETS_PER_PEER") : "auto",
              getenv("RINGFOLD_ZEROCOPY") ? getenv("RINGFOLD_ZEROCOPY") : "auto",
              getenv("RINGFOLD_URING_SETUP") ? getenv("RINGFOLD_URING_SETUP") : "auto", result, unit);
  return 0;
}
