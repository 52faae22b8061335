// Shared by the per_peer tests: one pass of allreduce (ring and direct), allgather, broadcast and
// alltoall whose results each rank can check alone, over any communicator.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "collectives/collectives.h"

namespace ringfold::test {

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
