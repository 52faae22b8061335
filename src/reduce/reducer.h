// Reducer: combines buffers element by element. The CPU reducer is cpu_reducer.h; the CUDA one
// (kernels/) implements the same interface on a stream.
//
// Contract
//   * reduce(dst, a, b, n, dtype, op, postScale): dst[i] = (a[i] op b[i]) * postScale.
//     dst may be the same pointer as a or b (in place); partial overlap is not allowed.
//     kAvg reduces like kSum: the caller divides once, at the end, through postScale.
//     float16, bfloat16 and the 8-bit floats are computed in float32 and rounded to nearest-even
//     once per operation, so results do not depend on the vector width. With postScale that is
//     twice, in Horovod's order: a op b is rounded to the narrow type, then multiplied by
//     postScale in float32 and rounded again (Horovod reduces, then scales the buffer). The
//     8-bit floats saturate to their largest finite value instead of overflowing (fp8.h).
//   * scale(dst, src, n, dtype, factor): dst[i] = src[i] * factor; factor 1 is a plain copy.
//   * Integer scaling computes in double and truncates toward zero (C's double-to-integer
//     conversion, which is what Horovod's `output[i] = scale_factor * input[i]` does), then
//     saturates to the type's range (Horovod's out-of-range conversion is undefined; a NaN
//     product gives 0). Integer sums and products wrap (two's complement); the scaling applies
//     to the wrapped result: int(sum * postScale), and int(x * preScale) per rank before it.
//   * Floating point (IEEE, no FMA contraction; float32 ops for float16/bfloat16/float32/8-bit, float64
//     for float64; postScale and factor are converted to that type first):
//       - any NaN result is the canonical quiet NaN (float32 0x7FC00000, float64
//         0x7FF8000000000000, float16 0x7E00, bfloat16 0x7FC0, 8-bit 0x7F), whatever the input payloads;
//       - max/min are IEEE 754-2019 maximum/minimum: a NaN in either operand gives NaN, and
//         -0 < +0 (max(-0,+0) = +0, min(-0,+0) = -0), so the result does not depend on order;
//       - scale() with factor 1 copies bits (NaN payloads included).
//     Results assume the default MXCSR (no flush-to-zero / denormals-are-zero).
//   * Buffers need only element alignment; any count, including 0 (then pointers may be null).
//   * Every call is deterministic: the same inputs give the same bits on every machine path
//     (AVX-512, AVX2, portable), so ranks with different CPUs still agree bitwise.
//   * kBool is not reducible: InvalidArgument.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace ringfold {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype,
                      ReduceOp op, double postScale = 1.0) = 0;
  virtual void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) = 0;
};

}  // namespace ringfold
