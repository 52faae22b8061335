#include "collectives/check.h"

#include "common/error.h"

namespace ringfold::coll {

namespace {
constexpr uint64_t kCountMask = (uint64_t{1} << 40) - 1;

bool isAllreduce(Kind k) {
  return k == Kind::kAllreduceRing || k == Kind::kAllreduceDirect || k == Kind::kAllreduceTree ||
         k == Kind::kAllreduceHierarchical;
}

// The arguments a kind checks, as "count=100 dtype=float op=sum".
std::string describeArgs(const CheckFields& f) {
  switch (f.kind) {
    case Kind::kAllreduceRing:
    case Kind::kAllreduceDirect:
    case Kind::kAllreduceTree:
    case Kind::kAllreduceHierarchical:
    case Kind::kReduceScatter:
      return detail::concat("count=", f.count, " dtype=", dataTypeName(f.dtype), " op=", reduceOpName(f.op));
    case Kind::kAllgather:
    case Kind::kAlltoall:
    case Kind::kSendRecv:
      return detail::concat("count=", f.count, " dtype=", dataTypeName(f.dtype));
    case Kind::kAllgatherv:
      return detail::concat("recvCounts#", std::hex, f.count, std::dec, " dtype=", dataTypeName(f.dtype));
    case Kind::kBroadcast:
      return detail::concat("count=", f.count, " dtype=", dataTypeName(f.dtype), " root=", f.root);
    case Kind::kReduce:
      return detail::concat("count=", f.count, " dtype=", dataTypeName(f.dtype), " op=", reduceOpName(f.op),
                            " root=", f.root);
    case Kind::kAlltoallCounts:
      return detail::concat("ranks=", f.count);
    case Kind::kBarrier:
      return "";
  }
  return "?";
}

const char* algorithmOf(Kind k) {
  switch (k) {
    case Kind::kAllreduceRing: return "ring";
    case Kind::kAllreduceDirect: return "direct";
    case Kind::kAllreduceTree: return "tree";
    default: return "hierarchical";
  }
}
}  // namespace

// The fields' widths hold every value they carry: a new kind, dtype or op past them would make
// two different calls look alike.
static_assert(static_cast<int>(Kind::kLastKind) < 32, "kind has 5 bits in the check word");
static_assert(kNumDataTypes <= 16, "dtype has 4 bits in the check word");
static_assert(kNumReduceOps <= 8, "op has 3 bits in the check word");

uint64_t packCheck(const CheckFields& f) {
  return (static_cast<uint64_t>(f.kind) & 0x1F) | ((static_cast<uint64_t>(f.dtype) & 0xF) << 5) |
         ((static_cast<uint64_t>(f.op) & 0x7) << 9) | ((static_cast<uint64_t>(f.root) & 0xFFF) << 12) |
         ((f.count & kCountMask) << 24);
}

CheckFields unpackCheck(uint64_t c) {
  CheckFields f;
  f.kind = static_cast<Kind>(c & 0x1F);
  f.dtype = static_cast<DataType>((c >> 5) & 0xF);
  f.op = static_cast<ReduceOp>((c >> 9) & 0x7);
  f.root = static_cast<uint32_t>((c >> 12) & 0xFFF);
  f.count = (c >> 24) & kCountMask;
  return f;
}

uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;
  for (size_t v : counts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xFF;
      h *= 1099511628211ull;
    }
  }
  return (h ^ (h >> 40)) & kCountMask;
}

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduceRing:
    case Kind::kAllreduceDirect:
    case Kind::kAllreduceTree:
    case Kind::kAllreduceHierarchical: return "allreduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllgather: return "allgather";
    case Kind::kAllgatherv: return "allgatherv";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kReduce: return "reduce";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kAlltoallCounts: return "alltoall count exchange";
    case Kind::kBarrier: return "barrier";
    case Kind::kSendRecv: return "send/recv";
  }
  return "unknown collective";
}

std::string describeMismatch(const transport::CheckMismatch& m, int me) {
  const int other = m.peerRank;
  const CheckFields theirs = unpackCheck(m.actualCheck);
  const CheckFields mine = unpackCheck(m.expectedCheck);
  const bool known = static_cast<int>(theirs.kind) >= 1 && static_cast<int>(theirs.kind) <= static_cast<int>(Kind::kLastKind);
  if (m.actualCheck == m.expectedCheck || !known) {
    return detail::concat(known ? kindName(mine.kind) : "collective", " messages differ between ranks: rank ", other,
                          " sent ", m.actualLength, " bytes (check 0x", std::hex, m.actualCheck, std::dec,
                          "), rank ", me, " expected ", m.expectedLength, " bytes (check 0x", std::hex,
                          m.expectedCheck, std::dec, ")");
  }
  if (isAllreduce(theirs.kind) && isAllreduce(mine.kind) && theirs.kind != mine.kind) {
    CheckFields a = theirs, b = mine;
    a.kind = b.kind = Kind::kAllreduceRing;
    if (packCheck(a) == packCheck(b)) {
      return detail::concat("allreduce algorithms differ between ranks: rank ", other, " chose ",
                            algorithmOf(theirs.kind), ", rank ", me, " chose ", algorithmOf(mine.kind),
                             " (set RINGFOLD_ALGO, RINGFOLD_DIRECT_MAX_BYTES and RINGFOLD_HIERARCHICAL_ALLREDUCE alike on every rank)");
    }
    return detail::concat("allreduce arguments differ between ranks: rank ", other, " passed ",
                          describeArgs(theirs), " (", algorithmOf(theirs.kind), "), rank ", me,
                          " passed ", describeArgs(mine), " (", algorithmOf(mine.kind), ")");
  }
  if (theirs.kind != mine.kind) {
    return detail::concat("collectives differ between ranks: rank ", other, " called ", kindName(theirs.kind),
                          "(", describeArgs(theirs), "), rank ", me, " called ", kindName(mine.kind), "(",
                          describeArgs(mine), ")");
  }
  if (mine.kind == Kind::kAlltoall) {
    return detail::concat("alltoall arguments differ between ranks: rank ", other, " sends ",
                          describeArgs(theirs), " to rank ", me, ", rank ", me, " expects ",
                          describeArgs(mine), " from rank ", other);
  }
  if (mine.kind == Kind::kSendRecv) {
    return detail::concat("send/recv arguments differ: rank ", other, " sent ", describeArgs(theirs),
                          ", rank ", me, " expected ", describeArgs(mine));
  }
  return detail::concat(kindName(mine.kind), " arguments differ between ranks: rank ", other, " passed ",
                        describeArgs(theirs), ", rank ", me, " passed ", describeArgs(mine));
}

}  // namespace ringfold::coll
