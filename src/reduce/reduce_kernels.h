// The reduction kernels, written once as templates over a Simd type (simd_scalar.h,
// simd_avx2.h, simd_avx512.h) and compiled once per ISA.
//
// Include this only from a kernels_<isa>.cc that first defines:
//   RF_ISA_NS          a namespace name unique to the translation unit (portable, avx2, avx512)
//   RF_TABLE_FN        the getter it exports (portableKernels, avx2Kernels, avx512Kernels)
//   RF_INT_VEC_BYTES   the integer vector width in bytes (16, 32, 64)
//   ringfold::reduce_detail::RF_ISA_NS::Simd   the float vector type
// Everything else has internal linkage, so the linker never mixes code built for different ISAs.
//
// Floats: a vector main loop, then the exact scalar definition (ScalarSimd) for the tail, so every
// element gets the same operations whatever its position. Integers: GCC vector extensions of
// RF_INT_VEC_BYTES bytes; sum and prod in unsigned arithmetic (wrap-around), scaling in double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "reduce/kernel_table.h"
#include "reduce/simd_scalar.h"

namespace ringfold::reduce_detail::RF_ISA_NS {
namespace {

enum class Fmt { kHalf, kBf16, kF32, kF64 };

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

// kNt: non-temporal stores (SIMD paths only), for large out-of-place reductions.
template <class S, Fmt F, class Op, bool kScaled, bool kNt = false>
void reduceFloat(void* dstv, const void* av, const void* bv, size_t n, double scale) {
  using IO = Io<F>;
  using T = typename IO::T;
  using C = typename IO::C;
  T* dst = static_cast<T*>(dstv);
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
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

// round(x) with halves away from zero, saturated to T's range; NaN gives 0. The limits are
// constexpr locals so that no out-of-line std:: function is emitted into this ISA's object.
template <class T>
T roundSaturate(double x) {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr double kLo = static_cast<double>(kMin);
  constexpr double kHiExclusive = 2.0 * static_cast<double>(kMax / 2 + 1);
  if (x != x) return 0;
  const double r = __builtin_round(x);
  if (r <= kLo) return kMin;
  if (r >= kHiExclusive) return kMax;
  return static_cast<T>(r);
}

struct ISum {
  static constexpr bool kUnsigned = true;
  template <class V> static V apply(V a, V b) { return static_cast<V>(a + b); }
};
struct IProd {
  static constexpr bool kUnsigned = true;
  template <class V> static V apply(V a, V b) { return static_cast<V>(a * b); }
};
struct IMax {
  static constexpr bool kUnsigned = false;
  template <class V> static V apply(V a, V b) { return a > b ? a : b; }
};
struct IMin {
  static constexpr bool kUnsigned = false;
  template <class V> static V apply(V a, V b) { return a < b ? a : b; }
};

template <class S, class T, class Op, bool kScaled, bool kNt = false>
void reduceInt(void* dstv, const void* av, const void* bv, size_t n, double scale) {
  using E = std::conditional_t<Op::kUnsigned, std::make_unsigned_t<T>, T>;
  auto* dst = static_cast<unsigned char*>(dstv);
  const auto* a = static_cast<const unsigned char*>(av);
  const auto* b = static_cast<const unsigned char*>(bv);
  size_t i = 0;
  if constexpr (kNt) {
    i = streamHead(static_cast<T*>(dstv), n);
    reduceInt<S, T, Op, kScaled>(dst, a, b, i, scale);
  }
  if constexpr (!kScaled) {
    typedef E V __attribute__((vector_size(RF_INT_VEC_BYTES)));
    constexpr size_t L = sizeof(V) / sizeof(E);
#pragma GCC unroll 2
    for (; i + L <= n; i += L) {
      V x, y;
      std::memcpy(&x, a + i * sizeof(E), sizeof x);
      std::memcpy(&y, b + i * sizeof(E), sizeof y);
      const V r = Op::apply(x, y);
      if constexpr (kNt) {
        static_assert(sizeof(V) == S::kF * sizeof(float), "integer vectors are register wide");
        S::streamBytes(dst + i * sizeof(E), &r);
      } else {
        std::memcpy(dst + i * sizeof(E), &r, sizeof r);
      }
    }
    if constexpr (kNt) S::fence();
  }
  for (; i < n; ++i) {
    E x, y;
    std::memcpy(&x, a + i * sizeof(E), sizeof x);
    std::memcpy(&y, b + i * sizeof(E), sizeof y);
    const E r = Op::apply(x, y);
    T out = static_cast<T>(r);
    if constexpr (kScaled) out = roundSaturate<T>(static_cast<double>(out) * scale);
    std::memcpy(dst + i * sizeof(T), &out, sizeof out);
  }
}

template <class T>
void scaleInt(void* dstv, const void* srcv, size_t n, double factor) {
  auto* dst = static_cast<T*>(dstv);
  const auto* src = static_cast<const T*>(srcv);
  for (size_t i = 0; i < n; ++i) dst[i] = roundSaturate<T>(static_cast<double>(src[i]) * factor);
}

template <class S, Fmt F, class Op, int kOp>
void fillFloatOp(KernelTable& t, DataType d) {
  const int di = static_cast<int>(d);
  t.reduce[di][kOp][0] = &reduceFloat<S, F, Op, false>;
  t.reduce[di][kOp][1] = &reduceFloat<S, F, Op, true>;
  if constexpr (S::kStream) {
    t.reduceStream[di][kOp][0] = &reduceFloat<S, F, Op, false, true>;
    t.reduceStream[di][kOp][1] = &reduceFloat<S, F, Op, true, true>;
  }
}

template <class S, Fmt F>
void fillFloat(KernelTable& t, DataType d) {
  fillFloatOp<S, F, FSum, 0>(t, d);
  fillFloatOp<S, F, FProd, 1>(t, d);
  fillFloatOp<S, F, FMax, 2>(t, d);
  fillFloatOp<S, F, FMin, 3>(t, d);
  t.scale[static_cast<int>(d)] = &scaleFloat<S, F>;
}

template <class S, class T, class Op, int kOp>
void fillIntOp(KernelTable& t, DataType d) {
  const int di = static_cast<int>(d);
  t.reduce[di][kOp][0] = &reduceInt<S, T, Op, false>;
  t.reduce[di][kOp][1] = &reduceInt<S, T, Op, true>;
  if constexpr (S::kStream) t.reduceStream[di][kOp][0] = &reduceInt<S, T, Op, false, true>;
}

template <class S, class T>
void fillInt(KernelTable& t, DataType d) {
  fillIntOp<S, T, ISum, 0>(t, d);
  fillIntOp<S, T, IProd, 1>(t, d);
  fillIntOp<S, T, IMax, 2>(t, d);
  fillIntOp<S, T, IMin, 3>(t, d);
  t.scale[static_cast<int>(d)] = &scaleInt<T>;
}

KernelTable makeTable() {
  KernelTable t{};
  fillInt<Simd, int8_t>(t, DataType::kInt8);
  fillInt<Simd, uint8_t>(t, DataType::kUint8);
  fillInt<Simd, int32_t>(t, DataType::kInt32);
  fillInt<Simd, uint32_t>(t, DataType::kUint32);
  fillInt<Simd, int64_t>(t, DataType::kInt64);
  fillInt<Simd, uint64_t>(t, DataType::kUint64);
  fillFloat<Simd, Fmt::kHalf>(t, DataType::kFloat16);
  fillFloat<Simd, Fmt::kBf16>(t, DataType::kBfloat16);
  fillFloat<Simd, Fmt::kF32>(t, DataType::kFloat32);
  fillFloat<Simd, Fmt::kF64>(t, DataType::kFloat64);
  return t;
}

}  // namespace
}  // namespace ringfold::reduce_detail::RF_ISA_NS

namespace ringfold::reduce_detail {
const KernelTable& RF_TABLE_FN() {
  static const KernelTable table = RF_ISA_NS::makeTable();
  return table;
}
}  // namespace ringfold::reduce_detail
