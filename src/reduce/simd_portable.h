// PortableSimd: 4 float / 2 double lanes written with GCC vector extensions, so the portable
// path is vectorised on any target the compiler knows (SSE2 on x86-64, NEON on AArch64) without
// intrinsics. Same element rule as ScalarSimd, lane by lane; float16 converts with branch-free
// lane-parallel code equal to half.h's, bfloat16 with integer shifts (even/odd elements, see
// reduce_kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "reduce/half.h"
#include "reduce/simd_scalar.h"

namespace ringfold::reduce_detail {
namespace {

struct PortableSimd {
  typedef float VF __attribute__((vector_size(16)));
  typedef double VD __attribute__((vector_size(16)));
  typedef uint32_t VU __attribute__((vector_size(16)));
  typedef uint64_t VUL __attribute__((vector_size(16)));
  static constexpr size_t kF = 4;
  static constexpr size_t kD = 2;
  static constexpr bool kStream = false;  // no non-temporal stores

  static VF splat(float x) { return VF{x, x, x, x}; }
  static VD splat(double x) { return VD{x, x}; }

  template <class V, class T>
  static V loadAs(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  template <class T, class V>
  static void storeAs(T* p, V v) {
    std::memcpy(p, &v, sizeof v);
  }

  static VF load(const float* p) { return loadAs<VF>(p); }
  static VD load(const double* p) { return loadAs<VD>(p); }
  static void store(float* p, VF v) { storeAs(p, v); }
  static void store(double* p, VD v) { storeAs(p, v); }

  // float16 <-> float32 on all lanes at once, without branches; same results as half.h.
  // Magnitudes fit in 31 bits, so comparisons are signed (one SSE2 instruction each).
  typedef int32_t VI __attribute__((vector_size(16)));
  static VF loadHalf(const uint16_t* p) {
    const VI x = VI{p[0], p[1], p[2], p[3]};
    const VI sign = (x & 0x8000) << 16;
    const VI em = x & 0x7FFF;
    const VI normal = (em << 13) + ((127 - 15) << 23);
    const VI special = (em << 13) | 0x7F800000 | ((em & 0x3FF) != 0 ? 0x00400000 : 0);
    const VF sub = __builtin_convertvector(em, VF) * 5.9604644775390625e-8f;
    const VI mag = em >= 0x7C00 ? special : (em < 0x400 ? reinterpret_cast<VI>(sub) : normal);
    return reinterpret_cast<VF>(sign | mag);
  }
  static void storeHalf(uint16_t* p, VF v) {
    const VI x = reinterpret_cast<VI>(v);
    const VI sign = (x >> 16) & 0x8000;  // arithmetic shift, masked
    const VI abs = x & 0x7FFFFFFF;
    const VI rebased = abs - ((127 - 15) << 23);
    const VI normal = (rebased + 0xFFF + ((rebased >> 13) & 1)) >> 13;
    // Below 2^-14: adding 0.5f puts the float16 subnormal quantum (2^-24) at the float32 ulp,
    // so the FP addition itself rounds to nearest even.
    const VF half = VF{} + 0.5f;
    const VI sub = reinterpret_cast<VI>(reinterpret_cast<VF>(abs) + half) - reinterpret_cast<VI>(half);
    const VI nan = 0x7E00 | ((abs >> 13) & 0x3FF);
    VI mag = abs < 0x38800000 ? sub : normal;
    mag = abs >= 0x477FF000 ? VI{} + 0x7C00 : mag;
    mag = abs > 0x7F800000 ? nan : mag;
    const VI h = sign | mag;
    for (size_t k = 0; k < kF; ++k) p[k] = static_cast<uint16_t>(h[k]);
  }

  static void loadBf16Pair(const uint16_t* p, VF& even, VF& odd) {
    const VU x = loadAs<VU>(p);
    even = reinterpret_cast<VF>(x << 16);
    odd = reinterpret_cast<VF>(x & 0xFFFF0000u);
  }
  static VU roundBf16(VF v) {
    const VU x = reinterpret_cast<VU>(v);
    return x + 0x7FFFu + ((x >> 16) & 1u);
  }
  static void storeBf16Pair(uint16_t* p, VF even, VF odd) {
    storeAs(p, (roundBf16(odd) & 0xFFFF0000u) | (roundBf16(even) >> 16));
  }

  static VF add(VF a, VF b) { return a + b; }
  static VD add(VD a, VD b) { return a + b; }
  static VF mul(VF a, VF b) { return a * b; }
  static VD mul(VD a, VD b) { return a * b; }

  static VF nanF() { return reinterpret_cast<VF>(VU{} + kCanonicalNanF); }
  static VD nanD() { return reinterpret_cast<VD>(VUL{} + kCanonicalNanD); }

  static VF canon(VF r) { return r != r ? nanF() : r; }
  static VD canon(VD r) { return r != r ? nanD() : r; }

  static VF max(VF a, VF b) {
    const VF bits = reinterpret_cast<VF>(reinterpret_cast<VU>(a) & reinterpret_cast<VU>(b));
    const VF m = a == b ? bits : (a > b ? a : b);
    return ((a != a) | (b != b)) ? nanF() : m;
  }
  static VF min(VF a, VF b) {
    const VF bits = reinterpret_cast<VF>(reinterpret_cast<VU>(a) | reinterpret_cast<VU>(b));
    const VF m = a == b ? bits : (a < b ? a : b);
    return ((a != a) | (b != b)) ? nanF() : m;
  }
  static VD max(VD a, VD b) {
    const VD bits = reinterpret_cast<VD>(reinterpret_cast<VUL>(a) & reinterpret_cast<VUL>(b));
    const VD m = a == b ? bits : (a > b ? a : b);
    return ((a != a) | (b != b)) ? nanD() : m;
  }
  static VD min(VD a, VD b) {
    const VD bits = reinterpret_cast<VD>(reinterpret_cast<VUL>(a) | reinterpret_cast<VUL>(b));
    const VD m = a == b ? bits : (a < b ? a : b);
    return ((a != a) | (b != b)) ? nanD() : m;
  }
};

}  // namespace
}  // namespace ringfold::reduce_detail
