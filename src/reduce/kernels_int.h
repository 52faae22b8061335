// Integer kernels of reduce_kernels.h: GCC vector extensions of RF_INT_VEC_BYTES bytes; sum and
// prod in unsigned arithmetic (wrap-around), max/min signed or unsigned as the type is; scaling
// in double, truncated toward zero (C's conversion, as Horovod) and saturated. Per-ISA
// translation units only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "reduce/kernels_float.h"  // streamHead

#ifndef RF_INT_VEC_BYTES
#error "include reduce_kernels.h from a kernels_<isa>.cc, not this header"
#endif

namespace ringfold::reduce_detail::RF_ISA_NS {
namespace {

// x truncated toward zero (what C's double-to-integer conversion does, and so Horovod's
// `output[i] = scale_factor * input[i]`), saturated to T's range; NaN gives 0. The limits are
// constexpr locals so that no out-of-line std:: function is emitted into this ISA's object.
template <class T>
T truncSaturate(double x) {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr double kLo = static_cast<double>(kMin);
  constexpr double kHiExclusive = 2.0 * static_cast<double>(kMax / 2 + 1);
  if (x != x) return 0;
  const double r = __builtin_trunc(x);
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
    if constexpr (kScaled) out = truncSaturate<T>(static_cast<double>(out) * scale);
    std::memcpy(dst + i * sizeof(T), &out, sizeof out);
  }
}

template <class T>
void scaleInt(void* dstv, const void* srcv, size_t n, double factor) {
  auto* dst = static_cast<T*>(dstv);
  const auto* src = static_cast<const T*>(srcv);
  for (size_t i = 0; i < n; ++i) dst[i] = truncSaturate<T>(static_cast<double>(src[i]) * factor);
}

}  // namespace
}  // namespace ringfold::reduce_detail::RF_ISA_NS
