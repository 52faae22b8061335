// float16 (IEEE binary16) and bfloat16 <-> float32 conversions, on raw uint16_t bit patterns.
//
// Contract
//   * halfToFloat / bf16ToFloat are exact (every 16-bit value is a float32 value). A float16 NaN
//     keeps its sign and payload and comes back quiet (quiet bit set), as x86 F16C does; a
//     bfloat16 is simply the top half of a float32, so its NaNs come back unchanged.
//   * floatToHalf / floatToBf16 round to nearest, ties to even. Values past the largest finite
//     result round to +-Inf; float16 subnormals are produced exactly (no flush to zero). A NaN
//     stays NaN: sign kept, payload truncated to its top bits, quiet bit set (F16C's rule).
//   * Pure integer code, independent of MXCSR / rounding mode; identical to the F16C and AVX-512
//     instructions bit for bit (tests/reduce/half_test.cc checks every float16 value and every
//     rounding boundary against them).
//   * Internal linkage (static inline): the SIMD translation units compiled with different
//     -m flags each keep their own copy, so the linker can never hand one ISA's code to another.
//     RF_HOST_DEVICE makes them callable from CUDA device code under nvcc.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace ringfold {

RF_HOST_DEVICE static inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

RF_HOST_DEVICE static inline float bitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

RF_HOST_DEVICE static inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) {  // Inf or NaN (quieted)
    return bitsToFloat(sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  }
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float32 (the result is normal)
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return bitsToFloat(sign | floatBits(mag));
  }
  return bitsToFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

RF_HOST_DEVICE static inline uint16_t floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: top 10 payload bits, quiet
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: Inf
  if (abs >= 0x38800000u) {  // normal float16 result (>= 2^-14)
    const uint32_t rebased = abs - ((127u - 15u) << 23);
    const uint32_t rounded = rebased + 0xFFFu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to 0
  // Subnormal result: round(|f| * 2^24) to nearest even. |f| = m * 2^(e - 150), 102 <= e < 113.
  const uint32_t e = abs >> 23;
  const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  uint32_t q = m >> shift;
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // q may become 0x400: smallest normal
  return static_cast<uint16_t>(sign | q);
}

RF_HOST_DEVICE static inline float bf16ToFloat(uint16_t b) {
  return bitsToFloat(static_cast<uint32_t>(b) << 16);  // exact, NaN payload and all
}

RF_HOST_DEVICE static inline uint16_t floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Ties to even; a carry out of the mantissa bumps the exponent, up to Inf, as it should.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace ringfold
