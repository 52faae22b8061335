#include "bench/common/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bench/common/sum_pattern.h"
#include "common/error.h"
#include "reduce/fp8.h"
#include "reduce/half.h"

namespace ringfold::bench {
namespace {

// Storage types for the element types C++ has no arithmetic type for.
struct Half { uint16_t bits; };
struct Bf16 { uint16_t bits; };
struct Bool { uint8_t bits; };
struct F8e4m3 { uint8_t bits; };
struct F8e5m2 { uint8_t bits; };

template <typename T> T encode(double v) { return static_cast<T>(v); }
template <> Half encode<Half>(double v) { return {floatToHalf(static_cast<float>(v))}; }
template <> Bf16 encode<Bf16>(double v) { return {floatToBf16(static_cast<float>(v))}; }
template <> Bool encode<Bool>(double v) { return {static_cast<uint8_t>(v != 0 ? 1 : 0)}; }
template <> F8e4m3 encode<F8e4m3>(double v) { return {floatToFp8e4m3(static_cast<float>(v))}; }
template <> F8e5m2 encode<F8e5m2>(double v) { return {floatToFp8e5m2(static_cast<float>(v))}; }

template <typename T> double decode(T x) { return static_cast<double>(x); }
template <> double decode<Half>(Half x) { return halfToFloat(x.bits); }
template <> double decode<Bf16>(Bf16 x) { return bf16ToFloat(x.bits); }
template <> double decode<Bool>(Bool x) { return x.bits; }
template <> double decode<F8e4m3>(F8e4m3 x) { return fp8e4m3ToFloat(x.bits); }
template <> double decode<F8e5m2>(F8e5m2 x) { return fp8e5m2ToFloat(x.bits); }

// Relative tolerance for the one inexact case (avg on floating types): 4 units in the last place.
template <typename T> double avgTolerance() { return 0; }
template <> double avgTolerance<Half>() { return 4.0 / 1024; }
template <> double avgTolerance<Bf16>() { return 4.0 / 128; }
template <> double avgTolerance<float>() { return 4.0 / (1 << 23); }
template <> double avgTolerance<double>() { return 4.0 / 4503599627370496.0; }
// The 8-bit floats round every fold to 3 or 2 mantissa bits, so their sums and averages are
// exact only while the partial sums are small: they are checked within half an ulp per fold,
// relative (the inputs are non-negative, so no partial sum exceeds the result).
template <typename T> double foldTolerance(int) { return 0; }
template <> double foldTolerance<F8e4m3>(int nranks) { return nranks / 16.0; }
template <> double foldTolerance<F8e5m2>(int nranks) { return nranks / 8.0; }

template <typename F>
decltype(auto) dispatch(DataType t, F&& f) {
  switch (t) {
    case DataType::kInt8: return f(int8_t{});
    case DataType::kUint8: return f(uint8_t{});
    case DataType::kInt32: return f(int32_t{});
    case DataType::kUint32: return f(uint32_t{});
    case DataType::kInt64: return f(int64_t{});
    case DataType::kUint64: return f(uint64_t{});
    case DataType::kFloat16: return f(Half{});
    case DataType::kFloat32: return f(float{});
    case DataType::kFloat64: return f(double{});
    case DataType::kBfloat16: return f(Bf16{});
    case DataType::kBool: return f(Bool{});
    case DataType::kFloat8e4m3: return f(F8e4m3{});
    case DataType::kFloat8e5m2: return f(F8e5m2{});
  }
  RF_THROW(InvalidArgument, "bench: unknown data type ", static_cast<int>(t));
}

struct ReducePattern {
  ReduceOp op;
  int nranks;
  uint64_t seed;

  // min/max: one rank per element holds the extreme value, the others stay strictly inside.
  double base(size_t i) const { return static_cast<double>((7 * i + seed) % 11); }
  uint64_t special(size_t i) const { return (i + seed) % static_cast<uint64_t>(nranks); }
  // avg: 1..k with k = clamp(126/size, 1, 8), so size x k + 1 <= 127 (int8, exact bfloat16).
  double avgBase(size_t i) const {
    const uint64_t k = std::clamp<uint64_t>(126 / static_cast<uint64_t>(std::max(nranks, 1)), 1, 8);
    return 1.0 + static_cast<double>((i + seed) % k);
  }

  double value(int r, size_t i) const {
    const uint64_t ur = static_cast<uint64_t>(r);
    switch (op) {
      case ReduceOp::kSum: return static_cast<double>(sumInput(i, r, seed, nranks));
      case ReduceOp::kMin:
        return base(i) + (ur == special(i) ? 0.0 : 1.0 + static_cast<double>((5 * ur + i) % 7));
      case ReduceOp::kMax:
        return base(i) + (ur == special(i) ? 8.0 : static_cast<double>((5 * ur + i) % 8));
      case ReduceOp::kProd:
        return (i + seed) % static_cast<uint64_t>(nranks + 1) == ur ? 2.0 : 1.0;
      case ReduceOp::kAvg: {
        double v = avgBase(i);
        if (nranks >= 2 && r < 2) v += (r == 0 ? 1.0 : -1.0) * static_cast<double>(i % 2);
        return v;
      }
    }
    return 0;
  }

  double expected(size_t i) const {
    switch (op) {
      case ReduceOp::kAvg: return avgBase(i);
      case ReduceOp::kProd:
        return (i + seed) % static_cast<uint64_t>(nranks + 1) < static_cast<uint64_t>(nranks) ? 2.0 : 1.0;
      case ReduceOp::kMin: return base(i);
      case ReduceOp::kMax: return base(i) + 8.0;
      case ReduceOp::kSum: break;
    }
    double acc = 0;
    for (int r = 0; r < nranks; ++r) acc += value(r, i);
    return acc;
  }
};

double copyValue(DataType t, int src, size_t i, uint64_t seed) {
  const uint64_t v = 7 * i + 13 * static_cast<uint64_t>(src) + 3 * seed;
  return static_cast<double>(t == DataType::kBool ? v % 2 : v % 97);
}

template <typename T>
int64_t compareExact(const T* got, size_t k, double want) {
  const T w = encode<T>(want);
  return std::memcmp(&got[k], &w, sizeof(T)) != 0 ? 1 : 0;
}

}  // namespace

void fillReduceInput(DataType t, ReduceOp op, void* buf, size_t count, size_t first, int rank,
                     int nranks, uint64_t seed) {
  const ReducePattern p{op, nranks, seed};
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(buf);
    for (size_t k = 0; k < count; ++k) out[k] = encode<T>(p.value(rank, first + k));
  });
}

int64_t checkReduceOutput(DataType t, ReduceOp op, const void* buf, size_t count, size_t first,
                          int nranks, uint64_t seed) {
  const ReducePattern p{op, nranks, seed};
  return dispatch(t, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    const T* got = static_cast<const T*>(buf);
    const double folds = op == ReduceOp::kSum || op == ReduceOp::kAvg ? foldTolerance<T>(nranks) : 0.0;
    const double tol = std::max(op == ReduceOp::kAvg ? avgTolerance<T>() : 0.0, folds);
    int64_t wrong = 0;
    for (size_t k = 0; k < count; ++k) {
      const double want = p.expected(first + k);
      if (tol == 0) {
        wrong += compareExact(got, k, want);
      } else {
        const double g = decode<T>(got[k]);
        wrong += !(std::fabs(g - want) <= tol * want) ? 1 : 0;
      }
    }
    return wrong;
  });
}

void fillCopyInput(DataType t, void* buf, size_t count, size_t first, int src, uint64_t seed) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(buf);
    for (size_t k = 0; k < count; ++k) out[k] = encode<T>(copyValue(t, src, first + k, seed));
  });
}

int64_t checkCopyOutput(DataType t, const void* buf, size_t count, size_t first, int src,
                        uint64_t seed) {
  return dispatch(t, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    const T* got = static_cast<const T*>(buf);
    int64_t wrong = 0;
    for (size_t k = 0; k < count; ++k) wrong += compareExact(got, k, copyValue(t, src, first + k, seed));
    return wrong;
  });
}

int64_t countNotEqual(const void* buf, size_t bytes, unsigned char pattern) {
  const auto* p = static_cast<const unsigned char*>(buf);
  int64_t n = 0;
  for (size_t k = 0; k < bytes; ++k) n += p[k] != pattern ? 1 : 0;
  return n;
}

}  // namespace ringfold::bench
