// Test data for the bench programs: inputs whose correct results are known exactly, and
// checks that count the elements that differ from them.
//
// Every value is a small integer, so it is exact in every element type (bfloat16 holds the
// integers up to 256, int8 up to 127) and every sum of them is too (for up to 126 ranks):
//   copy   : value(src, i) = (7i + 13src + 3seed) mod 97           (bool: mod 2)
//   sum    : value(r, i) = hash(i, r, seed) mod m, m = clamp(128/size, 2, 8): sums stay < 128
//   min/max: b(i) = (7i + seed) mod 11; on rank s(i) = (i + seed) mod size the value is b(i)
//            (min) or b(i)+8 (max), on the others strictly between: the result is b(i) or
//            b(i)+8 and comes from exactly one rank, so losing any rank's data shows
//   prod   : 2 on rank (i + seed) mod (size+1), else 1: products are 1 or 2
//   avg    : b(i) = 1 + (i + seed) mod k, k = clamp(126/size, 1, 8), on every rank, +d on
//            rank 0 and -d on rank 1 with
//            d = i mod 2: the mean is b(i) exactly (integer types compare exactly; float types
//            allow a few units in the last place, since a reducer may multiply by 1/size).
// `i` is the element's index in the collective's global numbering (e.g. the full vector for
// reduce-scatter) and `seed` changes with every checked iteration, so stale data never passes.
// The expected result is computed here from these formulas, independently of the library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace ringfold::bench {

// Writes value(rank, first + k) for k < count into `buf` (for reductions with `op`).
void fillReduceInput(DataType t, ReduceOp op, void* buf, size_t count, size_t first, int rank,
                     int nranks, uint64_t seed);
// Elements of `buf` that differ from the reduction over all ranks at indices first + k.
int64_t checkReduceOutput(DataType t, ReduceOp op, const void* buf, size_t count, size_t first,
                          int nranks, uint64_t seed);

// Copy collectives: the values rank `src` contributes, at indices first + k.
void fillCopyInput(DataType t, void* buf, size_t count, size_t first, int src, uint64_t seed);
int64_t checkCopyOutput(DataType t, const void* buf, size_t count, size_t first, int src,
                        uint64_t seed);

// Bytes of [buf, buf+bytes) that are not `pattern`.
int64_t countNotEqual(const void* buf, size_t bytes, unsigned char pattern);

}  // namespace ringfold::bench
