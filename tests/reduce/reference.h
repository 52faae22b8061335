// Straightforward scalar reference for the reducer tests, written independently of half.h and
// the kernels: conversions go through exact double arithmetic (nearbyint = ties to even), and
// the element rule is reducer.h's contract spelled out with <cmath>.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/dtype.h"

namespace ringfold::testref {

inline uint32_t bitsOf(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline uint64_t bitsOf(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
inline float floatOf(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline double doubleOf(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }

// binary16 -> float: value = mant * 2^(exp - 25) (or mant * 2^-24 for subnormals).
inline float refHalfToFloat(uint16_t h) {
  const bool neg = h & 0x8000;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 31) {
    if (mant == 0) return neg ? -INFINITY : INFINITY;
    return floatOf((neg ? 0x80000000u : 0u) | 0x7FC00000u | (uint32_t(mant) << 13));
  }
  double v = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(double(1024 + mant), exp - 25);
  return float(neg ? -v : v);
}

// float -> binary16, nearest with ties to even, via exact double arithmetic.
inline uint16_t refFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00 | ((bitsOf(f) >> 13) & 0x3FF);
  double x = std::fabs(double(f));
  if (x == 0) return sign;
  if (std::isinf(x)) return sign | 0x7C00;
  int e = std::ilogb(x);
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  double v = std::nearbyint(x / quantum) * quantum;  // default rounding mode: ties to even
  if (v > 65504.0) return sign | 0x7C00;  // 65520 and up round past the largest finite
  if (v < std::ldexp(1.0, -14)) return sign | uint16_t(v * std::ldexp(1.0, 24));
  const int ve = std::ilogb(v);
  const int mant = int(v / std::ldexp(1.0, ve - 10)) - 1024;
  return sign | uint16_t((ve + 15) << 10) | uint16_t(mant);
}

inline float refBf16ToFloat(uint16_t b) { return floatOf(uint32_t(b) << 16); }

inline uint16_t refFloatToBf16(float f) {
  if (std::isnan(f)) return uint16_t((bitsOf(f) >> 16) | 0x40);
  const bool neg = std::signbit(f);
  double x = std::fabs(double(f));
  if (x == 0 || std::isinf(f)) return uint16_t(bitsOf(f) >> 16);
  int e = std::ilogb(x);
  if (e < -126) e = -126;
  const double quantum = std::ldexp(1.0, e - 7);
  double v = std::nearbyint(x / quantum) * quantum;
  if (v >= std::ldexp(1.0, 128)) return neg ? 0xFF80 : 0x7F80;
  return uint16_t(bitsOf(float(neg ? -v : v)) >> 16);
}

// The 8-bit floats (reduce/fp8.h), from their definition in double arithmetic: `mant` mantissa
// bits, exponent bias `bias`; E5M2 has infinities, E4M3 only S.1111.111 as NaN.
struct RefFp8 {
  int mant;
  int bias;
  bool hasInf;
  double maxFinite;
};
inline constexpr RefFp8 kRefE4m3{3, 7, false, 448.0};
inline constexpr RefFp8 kRefE5m2{2, 15, true, 57344.0};

inline float refFp8ToFloat(uint8_t v, const RefFp8& f) {
  const bool neg = (v & 0x80) != 0;
  const int e = (v & 0x7F) >> f.mant;
  const int m = v & ((1 << f.mant) - 1);
  if (f.hasInf && e == (1 << (7 - f.mant)) - 1) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  if (!f.hasInf && (v & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  const double x = e == 0 ? std::ldexp(double(m), 1 - f.bias - f.mant)
                          : std::ldexp(double((1 << f.mant) + m), e - f.bias - f.mant);
  return float(neg ? -x : x);
}

// Round to nearest even on the format's grid (its subnormal spacing below the normal range),
// then saturate to the largest finite value (Inf too); NaN -> 0x7F.
inline uint8_t refFloatToFp8(float in, const RefFp8& f) {
  if (std::isnan(in)) return 0x7F;
  const bool neg = std::signbit(in);
  const double x = std::fabs(double(in));
  double v = f.maxFinite;
  if (!std::isinf(x)) {
    int e = 0;
    (void)std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
    const int binade = std::max(e - 1, 1 - f.bias);
    const double quantum = std::ldexp(1.0, binade - f.mant);
    v = std::min(std::nearbyint(x / quantum) * quantum, f.maxFinite);
  }
  for (int code = 0; code < 0x80; ++code) {
    if (double(refFp8ToFloat(uint8_t(code), f)) == v) return uint8_t(code | (neg ? 0x80 : 0));
  }
  return 0xFF;  // unreachable: every grid value up to maxFinite has a code
}

// The element rule of reducer.h in compute type C (float or double).
template <class C>
C refOp(C a, C b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      if (a == 0 && b == 0) return (std::signbit(a) && std::signbit(b)) ? C(-0.0) : C(0.0);
      return a > b ? a : b;
    case ReduceOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      if (a == 0 && b == 0) return (std::signbit(a) || std::signbit(b)) ? C(-0.0) : C(0.0);
      return a < b ? a : b;
  }
  return 0;
}

template <class C>
C refFinish(C r, double scale, bool scaled) {
  if (scaled) r = r * C(scale);
  if (std::isnan(r)) r = std::numeric_limits<C>::quiet_NaN();  // canonical: 0x7FC00000 / 0x7FF8...
  return r;
}

// Horovod's integer scaling: truncate toward zero (C's conversion), saturate, NaN -> 0.
template <class T>
T refTruncSaturate(double x) {
  if (std::isnan(x)) return 0;
  const double r = std::trunc(x);
  const double lo = double(std::numeric_limits<T>::min());
  const double hiExcl = std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (r <= lo) return std::numeric_limits<T>::min();
  if (r >= hiExcl) return std::numeric_limits<T>::max();
  return T(r);
}

template <class T>
T refIntOp(T a, T b, ReduceOp op, double scale, bool scaled) {
  using U = std::make_unsigned_t<T>;
  T r = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: r = T(U(U(a) + U(b))); break;
    case ReduceOp::kProd: r = T(U(uint64_t(U(a)) * uint64_t(U(b)))); break;
    case ReduceOp::kMax: r = a > b ? a : b; break;
    case ReduceOp::kMin: r = a < b ? a : b; break;
  }
  return scaled ? refTruncSaturate<T>(double(r) * scale) : r;
}

}  // namespace ringfold::testref
