// The two 8-bit float formats NCCL reduces (ncclFloat8e4m3, ncclFloat8e5m2) <-> float32, on raw
// uint8_t bit patterns.
//
// Formats (OCP 8-bit floating point, the encodings of CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2):
//   * E4M3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is
//     NaN; largest finite 448, smallest subnormal 2^-9.
//   * E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like, with infinities
//     (S.11111.00) and NaNs; largest finite 57344, smallest subnormal 2^-16.
//
// Contract
//   * fp8...ToFloat are exact (every 8-bit value is a float32 value); every NaN comes back as
//     float32's canonical quiet NaN (0x7FC00000).
//   * floatToFp8... round to nearest, ties to even, and saturate to the largest finite value,
//     Inf included (CUDA's __NV_SATFINITE, which NCCL's fp8 arithmetic uses: a sum past 448 is
//     448, not a NaN); subnormals are produced exactly; a NaN gives 0x7F (positive), as CUDA's
//     conversion does. tests/reduce/fp8_test.cc checks them against CUDA's own host conversions
//     (cuda_fp8.hpp), where the toolkit is installed, over every float16 value, every rounding
//     boundary and random float32 values.
//   * Pure integer code, RF_HOST_DEVICE: the CPU reducer and the CUDA kernels share it. Internal
//     linkage (static inline), as half.h, for the per-ISA translation units.
#pragma once

#include <cstdint>

#include "reduce/half.h"

namespace ringfold {

namespace fp8_detail {

// One format: M mantissa bits, exponent bias B; the float32 bit patterns of its smallest
// normal value and of half its smallest subnormal (at or below which a value rounds to 0); the
// float32 patterns at or past which a value saturates (`saturateAbove`: strictly above;
// `saturateFrom`: at or above), and the largest finite code.
struct Format {
  uint32_t mantissaBits;
  uint32_t bias;
  uint32_t minNormalBits;
  uint32_t halfMinSubnormalBits;
  uint32_t saturateFrom;  // abs >= this saturates (the tie past the largest value rounds up)
  uint8_t maxFinite;
};

// E4M3: 448 + half an ulp (464) is a tie that rounds to even, down to 448: saturate above it.
RF_HOST_DEVICE static inline constexpr Format e4m3() { return {3, 7, 0x3C800000u, 0x3A800000u, 0x43E80001u, 0x7E}; }
// E5M2: 57344 + half an ulp (61440) would round to even, up, past the largest: saturate from it.
RF_HOST_DEVICE static inline constexpr Format e5m2() { return {2, 15, 0x38800000u, 0x37000000u, 0x47700000u, 0x7B}; }

RF_HOST_DEVICE static inline uint8_t fromFloat(float f, const Format fmt) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7F;                                  // NaN
  if (abs >= fmt.saturateFrom) return static_cast<uint8_t>(sign | fmt.maxFinite);  // Inf too
  const uint32_t drop = 23u - fmt.mantissaBits;
  if (abs >= fmt.minNormalBits) {
    // Rebase the exponent, then round the dropped mantissa bits to nearest even; a carry moves
    // into the exponent, as it should (never past the largest finite value: checked above).
    const uint32_t rebased = abs - ((127u - fmt.bias) << 23);
    const uint32_t rounded = rebased + ((1u << (drop - 1u)) - 1u) + ((rebased >> drop) & 1u);
    return static_cast<uint8_t>(sign | (rounded >> drop));
  }
  if (abs <= fmt.halfMinSubnormalBits) return sign;  // rounds to (signed) zero
  // Subnormal result: round(|f| / 2^(1 - bias - M)) to nearest even. |f| = m * 2^(e - 150).
  const uint32_t e = abs >> 23;
  const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 150u - (fmt.bias + fmt.mantissaBits - 1u) - e;  // 21..24 for both formats
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  uint32_t q = m >> shift;
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may become the smallest normal
  return static_cast<uint8_t>(sign | q);
}

RF_HOST_DEVICE static inline float toFloat(uint8_t v, const Format fmt, bool hasInf) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t abs = v & 0x7Fu;
  const uint32_t exp = abs >> fmt.mantissaBits;
  const uint32_t mant = abs & ((1u << fmt.mantissaBits) - 1u);
  const uint32_t expAll = (1u << (7u - fmt.mantissaBits)) - 1u;
  if (hasInf ? exp == expAll : abs == 0x7Fu) {
    if (hasInf && mant == 0) return bitsToFloat(sign | 0x7F800000u);
    return bitsToFloat(0x7FC00000u);  // NaN
  }
  if (exp == 0) {  // zero or subnormal: mant * 2^(1 - bias - M), exact
    const float unit = bitsToFloat((127u + 1u - fmt.bias - fmt.mantissaBits) << 23);
    return bitsToFloat(sign | floatBits(static_cast<float>(mant) * unit));
  }
  return bitsToFloat(sign | ((exp + 127u - fmt.bias) << 23) | (mant << (23u - fmt.mantissaBits)));
}

}  // namespace fp8_detail

RF_HOST_DEVICE static inline float fp8e4m3ToFloat(uint8_t v) { return fp8_detail::toFloat(v, fp8_detail::e4m3(), false); }
RF_HOST_DEVICE static inline float fp8e5m2ToFloat(uint8_t v) { return fp8_detail::toFloat(v, fp8_detail::e5m2(), true); }
RF_HOST_DEVICE static inline uint8_t floatToFp8e4m3(float f) { return fp8_detail::fromFloat(f, fp8_detail::e4m3()); }
RF_HOST_DEVICE static inline uint8_t floatToFp8e5m2(float f) { return fp8_detail::fromFloat(f, fp8_detail::e5m2()); }

}  // namespace ringfold
