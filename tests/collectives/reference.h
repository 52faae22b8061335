// Inputs and sequential references for the collective tests.
//
// Inputs are deterministic in (seed, rank, element) and spread over several binades, so the
// order in which floating-point contributions are folded changes the bits; the reference folds
// them in the documented order (schedules.h: ring chunk c from rank c+1, direct from rank 0,
// tree own then children up each tree; allreduce_plan.h for hierarchical),
// with the same CPU reducer, so a collective must reproduce it exactly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "reduce/reducer.h"

namespace ringfold::testref {

using Bytes = std::vector<std::byte>;

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One element's bits for `dtype`. `narrow` keeps magnitudes near 1 (for products).
inline uint64_t elementBits(DataType t, uint64_t h, bool narrow) {
  const uint64_t sign = (h >> 63) & 1;
  const int spread = narrow ? 2 : 5;  // binades used: [-1, 1) or [-2, 3)
  const int e = static_cast<int>((h >> 40) % spread) - (narrow ? 1 : 2);
  switch (t) {
    case DataType::kFloat16: return (sign << 15) | (uint64_t(15 + e) << 10) | (h & 0x3FF);
    case DataType::kBfloat16: return (sign << 15) | (uint64_t(127 + e) << 7) | (h & 0x7F);
    case DataType::kFloat32: return (sign << 31) | (uint64_t(127 + e) << 23) | (h & 0x7FFFFF);
    case DataType::kFloat64: return (sign << 63) | (uint64_t(1023 + e) << 52) | (h & 0xFFFFFFFFFFFFFull);
    case DataType::kFloat8e4m3: return (sign << 7) | (uint64_t(7 + e) << 3) | (h & 0x7);
    case DataType::kFloat8e5m2: return (sign << 7) | (uint64_t(15 + e) << 2) | (h & 0x3);
    case DataType::kBool: return h & 1;
    default:
      if (narrow) return static_cast<uint64_t>(static_cast<int64_t>(h % 7) - 3);  // -3..3
      return h;
  }
}

inline Bytes makeInput(DataType t, size_t count, int rank, uint64_t seed, bool narrow = false) {
  const size_t es = dataTypeSize(t);
  Bytes out(count * es);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = elementBits(t, mix(seed * 1000003 + rank * 7919 + i * 0x100000001b3ull), narrow);
    std::memcpy(out.data() + i * es, &bits, es);  // little-endian: the low bytes
  }
  return out;
}

// Chunk c of count over n: the documented rule, restated here independently.
inline void chunkOf(size_t count, int n, int c, size_t& offset, size_t& length) {
  const size_t base = count / n, extra = count % n, uc = static_cast<size_t>(c);
  offset = uc * base + std::min(uc, extra);
  length = base + (uc < extra ? 1 : 0);
}

// Folds elements [offset, offset+length) of every (pre-scaled) contribution in the order
// first, first+1, ... (mod n) into out, applying finalScale in the last fold.
inline void foldRange(Reducer& red, const std::vector<Bytes>& contributions, size_t offset, size_t length,
                      int first, DataType t, ReduceOp op, double finalScale, std::byte* out) {
  const int n = static_cast<int>(contributions.size());
  const size_t es = dataTypeSize(t);
  if (length == 0) return;
  const ReduceOp fold = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  std::memcpy(out, contributions[first].data() + offset * es, length * es);
  if (n == 1) {
    if (finalScale != 1.0) red.scale(out, out, length, t, finalScale);
    return;
  }
  for (int j = 1; j < n; ++j) {
    const int r = (first + j) % n;
    red.reduce(out, out, contributions[r].data() + offset * es, length, t, fold, j == n - 1 ? finalScale : 1.0);
  }
}

inline std::vector<Bytes> preScaled(Reducer& red, const std::vector<Bytes>& inputs, DataType t, double preScale) {
  if (preScale == 1.0) return inputs;
  std::vector<Bytes> out = inputs;
  const size_t es = dataTypeSize(t);
  for (auto& b : out) red.scale(b.data(), b.data(), b.size() / es, t, preScale);
  return out;
}

inline double finalScaleOf(ReduceOp op, double postScale, int n) {
  return op == ReduceOp::kAvg ? postScale / n : postScale;
}

enum class RefAlgo { kRing, kDirect, kTree };

// Children of `rank` in tree `tree` (0 or 1) of the double binary tree over n ranks, restated:
// tree 0 on positions = ranks, position 0's one child the largest power of two below n, any
// other position p with lowest set bit b has children p - b/2 and p + h (h the largest of b/2,
// b/4, ... with p + h < n; none for odd p); tree 1 the same on positions n-1-rank (n even) or
// rank-1 mod n (n odd).
inline void treeChildren(int n, int tree, int rank, int out[2]) {
  auto pos = [&](int r) { return tree == 0 ? r : (n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n); };
  auto rankAt = [&](int p) { return tree == 0 ? p : (n % 2 == 0 ? n - 1 - p : (p + 1) % n); };
  const int p = pos(rank);
  out[0] = out[1] = -1;
  if (p == 0) {
    int h = 1;
    while (h * 2 < n) h *= 2;
    if (n > 1) out[0] = rankAt(h);
    return;
  }
  const int b = p & -p;
  if (b == 1) return;
  out[0] = rankAt(p - b / 2);
  int h = b / 2;
  while (h > 0 && p + h >= n) h /= 2;
  if (h > 0) out[1] = rankAt(p + h);
}

// The tree's fold of [offset, offset+length) at `rank`: own op child0's op child1's, with
// finalScale on the last operation when `root`.
inline void foldTree(Reducer& red, const std::vector<Bytes>& contributions, size_t offset, size_t length, DataType t,
                     ReduceOp op, double finalScale, int tree, int rank, bool root, std::byte* out) {
  const int n = static_cast<int>(contributions.size());
  const size_t es = dataTypeSize(t);
  const ReduceOp fold = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  std::memcpy(out, contributions[rank].data() + offset * es, length * es);
  int child[2];
  treeChildren(n, tree, rank, child);
  const int kids = (child[0] >= 0) + (child[1] >= 0);
  for (int k = 0; k < kids; ++k) {
    Bytes sub(length * es);
    foldTree(red, contributions, offset, length, t, op, finalScale, tree, child[k], false, sub.data());
    red.reduce(out, out, sub.data(), length, t, fold, root && k == kids - 1 ? finalScale : 1.0);
  }
}

// A flat allreduce of (already preScaled) contributions with the given final scale: ring (chunk c
// from rank c+1, in rounds of n chunks of at most ringChunkBytes; 0: one round), direct (rank
// order from 0) or tree (each half of the buffer up its tree).
inline Bytes referenceFlat(Reducer& red, const std::vector<Bytes>& contributions, size_t count, DataType t,
                           ReduceOp op, double f, RefAlgo algo, size_t ringChunkBytes) {
  const int n = static_cast<int>(contributions.size());
  const size_t es = dataTypeSize(t);
  Bytes out(count * es);
  if (algo == RefAlgo::kDirect || n == 1) {
    foldRange(red, contributions, 0, count, 0, t, op, f, out.data());
    return out;
  }
  if (algo == RefAlgo::kTree) {
    for (int tree = 0; tree < 2; ++tree) {
      size_t off, len;
      chunkOf(count, 2, tree, off, len);
      const int root = tree == 0 ? 0 : (n % 2 == 0 ? n - 1 : 1);
      if (len > 0) foldTree(red, contributions, off, len, t, op, f, tree, root, true, out.data() + off * es);
    }
    return out;
  }
  const size_t perChunk = ringChunkBytes / es > 0 ? ringChunkBytes / es : 1;
  const size_t round = ringChunkBytes == 0 ? count : n * perChunk;
  for (size_t start = 0; start < count; start += round) {
    const size_t inRound = std::min(round, count - start);
    for (int c = 0; c < n; ++c) {
      size_t off, len;
      chunkOf(inRound, n, c, off, len);
      foldRange(red, contributions, start + off, len, (c + 1) % n, t, op, f, out.data() + (start + off) * es);
    }
  }
  return out;
}

// allreduce reference of one flat algorithm (see referenceFlat).
inline Bytes referenceAllreduce(Reducer& red, const std::vector<Bytes>& inputs, size_t count, DataType t,
                                ReduceOp op, double preScale, double postScale, RefAlgo algo, size_t ringChunkBytes) {
  const int n = static_cast<int>(inputs.size());
  return referenceFlat(red, preScaled(red, inputs, t, preScale), count, t, op, finalScaleOf(op, postScale, n), algo,
                       ringChunkBytes);
}
inline Bytes referenceAllreduce(Reducer& red, const std::vector<Bytes>& inputs, size_t count, DataType t,
                                ReduceOp op, double preScale, double postScale, bool ring, size_t ringChunkBytes) {
  return referenceAllreduce(red, inputs, count, t, op, preScale, postScale, ring ? RefAlgo::kRing : RefAlgo::kDirect,
                            ringChunkBytes);
}

// Hierarchical allreduce reference, hosts of `local` consecutive ranks: block c of count over
// `local` is folded on each host in the ring reduce-scatter's order (from local rank c+1), then
// the hosts' partial blocks go through the `cross` algorithm with the final scale.
inline Bytes referenceHierarchical(Reducer& red, const std::vector<Bytes>& inputs, size_t count, DataType t,
                                   ReduceOp op, double preScale, double postScale, int local, RefAlgo cross,
                                   size_t ringChunkBytes) {
  const int n = static_cast<int>(inputs.size());
  const int hosts = n / local;
  const size_t es = dataTypeSize(t);
  auto contributions = preScaled(red, inputs, t, preScale);
  Bytes out(count * es);
  for (int c = 0; c < local; ++c) {
    size_t off, len;
    chunkOf(count, local, c, off, len);
    std::vector<Bytes> partials;
    for (int h = 0; h < hosts; ++h) {
      std::vector<Bytes> mine(contributions.begin() + h * local, contributions.begin() + (h + 1) * local);
      Bytes p(len * es);
      foldRange(red, mine, off, len, (c + 1) % local, t, op, 1.0, p.data());
      partials.push_back(std::move(p));
    }
    Bytes block = referenceFlat(red, partials, len, t, op, finalScaleOf(op, postScale, n), cross, ringChunkBytes);
    if (len > 0) std::memcpy(out.data() + off * es, block.data(), len * es);
  }
  return out;
}

// reduce-scatter reference: block `rank` of recvCount elements, folded from rank+1.
inline Bytes referenceReduceScatter(Reducer& red, const std::vector<Bytes>& inputs, size_t recvCount, DataType t,
                                    ReduceOp op, double preScale, double postScale, int rank) {
  const int n = static_cast<int>(inputs.size());
  auto contributions = preScaled(red, inputs, t, preScale);
  Bytes out(recvCount * dataTypeSize(t));
  foldRange(red, contributions, rank * recvCount, recvCount, (rank + 1) % n, t, op,
            finalScaleOf(op, postScale, n), out.data());
  return out;
}

}  // namespace ringfold::testref
