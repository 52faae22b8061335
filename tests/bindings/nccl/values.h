// Element access for every ncclDataType_t in the NCCL-API tests: values are small integers
// (exact in every type, fp16 and bf16 included), stored and read as doubles. put/get handle fp8
// elements as raw bytes (the copying collectives' patterns); putValue/getValue as 8-bit float
// values (the reductions', chosen exact in both fp8 formats).
#pragma once

#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ncclt {

inline size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

inline bool isSigned(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || t == ncclFloat16 || t == ncclFloat32 ||
         t == ncclFloat64 || t == ncclBfloat16;
}

inline uint16_t toHalf(double v) {  // exact for the small values the tests use
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = std::fabs(v);
  int e = static_cast<int>(std::floor(std::log2(a)));
  const double mant = a / std::ldexp(1.0, e) - 1.0;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | static_cast<uint16_t>(std::lround(mant * 1024)));
}
inline double fromHalf(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

inline void put(ncclDataType_t t, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * typeSize(t);
  switch (t) {
    case ncclInt8: { int8_t x = static_cast<int8_t>(v); std::memcpy(p, &x, 1); break; }
    case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = static_cast<uint32_t>(v); std::memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = static_cast<uint64_t>(v); std::memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = toHalf(v); std::memcpy(p, &x, 2); break; }
    case ncclFloat32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case ncclFloat64: std::memcpy(p, &v, 8); break;
    case ncclBfloat16: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t x = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &x, 2);
      break;
    }
    default: break;
  }
}

inline double get(ncclDataType_t t, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * typeSize(t);
  switch (t) {
    case ncclInt8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclUint64: { uint64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclFloat16: { uint16_t x; std::memcpy(&x, p, 2); return fromHalf(x); }
    case ncclFloat32: { float x; std::memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; std::memcpy(&x, p, 8); return x; }
    case ncclBfloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      uint32_t bits = uint32_t(x) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return 0;
  }
}

// An 8-bit float's value, from the format's definition (E4M3: bias 7, 3 mantissa bits, no Inf;
// E5M2: bias 15, 2 mantissa bits); NaN for E4M3's S.1111.111 and E5M2's top exponent.
inline double fromFp8(ncclDataType_t t, uint8_t x) {
  const int mant = t == ncclFloat8e4m3 ? 3 : 2, bias = t == ncclFloat8e4m3 ? 7 : 15;
  const int e = (x & 0x7F) >> mant, m = x & ((1 << mant) - 1);
  if (t == ncclFloat8e4m3 ? (x & 0x7F) == 0x7F : e == 31) return NAN;
  const double v = e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp((1 << mant) + m, e - bias - mant);
  return (x & 0x80) ? -v : v;
}
inline uint8_t toFp8(ncclDataType_t t, double v) {  // exact values only (the tests use no others)
  for (int code = 0; code < 0x100; ++code) {
    if (fromFp8(t, static_cast<uint8_t>(code)) == v && (v != 0 || !std::signbit(v) == !(code & 0x80))) {
      return static_cast<uint8_t>(code);
    }
  }
  return 0x7F;
}
inline bool isFp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }
inline void putValue(ncclDataType_t t, void* buf, size_t i, double v) {
  if (!isFp8(t)) return put(t, buf, i, v);
  static_cast<uint8_t*>(buf)[i] = toFp8(t, v);
}
inline double getValue(ncclDataType_t t, const void* buf, size_t i) {
  return isFp8(t) ? fromFp8(t, static_cast<const uint8_t*>(buf)[i]) : get(t, buf, i);
}

inline const char* typeName(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

}  // namespace ncclt
