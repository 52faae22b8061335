// The element rules of the CUDA kernels, written once as __host__ __device__ functors so that g++
// compiles the same code for the CPU tests (tests/kernels/reduce_ops_test.cc checks them bit for
// bit against the CPU reducer, fp16/bf16 rounding, NaN and Inf included).
//
// Contract (reducer.h's, per element):
//   * Elem<T>: the storage type T and its compute type C (float for float16/bfloat16/float32,
//     double for float64, T itself for integers), with exact load and round-to-nearest-even store.
//   * OpSum/OpProd/OpMax/OpMin::apply(C a, C b): float sum/prod in C (no FMA: kernels are built
//     with --fmad=false), max/min IEEE 754-2019 (NaN wins, -0 < +0); integer sum/prod wrap
//     (computed unsigned), max/min compare as T.
//   * reduceElement(a, b, scales): b is first multiplied by scales.pre and rounded to T (the
//     allreduce's per-rank pre-scale, fused), then a op b, then * scales.post; float results
//     that are NaN become the canonical quiet NaN whenever the op computes (sum, prod) or a
//     scale applies. Integer scaling is in double, rounded half away from zero, saturated.
//   * scaleElement(x, f): x * f by the same rules (callers copy bits when f == 1).
//   * compressElement / decompressElement: float32 -> float16/bfloat16 of x * scale (one
//     float32 multiply, then the round-to-nearest-even conversion of half.h), and back:
//     toFloat(h) * invScale.
//   * powerOfTwoScale(maxAbs, target): the largest power of two s with maxAbs * s <= target,
//     clamped to [2^-126, 2^126]; 1 when maxAbs is 0, Inf or NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "reduce/half.h"

namespace ringfold::cuda {

struct Float16 { uint16_t bits; };   // storage tags for the two 16-bit float formats
struct Bfloat16 { uint16_t bits; };

template <class T> struct Elem {  // integers and float32/float64: stored as computed
  using C = T;
  RF_HOST_DEVICE static C load(T x) { return x; }
  RF_HOST_DEVICE static T store(C x) { return x; }
};
template <> struct Elem<Float16> {
  using C = float;
  RF_HOST_DEVICE static C load(Float16 x) { return halfToFloat(x.bits); }
  RF_HOST_DEVICE static Float16 store(C x) { return Float16{floatToHalf(x)}; }
};
template <> struct Elem<Bfloat16> {
  using C = float;
  RF_HOST_DEVICE static C load(Bfloat16 x) { return bf16ToFloat(x.bits); }
  RF_HOST_DEVICE static Bfloat16 store(C x) { return Bfloat16{floatToBf16(x)}; }
};

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

template <class T> struct Unsigned { using type = T; };
template <> struct Unsigned<int8_t> { using type = uint8_t; };
template <> struct Unsigned<int32_t> { using type = uint32_t; };
template <> struct Unsigned<int64_t> { using type = uint64_t; };

struct OpSum {
  static constexpr bool kComputes = true;
  template <class C> RF_HOST_DEVICE static C apply(C a, C b) {
    if constexpr (kIsFloat<C>) { return a + b; }
    else { using U = typename Unsigned<C>::type; return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  }
};
struct OpProd {
  static constexpr bool kComputes = true;
  template <class C> RF_HOST_DEVICE static C apply(C a, C b) {
    if constexpr (kIsFloat<C>) { return a * b; }
    else { using U = typename Unsigned<C>::type; return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  }
};
struct OpMax {
  static constexpr bool kComputes = false;  // returns an operand or the canonical NaN
  template <class C> RF_HOST_DEVICE static C apply(C a, C b) {
    if constexpr (kIsFloat<C>) {
      if (a != a || b != b) return canonicalNan(a);
      if (a == b) return zeroSignAnd(a, b);  // +0 wins over -0
    }
    return a > b ? a : b;
  }
};
struct OpMin {
  static constexpr bool kComputes = false;
  template <class C> RF_HOST_DEVICE static C apply(C a, C b) {
    if constexpr (kIsFloat<C>) {
      if (a != a || b != b) return canonicalNan(a);
      if (a == b) return zeroSignOr(a, b);  // -0 wins over +0
    }
    return a < b ? a : b;
  }
};

// Integer range as double bounds: kMin exactly, kMax + 1 (a power of two, exact) exclusive.
template <class T> struct IntRange;
template <> struct IntRange<int8_t> { static constexpr int8_t kMin = -128, kMax = 127; };
template <> struct IntRange<uint8_t> { static constexpr uint8_t kMin = 0, kMax = 255; };
template <> struct IntRange<int32_t> { static constexpr int32_t kMin = -2147483647 - 1, kMax = 2147483647; };
template <> struct IntRange<uint32_t> { static constexpr uint32_t kMin = 0, kMax = 4294967295u; };
template <> struct IntRange<int64_t> { static constexpr int64_t kMin = -9223372036854775807ll - 1, kMax = 9223372036854775807ll; };
template <> struct IntRange<uint64_t> { static constexpr uint64_t kMin = 0, kMax = 18446744073709551615ull; };

template <class T> RF_HOST_DEVICE inline T roundSaturate(double x) {
  constexpr double kLo = static_cast<double>(IntRange<T>::kMin);
  constexpr double kHiExclusive = 2.0 * static_cast<double>(IntRange<T>::kMax / 2 + 1);
  if (x != x) return 0;
  const double r = ::round(x);  // halves away from zero, host and device alike
  if (r <= kLo) return IntRange<T>::kMin;
  if (r >= kHiExclusive) return IntRange<T>::kMax;
  return static_cast<T>(r);
}

// Scale factors of one kernel call; hasPre/hasPost false means exactly 1 (no arithmetic).
struct Scales {
  double pre = 1.0;
  double post = 1.0;
  bool hasPre = false;
  bool hasPost = false;
};

template <class T> RF_HOST_DEVICE inline T scaleElement(T x, double factor) {
  using C = typename Elem<T>::C;
  if constexpr (kIsFloat<C>) {
    return Elem<T>::store(canon(static_cast<C>(Elem<T>::load(x) * static_cast<C>(factor))));
  } else {
    return roundSaturate<T>(static_cast<double>(x) * factor);
  }
}

template <class T, class Op> RF_HOST_DEVICE inline T reduceElement(T a, T b, const Scales& s) {
  using C = typename Elem<T>::C;
  if (s.hasPre) b = scaleElement(b, s.pre);
  C r = Op::apply(Elem<T>::load(a), Elem<T>::load(b));
  if constexpr (kIsFloat<C>) {
    if (s.hasPost) r = r * static_cast<C>(s.post);
    if (Op::kComputes || s.hasPost) r = canon(r);
    return Elem<T>::store(r);
  } else {
    return s.hasPost ? roundSaturate<T>(static_cast<double>(r) * s.post) : r;
  }
}

template <class H> RF_HOST_DEVICE inline H compressElement(float x, float scale) {
  return Elem<H>::store(x * scale);
}
template <class H> RF_HOST_DEVICE inline float decompressElement(H h, float invScale) {
  return Elem<H>::load(h) * invScale;
}

RF_HOST_DEVICE inline float powerOfTwoScale(float maxAbs, float target) {
  if (!(maxAbs > 0.0f) || maxAbs > 3.4028234663852886e38f) return 1.0f;  // 0, NaN, Inf
  int e = 126;
  const float ratio = target / maxAbs;  // may round up (checked below) or overflow to Inf
  if (ratio <= 3.4028234663852886e38f) {
    (void)::frexpf(ratio, &e);  // ratio = m * 2^e, m in [0.5, 1)
    e -= 1;                     // 2^e <= ratio
  }
  if (e > 126) e = 126;
  if (e < -126) e = -126;
  float s = ::ldexpf(1.0f, e);
  while (e > -126 && maxAbs * s > target) s = ::ldexpf(1.0f, --e);
  return s;
}

}  // namespace ringfold::cuda
