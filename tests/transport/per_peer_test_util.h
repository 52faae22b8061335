// Shared by the per_peer tests and the forked collectives test: one pass of allreduce (ring and
// direct), allgather, broadcast and alltoall whose results each rank can check alone, over any
// communicator; and the environment of a forked rank started like torchrun.
#pragma once

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "transport/device.h"

namespace ringfold::test {

// True (with the reason in `why`) when io_uring cannot run here: tests of tcp_uring skip.
inline bool uringUnavailable(std::string& why) {
  try {
    transport::createDevice("tcp_uring");
    return false;
  } catch (const std::exception& e) {
    why = e.what();
    return true;
  }
}

// A TCP port of 127.0.0.1 that was free a moment ago (for a job's store).
inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// In a forked child: rank `rank` of `size` started like torchrun (store on 127.0.0.1:port, hosted
// by rank 0), over tcp_uring, with every other launcher's variables cleared.
inline void setForkedRankEnvironment(int rank, int size, int localRank, int localSize, int port) {
  for (const char* v : {"RINGFOLD_RANK", "RINGFOLD_SIZE", "HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID",
                        "RINGFOLD_STORE_ADDR", "RINGFOLD_STORE_PORT", "RINGFOLD_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                        "HOROVOD_GLOO_IFACE"}) {
    unsetenv(v);
  }
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(localRank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(localSize).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("RINGFOLD_SECRET", "forked-test-secret", 1);
  setenv("RINGFOLD_TRANSPORT", "tcp_uring", 1);
  setenv("RINGFOLD_START_TIMEOUT", "20", 1);
}

// Runs the collectives; returns how many results were wrong on this rank (and says which).
inline int checkCollectives(Communicator& comm, size_t count = 20011) {
  const int n = comm.size(), r = comm.rank();
  int wrong = 0;
  for (auto algo : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect}) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i % 97) + r);
    AllreduceOptions o;
    o.sendbuf = o.recvbuf = buf.data();
    o.count = count;
    o.algorithm = algo;
    allreduce(comm, o);
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (i % 97) + n * (n - 1) / 2);
      if (buf[i] != want) {
        std::fprintf(stderr, "rank %d: allreduce[%zu] = %g, want %g\n", r, i, buf[i], want);
        ++wrong;
        break;
      }
    }
  }
  std::vector<int32_t> all(static_cast<size_t>(n) * 3), mine = {r, r + 1, r + 2};
  AllgatherOptions g;
  g.sendbuf = mine.data();
  g.recvbuf = all.data();
  g.sendCount = 3;
  g.dtype = DataType::kInt32;
  allgather(comm, g);
  for (int i = 0; i < n; ++i) wrong += all[i * 3] != i || all[i * 3 + 2] != i + 2;
  for (int root = 0; root < n; ++root) {
    std::vector<double> b(5000, r == root ? 2.5 + root : 0.0);
    BroadcastOptions bo;
    bo.sendbuf = bo.recvbuf = b.data();
    bo.count = b.size();
    bo.dtype = DataType::kFloat64;
    bo.root = root;
    broadcast(comm, bo);
    for (double v : b) {
      if (v != 2.5 + root) {
        std::fprintf(stderr, "rank %d: broadcast from %d wrong\n", r, root);
        ++wrong;
        break;
      }
    }
  }
  // Rank r sends (r + 1) * (p + 1) elements valued 1000 r + p to rank p.
  std::vector<size_t> sendCounts(n), recvCounts(n);
  std::vector<int64_t> send, recv;
  for (int p = 0; p < n; ++p) {
    sendCounts[p] = static_cast<size_t>((r + 1) * (p + 1));
    recvCounts[p] = static_cast<size_t>((p + 1) * (r + 1));
    send.insert(send.end(), sendCounts[p], 1000 * r + p);
  }
  size_t total = 0;
  for (size_t c : recvCounts) total += c;
  recv.resize(total);
  AlltoallOptions ao;
  ao.sendbuf = send.data();
  ao.recvbuf = recv.data();
  ao.sendCounts = sendCounts;
  ao.recvCounts = recvCounts;
  ao.dtype = DataType::kInt64;
  alltoall(comm, ao);
  size_t at = 0;
  for (int p = 0; p < n; ++p) {
    for (size_t k = 0; k < recvCounts[p]; ++k) {
      if (recv[at + k] != 1000 * p + r) {
        std::fprintf(stderr, "rank %d: alltoall from %d wrong\n", r, p);
        ++wrong;
        break;
      }
    }
    at += recvCounts[p];
  }
  barrier(comm);
  return wrong;
}

}  // namespace ringfold::test
