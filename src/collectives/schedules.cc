#include "collectives/schedules.h"

#include <algorithm>

namespace ringfold::sched {

Range chunk(size_t count, int n, int c) {
  const size_t base = count / n;
  const size_t extra = count % n;
  const size_t uc = static_cast<size_t>(c);
  Range r;
  r.offset = uc * base + std::min(uc, extra);
  r.length = base + (uc < extra ? 1 : 0);
  return r;
}

size_t directSegmentBytes(size_t segmentBytes, size_t bytes) {
  constexpr size_t kMinBytes = size_t{64} << 10;
  return std::min(segmentBytes, std::max(kMinBytes, bytes / 4));
}

size_t segmentElems(size_t segmentBytes, size_t elemSize) {
  return std::max<size_t>(1, segmentBytes / elemSize);
}

size_t segmentCount(size_t length, size_t segElems) {
  return length == 0 ? 1 : (length + segElems - 1) / segElems;
}

Range segment(Range range, size_t segElems, size_t k) {
  Range s;
  const size_t start = std::min(range.length, k * segElems);
  s.offset = range.offset + start;
  s.length = std::min(segElems, range.length - start);
  return s;
}

size_t ringRoundElems(size_t count, int n, size_t chunkBytes, size_t elemSize) {
  if (chunkBytes == 0) return count;
  return std::min(count, static_cast<size_t>(n) * std::max<size_t>(1, chunkBytes / elemSize));
}

namespace {
int lowBit(int p) { return p & -p; }
int highestPowerOfTwoBelow(int n) {
  int h = 1;
  while (h * 2 < n) h *= 2;
  return h;
}
// Tree 0 on positions (see the vocabulary above).
TreeNode treeOnPositions(int p, int n) {
  TreeNode t;
  if (p == 0) {
    if (n > 1) t.child[0] = highestPowerOfTwoBelow(n);
    return t;
  }
  const int b = lowBit(p);
  // Parent: p is the left child of p + b when bit 2b of p is clear and p + b exists; otherwise
  // p is the right child of p - b (reached by halving from the top when p + b is out of range).
  // Position 0 is the parent of the largest power of two below n.
  if ((p & (2 * b)) == 0 && p + b < n) {
    t.parent = p + b;
  } else {
    t.parent = p - b;
  }
  if (b > 1) {
    t.child[0] = p - b / 2;
    int h = b / 2;
    while (h > 0 && p + h >= n) h /= 2;
    if (h > 0) t.child[1] = p + h;
  }
  return t;
}
}  // namespace

TreeNode treeNode(int rank, int n, int tree) {
  if (tree == 0) return treeOnPositions(rank, n);
  const bool mirror = n % 2 == 0;
  auto toPos = [&](int r) { return mirror ? n - 1 - r : mod(r - 1, n); };
  auto toRank = [&](int p) { return p < 0 ? -1 : (mirror ? n - 1 - p : mod(p + 1, n)); };
  const TreeNode at = treeOnPositions(toPos(rank), n);
  TreeNode t;
  t.parent = toRank(at.parent);
  t.child[0] = toRank(at.child[0]);
  t.child[1] = toRank(at.child[1]);
  return t;
}

int treeDepth(int rank, int n, int tree) {
  int depth = 0;
  for (int r = treeNode(rank, n, tree).parent; r >= 0; r = treeNode(r, n, tree).parent) ++depth;
  return depth;
}

int treeHeight(int rank, int n, int tree) {
  const TreeNode node = treeNode(rank, n, tree);
  int height = 0;
  for (int child : node.child) {
    if (child >= 0) height = std::max(height, 1 + treeHeight(child, n, tree));
  }
  return height;
}

int disseminationRounds(int n) {
  int rounds = 0;
  for (int reach = 1; reach < n; reach *= 2) ++rounds;
  return rounds;
}

double finalScale(ReduceOp op, double postScale, int n) {
  return op == ReduceOp::kAvg ? postScale / n : postScale;
}

}  // namespace ringfold::sched
