// Schedules: the pure index math of the collectives, kept apart so it can be tested alone. The
// schedules built from it, which the executor runs, are in schedule.h / collective_schedules.h.
//
// Vocabulary
//   chunk   : the part of a buffer of `count` elements that ring step logic assigns to one rank.
//             Chunk c of n holds count/n elements, plus one for the first count%n chunks, and
//             chunks are contiguous in rank order (so count < n leaves trailing chunks empty).
//   round   : the ring allreduce of a large buffer runs in rounds (ringRoundElems), each a whole
//             ring over its own part of the buffer, chunked as above.
//   segment : the unit the pipeline moves: a chunk is cut into segments of `segElems`
//             elements (the last one shorter). An empty chunk still has one (empty) segment, so
//             every ring step carries at least one message and its check word.
//   ring    : rank r sends to r+1 and receives from r-1 (mod n).
//             reduce-scatter step s (0..n-2): send chunk r-s-1, receive chunk r-s-2 and fold it
//             into this rank's contribution; after n-1 steps rank r holds chunk r, which was
//             folded in the order r+1, r+2, ..., r (mod n): "acc = acc op next", starting from
//             rank c+1's contribution for chunk c.
//             allgather step s (0..n-2): send chunk r-s, receive chunk r-s-1.
//   direct  : every rank receives every other rank's buffer and folds in rank order 0..n-1,
//             segment by segment (directSegmentBytes) as the segments arrive.
//   tree    : the double binary tree (treeNode): two binary trees over the same ranks, each
//             carrying half of the buffer. Tree 0 is built on positions 0..n-1 (position = rank):
//             position 0 is the root, with one child, the largest power of two below n; any
//             other position p with lowest set bit b has children p - b/2 and p + h, h the
//             largest of b/2, b/4, ... with p + h < n (none when b = 1: odd positions are the
//             leaves). Tree 1 is the same tree over positions n-1-rank (n even) or rank-1 mod n
//             (n odd), so that tree 0's leaves are tree 1's interior nodes: at even n every
//             rank is a leaf in exactly one tree; at odd n rank 0 is interior in both (two trees
//             have n-1 leaves between them). Depth: ceil(log2 n) edges.
//   chain   : broadcast passes segments root -> root+1 -> ... -> root-1 (mod n). Before that
//             every rank sends an empty hello to rank+1, so every rank (the root included)
//             receives a message carrying its neighbour's arguments, whatever it believes the
//             root is: a root mismatch is caught instead of every rank waiting for data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace ringfold::sched {

struct Range {
  size_t offset = 0;  // elements from the start of the buffer
  size_t length = 0;  // elements
};

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Chunk c (0 <= c < n) of `count` elements split over n ranks.
Range chunk(size_t count, int n, int c);
// Segment of the pipelined direct allreduce of `bytes` per rank: about a quarter of the buffer,
// so that folding overlaps the transfer, but at most `segmentBytes` and at least 64 KiB (or
// `segmentBytes` when that is smaller): smaller segments only add per-message cost.
size_t directSegmentBytes(size_t segmentBytes, size_t bytes);
// Elements per segment for segments of at most `segmentBytes` (at least 1).
size_t segmentElems(size_t segmentBytes, size_t elemSize);
// Segments of a range of `length` elements: max(1, ceil(length / segElems)).
size_t segmentCount(size_t length, size_t segElems);
// Segment k of `range` (absolute offsets); the last may be shorter, an empty range gives {off,0}.
Range segment(Range range, size_t segElems, size_t k);

// Elements per round of the ring allreduce: a buffer goes in rounds of n chunks of at most
// `chunkBytes` (at least one element each), the last round shorter, and each round is a whole
// ring allreduce of its elements; chunkBytes 0 puts the whole buffer in one round.
size_t ringRoundElems(size_t count, int n, size_t chunkBytes, size_t elemSize);

// Ring reduce-scatter / allgather chunk indices (see above).
inline int ringReduceSendChunk(int r, int s, int n) { return mod(r - s - 1, n); }
inline int ringReduceRecvChunk(int r, int s, int n) { return mod(r - s - 2, n); }
inline int ringGatherSendChunk(int r, int s, int n) { return mod(r - s, n); }
inline int ringGatherRecvChunk(int r, int s, int n) { return mod(r - s - 1, n); }
// The rank whose contribution starts the fold of chunk c in a ring reduce-scatter.
inline int ringFoldFirst(int c, int n) { return mod(c + 1, n); }

// A rank's links in one of the two trees (-1: none). `tree` is 0 or 1; n >= 1.
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
  int children() const { return (child[0] >= 0) + (child[1] >= 0); }
};
TreeNode treeNode(int rank, int n, int tree);
// Edges from `rank` up to the root of tree `tree` (0 at the root).
int treeDepth(int rank, int n, int tree);
// Edges from `rank` down to its deepest descendant in tree `tree` (0 for a leaf).
int treeHeight(int rank, int n, int tree);

// Rounds of a dissemination barrier: ceil(log2 n) (0 for n = 1).
int disseminationRounds(int n);

// The factor applied once to every reduced element: postScale, divided by n for kAvg.
double finalScale(ReduceOp op, double postScale, int n);

}  // namespace ringfold::sched
