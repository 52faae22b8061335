// Check words and tags: how a collective labels its messages so that ranks that disagree are
// caught by a receiver, and how the disagreement is explained.
//
// Check word (64 bits, transport's `check`):
//   bits 0-4 kind | 5-8 dtype | 9-11 op | 12-23 root mod 4096 | 24-63 count mod 2^40
// `count` is the collective's element count (reduce-scatter: recvCount; alltoall and send/recv:
// the count of that one message; allgatherv: a 40-bit hash of recvCounts).
//
// Tags: bit 63 clear for collectives: (sequence << 16) | sub, where `sub` numbers the phases
// and steps of one call (the first message every rank receives from rank r-1 has sub 0, so
// two different collectives at the same sequence always meet and compare check words).
// Point-to-point messages set bit 63 and use their own FIFO (they take no sequence number).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "transport/connection.h"

namespace ringfold::coll {

enum class Kind : uint8_t {
  kAllreduceRing = 1,
  kAllreduceDirect,
  kReduceScatter,
  kAllgather,
  kAllgatherv,
  kBroadcast,
  kAlltoall,
  kAlltoallCounts,
  kBarrier,
  kSendRecv,
  kAllreduceTree,
  kAllreduceHierarchical,  // the local phases of a hierarchical allreduce
  kReduce,                 // reduce to one root (chain)
  kLastKind = kReduce,
};

struct CheckFields {
  Kind kind = Kind::kBarrier;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  uint32_t root = 0;
  uint64_t count = 0;
};

uint64_t packCheck(const CheckFields& fields);
CheckFields unpackCheck(uint64_t check);
// 40-bit FNV-1a hash of a count vector (for allgatherv's check word).
uint64_t hashCounts(const std::vector<size_t>& counts);

inline uint64_t collectiveTag(uint64_t sequence, uint32_t sub) {
  return ((sequence << 16) | (sub & 0xFFFF)) & ~(uint64_t{1} << 63);
}
inline constexpr uint64_t kSendRecvTag = uint64_t{1} << 63;

// The user-facing name of a kind ("allreduce", "reduce_scatter", ...).
const char* kindName(Kind kind);
// A readable explanation of a check mismatch seen by `myRank`, e.g.
//   "allreduce arguments differ between ranks: rank 1 passed count=101 dtype=float op=sum,
//    rank 0 passed count=100 dtype=float op=sum"
std::string describeMismatch(const transport::CheckMismatch& m, int myRank);

}  // namespace ringfold::coll
