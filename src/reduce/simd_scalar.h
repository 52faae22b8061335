// ScalarSimd: the one-lane "vector" of the portable path, and the exact scalar definition every
// wider path must match bit for bit (the AVX paths also use it for their tails).
//
// Float semantics (the contract of reducer.h):
//   * sum/prod/scale: IEEE float32 (float16, bfloat16, float32) or float64 arithmetic, one
//     rounding per operation, no FMA contraction; any NaN result is the canonical quiet NaN.
//   * max/min: IEEE 754-2019 maximum/minimum: a NaN operand gives the canonical NaN, and
//     -0 < +0 (max(-0,+0) = +0, min(-0,+0) = -0), independent of operand order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "reduce/half.h"

namespace ringfold::reduce_detail {
namespace {

inline constexpr uint32_t kCanonicalNanF = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNanD = 0x7FF8000000000000ull;

inline uint64_t doubleBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
inline double bitsToDouble(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

struct ScalarSimd {
  using VF = float;
  using VD = double;
  static constexpr size_t kF = 1;
  static constexpr size_t kD = 1;
  static constexpr bool kStream = false;  // no non-temporal stores

  static VF splat(float x) { return x; }
  static VD splat(double x) { return x; }

  static VF load(const float* p) { return *p; }
  static VD load(const double* p) { return *p; }
  static VF loadHalf(const uint16_t* p) { return halfToFloat(*p); }
  static VF loadBf16(const uint16_t* p) { return bf16ToFloat(*p); }
  static void store(float* p, VF v) { *p = v; }
  static void store(double* p, VD v) { *p = v; }
  static void storeHalf(uint16_t* p, VF v) { *p = floatToHalf(v); }
  static void storeBf16(uint16_t* p, VF v) { *p = floatToBf16(v); }

  static VF add(VF a, VF b) { return a + b; }
  static VD add(VD a, VD b) { return a + b; }
  static VF mul(VF a, VF b) { return a * b; }
  static VD mul(VD a, VD b) { return a * b; }

  static VF canon(VF r) { return r != r ? bitsToFloat(kCanonicalNanF) : r; }
  static VD canon(VD r) { return r != r ? bitsToDouble(kCanonicalNanD) : r; }

  static VF max(VF a, VF b) {
    if (a != a || b != b) return bitsToFloat(kCanonicalNanF);
    if (a == b) return bitsToFloat(floatBits(a) & floatBits(b));  // +0 wins over -0
    return a > b ? a : b;
  }
  static VF min(VF a, VF b) {
    if (a != a || b != b) return bitsToFloat(kCanonicalNanF);
    if (a == b) return bitsToFloat(floatBits(a) | floatBits(b));  // -0 wins over +0
    return a < b ? a : b;
  }
  static VD max(VD a, VD b) {
    if (a != a || b != b) return bitsToDouble(kCanonicalNanD);
    if (a == b) return bitsToDouble(doubleBits(a) & doubleBits(b));
    return a > b ? a : b;
  }
  static VD min(VD a, VD b) {
    if (a != a || b != b) return bitsToDouble(kCanonicalNanD);
    if (a == b) return bitsToDouble(doubleBits(a) | doubleBits(b));
    return a < b ? a : b;
  }
};

}  // namespace
}  // namespace ringfold::reduce_detail
