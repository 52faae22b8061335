// The element rules of the CUDA kernels, written once as __host__ __device__ functors so that g++
// compiles the same code for the CPU tests (tests/kernels/reduce_ops_test.cc checks them bit for
// bit against the CPU reducer, fp16/bf16 rounding, NaN and Inf included).
//
// Contract (reducer.h's, per element):
//   * Elem<T>: the storage type T and its compute type C (float for float16/bfloat16/float32 and
//     the 8-bit floats, double for float64, T itself for integers), with exact load and
//     round-to-nearest-even store (the 8-bit floats saturating to their largest finite value).
//   * OpSum/OpProd/OpMax/OpMin::apply(C a, C b): float sum/prod in C (no FMA: kernels are built
//     with --fmad=false), max/min IEEE 754-2019 (NaN wins, -0 < +0); integer sum/prod wrap
//     (computed unsigned), max/min compare as T.
//   * reduceElement(a, b, scales): b is first multiplied by scales.pre and rounded to T (the
//     allreduce's per-rank pre-scale, fused), then a op b, then * scales.post; float results
//     that are NaN become the canonical quiet NaN whenever the op computes (sum, prod) or a
//     scale applies. float16/bfloat16/8-bit floats round a op b to T before the post-scale, then round the
//     scaled float32 again (Horovod's order: reduce, then scale the buffer). Integer scaling is
//     in double, truncated toward zero (C's conversion, as Horovod), saturated.
//   * scaleElement(x, f): x * f by the same rules (callers copy bits when f == 1).
//   * compressElement / decompressElement: float32 -> float16/bfloat16 of x * scale (one
//     float32 multiply, then the round-to-nearest-even conversion of half.h), and back:
//     toFloat(h) * invScale.
//   * powerOfTwoScale(maxAbs, target): the largest power of two s with maxAbs * s <= target,
//     clamped to [2^-126, 2^126]; 1 when maxAbs is 0, Inf or NaN.
#pragma once

#include <cstdint>

#include "kernels/numeric.cuh"
#include "reduce/fp8.h"
#include "reduce/half.h"

namespace ringfold::cuda {

struct Float16 { uint16_t bits; };   // storage tags for the two 16-bit float formats
struct Bfloat16 { uint16_t bits; };
struct Float8e4m3 { uint8_t bits; };  // and for the two 8-bit ones (reduce/fp8.h)
struct Float8e5m2 { uint8_t bits; };

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

template <> struct Elem<Float8e4m3> {
  using C = float;
  RF_HOST_DEVICE static C load(Float8e4m3 x) { return fp8e4m3ToFloat(x.bits); }
  RF_HOST_DEVICE static Float8e4m3 store(C x) { return Float8e4m3{floatToFp8e4m3(x)}; }
};
template <> struct Elem<Float8e5m2> {
  using C = float;
  RF_HOST_DEVICE static C load(Float8e5m2 x) { return fp8e5m2ToFloat(x.bits); }
  RF_HOST_DEVICE static Float8e5m2 store(C x) { return Float8e5m2{floatToFp8e5m2(x)}; }
};

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
    return truncSaturate<T>(static_cast<double>(x) * factor);
  }
}

template <class T, class Op> RF_HOST_DEVICE inline T reduceElement(T a, T b, const Scales& s) {
  using C = typename Elem<T>::C;
  if (s.hasPre) b = scaleElement(b, s.pre);
  C r = Op::apply(Elem<T>::load(a), Elem<T>::load(b));
  if constexpr (kIsFloat<C>) {
    if (Op::kComputes) r = canon(r);
    if (!s.hasPost) return Elem<T>::store(r);
    return scaleElement(Elem<T>::store(r), s.post);  // T == C for float32/float64: one rounding
  } else {
    return s.hasPost ? truncSaturate<T>(static_cast<double>(r) * s.post) : r;
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
