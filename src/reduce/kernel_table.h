// KernelTable: the per-ISA entry points of the CPU reducer (internal to src/reduce).
//
// kernels_portable.cc, kernels_avx2.cc and kernels_avx512.cc compile the same templates
// (reduce_kernels.h) with different -m flags; each exports only its table getter, and
// cpu_reducer.cc calls a table's functions only after checking the CPU supports that ISA.
// Arguments are validated by the caller: non-null pointers when count > 0, a reducible dtype,
// op in sum/prod/max/min (avg is sum), dst equal to or disjoint from each source.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace ringfold::reduce_detail {

// dst[i] = (a[i] op b[i]) * scale (scaled variant) or a[i] op b[i] (unscaled variant).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count, double scale);
// dst[i] = src[i] * factor.
using ScaleFn = void (*)(void* dst, const void* src, size_t count, double factor);

inline constexpr int kNumKernelOps = 4;  // sum, prod, max, min (ReduceOp values 0..3)

struct KernelTable {
  ReduceFn reduce[kNumDataTypes][kNumKernelOps][2];  // [dtype][op][scaled]
  ScaleFn scale[kNumDataTypes];
  // The same reductions with non-temporal stores, for large out-of-place calls (the result
  // bypasses the caches instead of evicting the inputs). Null where the path has none
  // (portable) and for scaled integer reductions (scalar).
  ReduceFn reduceStream[kNumDataTypes][kNumKernelOps][2];
};

const KernelTable& portableKernels();
const KernelTable& avx2Kernels();
const KernelTable& avx512Kernels();

}  // namespace ringfold::reduce_detail
