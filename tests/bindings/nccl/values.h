// Element access for every ncclDataType_t in the NCCL-API tests: values are small integers
// (exact in every type, fp16 and bf16 included), stored and read as doubles. fp8 buffers are
// only copied, so their elements are handled as raw bytes.
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

inline const char* typeName(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

}  // namespace ncclt
