// Floating-point kernels of reduce_kernels.h (float16, bfloat16, float32, float64): a vector
// main loop over the ISA's Simd, then the exact scalar definition (ScalarSimd) for the tail, so
// every element gets the same operations whatever its position. Part of the per-ISA
// translation units only: needs RF_ISA_NS (see reduce_kernels.h); internal linkage throughout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reduce/fp8.h"
#include "reduce/simd_scalar.h"

#ifndef RF_ISA_NS
#error "include reduce_kernels.h from a kernels_<isa>.cc, not this header"
#endif

namespace ringfold::reduce_detail::RF_ISA_NS {
namespace {

// kE4m3, kE5m2 (the 8-bit floats): element by element on ScalarSimd only (reduce_kernels.h), in
// float32 and rounded once per operation like the 16-bit types.
enum class Fmt { kHalf, kBf16, kF32, kF64, kE4m3, kE5m2 };

// True for the formats narrower than their compute type (rounded after every operation).
template <Fmt F>
constexpr bool kNarrow = F == Fmt::kHalf || F == Fmt::kBf16 || F == Fmt::kE4m3 || F == Fmt::kE5m2;

template <Fmt F>
struct Io;
template <>
struct Io<Fmt::kHalf> {
  using T = uint16_t;
  using C = float;
  template <class S> static constexpr size_t lanes() { return S::kF; }
  template <class S> static auto load(const T* p) { return S::loadHalf(p); }
  template <class S, bool kNt, class V> static void store(T* p, V v) {
    if constexpr (kNt) S::streamHalf(p, v); else S::storeHalf(p, v);
  }
};
template <>
struct Io<Fmt::kBf16> {
  using T = uint16_t;
  using C = float;
  template <class S> static constexpr size_t lanes() { return S::kF; }
  template <class S> static auto load(const T* p) { return S::loadBf16(p); }
  template <class S, bool kNt, class V> static void store(T* p, V v) { S::storeBf16(p, v); }
};
template <>
struct Io<Fmt::kF32> {
  using T = float;
  using C = float;
  template <class S> static constexpr size_t lanes() { return S::kF; }
  template <class S> static auto load(const T* p) { return S::load(p); }
  template <class S, bool kNt, class V> static void store(T* p, V v) {
    if constexpr (kNt) S::stream(p, v); else S::store(p, v);
  }
};
template <>
struct Io<Fmt::kF64> {
  using T = double;
  using C = double;
  template <class S> static constexpr size_t lanes() { return S::kD; }
  template <class S> static auto load(const T* p) { return S::load(p); }
  template <class S, bool kNt, class V> static void store(T* p, V v) {
    if constexpr (kNt) S::stream(p, v); else S::store(p, v);
  }
};

template <>
struct Io<Fmt::kE4m3> {
  using T = uint8_t;
  using C = float;
  template <class S> static constexpr size_t lanes() { return 1; }
  template <class S> static float load(const T* p) { return fp8e4m3ToFloat(*p); }
  template <class S, bool kNt> static void store(T* p, float v) { *p = floatToFp8e4m3(v); }
};
template <>
struct Io<Fmt::kE5m2> {
  using T = uint8_t;
  using C = float;
  template <class S> static constexpr size_t lanes() { return 1; }
  template <class S> static float load(const T* p) { return fp8e5m2ToFloat(*p); }
  template <class S, bool kNt> static void store(T* p, float v) { *p = floatToFp8e5m2(v); }
};

// One vector step of a binary (step2) or unary (step1) element function fn: load, fn, store.
// bfloat16 on SIMD paths works on even and odd elements of a whole register at once (shift and
// mask, no lane-crossing shuffles) and so takes twice the float lanes per step.
template <Fmt F, class S>
constexpr size_t stepLanes() {
  if constexpr (F == Fmt::kBf16 && S::kF > 1) return 2 * S::kF;
  return Io<F>::template lanes<S>();
}

template <Fmt F, class S, bool kNt, class T, class Fn>
void step2(T* d, const T* a, const T* b, Fn fn) {
  if constexpr (F == Fmt::kBf16 && S::kF > 1) {
    typename S::VF ae, ao, be, bo;
    S::loadBf16Pair(a, ae, ao);
    S::loadBf16Pair(b, be, bo);
    if constexpr (kNt) {
      S::streamBf16Pair(d, fn(ae, be), fn(ao, bo));
    } else {
      S::storeBf16Pair(d, fn(ae, be), fn(ao, bo));
    }
  } else {
    Io<F>::template store<S, kNt>(d, fn(Io<F>::template load<S>(a), Io<F>::template load<S>(b)));
  }
}

template <Fmt F, class S, class T, class Fn>
void step1(T* d, const T* a, Fn fn) {
  if constexpr (F == Fmt::kBf16 && S::kF > 1) {
    typename S::VF ae, ao;
    S::loadBf16Pair(a, ae, ao);
    S::storeBf16Pair(d, fn(ae), fn(ao));
  } else {
    Io<F>::template store<S, false>(d, fn(Io<F>::template load<S>(a)));
  }
}

struct FSum {
  static constexpr bool kCanon = true;
  template <class S, class V> static V apply(V a, V b) { return S::add(a, b); }
};
struct FProd {
  static constexpr bool kCanon = true;
  template <class S, class V> static V apply(V a, V b) { return S::mul(a, b); }
};
struct FMax {
  static constexpr bool kCanon = false;  // already canonical
  template <class S, class V> static V apply(V a, V b) { return S::max(a, b); }
};
struct FMin {
  static constexpr bool kCanon = false;
  template <class S, class V> static V apply(V a, V b) { return S::min(a, b); }
};

// Elements before dst reaches kStreamAlign bytes, for the non-temporal variant (whose vector
// stores must be aligned). dst is element-aligned (reducer.h), so this is exact.
template <class T>
size_t streamHead(const T* dst, size_t n) {
  constexpr size_t kAlign = 64;
  const size_t mis = reinterpret_cast<uintptr_t>(dst) % kAlign;
  const size_t head = mis == 0 ? 0 : (kAlign - mis) / sizeof(T);
  return head < n ? head : n;
}

template <class S, Fmt F>
void scaleFloat(void* dstv, const void* srcv, size_t n, double factor) {
  using IO = Io<F>;
  using T = typename IO::T;
  using C = typename IO::C;
  T* dst = static_cast<T*>(dstv);
  const T* src = static_cast<const T*>(srcv);
  constexpr size_t L = stepLanes<F, S>();
  const auto vs = S::splat(static_cast<C>(factor));
  auto fn = [vs](auto v) { return S::canon(S::mul(v, vs)); };
  size_t i = 0;
  for (; i + L <= n; i += L) step1<F, S>(dst + i, src + i, fn);
  if constexpr (L > 1) {
    if (i < n) scaleFloat<ScalarSimd, F>(dst + i, src + i, n - i, factor);
  }
}

// kNt: non-temporal stores (SIMD paths only), for large out-of-place reductions.
template <class S, Fmt F, class Op, bool kScaled, bool kNt = false>
void reduceFloat(void* dstv, const void* av, const void* bv, size_t n, double scale) {
  using IO = Io<F>;
  using T = typename IO::T;
  using C = typename IO::C;
  T* dst = static_cast<T*>(dstv);
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  if constexpr (kScaled && kNarrow<F>) {
    // As Horovod: the reduction is rounded to the narrow type first, then scaled in float32
    // and rounded again (its reduction and its ScaleBuffer are two passes over the buffer).
    // In blocks, so that dst is still in L1 for the second pass.
    constexpr size_t kBlock = 2048;
    for (size_t j = 0; j < n; j += kBlock) {
      const size_t m = n - j < kBlock ? n - j : kBlock;
      reduceFloat<S, F, Op, false>(dst + j, a + j, b + j, m, 1.0);
      scaleFloat<S, F>(dst + j, dst + j, m, scale);
    }
    return;
  }
  size_t i = 0;
  if constexpr (kNt) {
    i = streamHead(dst, n);
    reduceFloat<ScalarSimd, F, Op, kScaled>(dst, a, b, i, scale);
  }
  constexpr size_t L = stepLanes<F, S>();
  const auto vs = S::splat(static_cast<C>(scale));
  auto fn = [vs](auto va, auto vb) {
    auto r = Op::template apply<S>(va, vb);
    if constexpr (kScaled) r = S::mul(r, vs);
    if constexpr (kScaled || Op::kCanon) r = S::canon(r);
    return r;
  };
#pragma GCC unroll 2
  for (; i + L <= n; i += L) step2<F, S, kNt>(dst + i, a + i, b + i, fn);
  if constexpr (kNt) S::fence();
  if constexpr (L > 1) {
    if (i < n) reduceFloat<ScalarSimd, F, Op, kScaled>(dst + i, a + i, b + i, n - i, scale);
  }
}

}  // namespace
}  // namespace ringfold::reduce_detail::RF_ISA_NS
