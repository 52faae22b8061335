// Avx2Simd: 8 float / 4 double lanes with AVX2 + F16C, matching ScalarSimd bit for bit.
// Only for kernels_avx2.cc (compiled with -mavx2 -mf16c).
//   * float16 loads/stores use VCVTPH2PS / VCVTPS2PH with round-to-nearest-even (exact and
//     identical to half.h, including subnormals, Inf and NaN).
//   * bfloat16 goes through integer shifts and masks, even and odd elements in separate
//     registers; stores round like floatToBf16 for every value except non-canonical NaNs, which
//     the kernels never store (results are canonicalised first).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "reduce/simd_scalar.h"

namespace ringfold::reduce_detail {
namespace {

struct Avx2Simd {
  using VF = __m256;
  using VD = __m256d;
  static constexpr size_t kF = 8;
  static constexpr size_t kD = 4;
  static constexpr bool kStream = true;

  static VF splat(float x) { return _mm256_set1_ps(x); }
  static VD splat(double x) { return _mm256_set1_pd(x); }

  static VF load(const float* p) { return _mm256_loadu_ps(p); }
  static VD load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(float* p, VF v) { _mm256_storeu_ps(p, v); }
  static void store(double* p, VD v) { _mm256_storeu_pd(p, v); }
  // Non-temporal stores: p must be 32-byte aligned (16 for streamHalf); fence() after the loop.
  static void stream(float* p, VF v) { _mm256_stream_ps(p, v); }
  static void stream(double* p, VD v) { _mm256_stream_pd(p, v); }
  static void streamBytes(void* p, const void* v) {
    _mm256_stream_si256(static_cast<__m256i*>(p), _mm256_loadu_si256(static_cast<const __m256i*>(v)));
  }
  static void fence() { _mm_sfence(); }

  static VF loadHalf(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m128i toHalf(VF v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static void storeHalf(uint16_t* p, VF v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), toHalf(v)); }
  static void streamHalf(uint16_t* p, VF v) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), toHalf(v)); }
  // 16 bfloat16 values: even elements (shifted up) and odd elements (masked) as two float
  // vectors; the store rounds both to nearest even and interleaves them back.
  static void loadBf16Pair(const uint16_t* p, VF& even, VF& odd) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static __m256i roundBf16(VF v) {  // result in the upper 16 bits of each lane
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), odd);
  }
  static __m256i packBf16(VF even, VF odd) {
    const __m256i hi = _mm256_and_si256(roundBf16(odd), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    return _mm256_or_si256(hi, _mm256_srli_epi32(roundBf16(even), 16));
  }
  static void storeBf16Pair(uint16_t* p, VF even, VF odd) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packBf16(even, odd));
  }
  static void streamBf16Pair(uint16_t* p, VF even, VF odd) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packBf16(even, odd));
  }

  static VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
  static VD add(VD a, VD b) { return _mm256_add_pd(a, b); }
  static VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
  static VD mul(VD a, VD b) { return _mm256_mul_pd(a, b); }

  static VF nanF() { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kCanonicalNanF))); }
  static VD nanD() {
    return _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(kCanonicalNanD)));
  }

  static VF canon(VF r) { return _mm256_blendv_ps(r, nanF(), _mm256_cmp_ps(r, r, _CMP_UNORD_Q)); }
  static VD canon(VD r) { return _mm256_blendv_pd(r, nanD(), _mm256_cmp_pd(r, r, _CMP_UNORD_Q)); }

  // MAXPS returns its second operand on equality or NaN; fix up equal (+-0) and NaN lanes.
  static VF max(VF a, VF b) {
    VF m = _mm256_max_ps(a, b);
    m = _mm256_blendv_ps(m, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(m, nanF(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  static VF min(VF a, VF b) {
    VF m = _mm256_min_ps(a, b);
    m = _mm256_blendv_ps(m, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(m, nanF(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  static VD max(VD a, VD b) {
    VD m = _mm256_max_pd(a, b);
    m = _mm256_blendv_pd(m, _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(m, nanD(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  static VD min(VD a, VD b) {
    VD m = _mm256_min_pd(a, b);
    m = _mm256_blendv_pd(m, _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(m, nanD(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
};

}  // namespace
}  // namespace ringfold::reduce_detail
