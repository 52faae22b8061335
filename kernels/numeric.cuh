// Numeric helpers of the kernels' element rules (reduce_ops.cuh), __host__ __device__: which
// compute types are floating point, bit casts, the canonical NaN, the sign rules of max/min at
// zero, and integer conversion with saturation (truncated toward zero, NaN gives 0), all exactly
// as the CPU reducer computes them.
#pragma once

#include <cmath>
#include <cstdint>

#include "reduce/half.h"

namespace ringfold::cuda {

template <class C> inline constexpr bool kIsFloat = false;
template <> inline constexpr bool kIsFloat<float> = true;
template <> inline constexpr bool kIsFloat<double> = true;

RF_HOST_DEVICE inline float canonicalNan(float) { return bitsToFloat(0x7FC00000u); }
RF_HOST_DEVICE inline double canonicalNan(double) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7FF8000000000000ll);
#else
  return __builtin_bit_cast(double, uint64_t{0x7FF8000000000000ull});
#endif
}
RF_HOST_DEVICE inline uint64_t bitsOf(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  return __builtin_bit_cast(uint64_t, d);
#endif
}
RF_HOST_DEVICE inline double doubleOf(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return __builtin_bit_cast(double, u);
#endif
}
template <class C> RF_HOST_DEVICE inline C canon(C r) { return r != r ? canonicalNan(r) : r; }
RF_HOST_DEVICE inline float zeroSignAnd(float a, float b) { return bitsToFloat(floatBits(a) & floatBits(b)); }
RF_HOST_DEVICE inline float zeroSignOr(float a, float b) { return bitsToFloat(floatBits(a) | floatBits(b)); }
RF_HOST_DEVICE inline double zeroSignAnd(double a, double b) { return doubleOf(bitsOf(a) & bitsOf(b)); }
RF_HOST_DEVICE inline double zeroSignOr(double a, double b) { return doubleOf(bitsOf(a) | bitsOf(b)); }

// Integer range as double bounds: kMin exactly, kMax + 1 (a power of two, exact) exclusive.
template <class T> struct IntRange;
template <> struct IntRange<int8_t> { static constexpr int8_t kMin = -128, kMax = 127; };
template <> struct IntRange<uint8_t> { static constexpr uint8_t kMin = 0, kMax = 255; };
template <> struct IntRange<int32_t> { static constexpr int32_t kMin = -2147483647 - 1, kMax = 2147483647; };
template <> struct IntRange<uint32_t> { static constexpr uint32_t kMin = 0, kMax = 4294967295u; };
template <> struct IntRange<int64_t> { static constexpr int64_t kMin = -9223372036854775807ll - 1, kMax = 9223372036854775807ll; };
template <> struct IntRange<uint64_t> { static constexpr uint64_t kMin = 0, kMax = 18446744073709551615ull; };

// x truncated toward zero (C's conversion, as Horovod's scale_buffer_k), saturated to T's range.
template <class T> RF_HOST_DEVICE inline T truncSaturate(double x) {
  constexpr double kLo = static_cast<double>(IntRange<T>::kMin);
  constexpr double kHiExclusive = 2.0 * static_cast<double>(IntRange<T>::kMax / 2 + 1);
  if (x != x) return 0;
  const double r = ::trunc(x);  // toward zero, host and device alike
  if (r <= kLo) return IntRange<T>::kMin;
  if (r >= kHiExclusive) return IntRange<T>::kMax;
  return static_cast<T>(r);
}

}  // namespace ringfold::cuda
