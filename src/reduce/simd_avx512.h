// Avx512Simd: 16 float / 8 double lanes with AVX-512F/BW/VL, matching ScalarSimd bit for bit.
// Only for kernels_avx512.cc. Same conversions as Avx2Simd (simd_avx2.h), twice as wide; lane
// fix-ups use mask registers instead of blendv.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "reduce/simd_scalar.h"

namespace ringfold::reduce_detail {
namespace {

struct Avx512Simd {
  using VF = __m512;
  using VD = __m512d;
  static constexpr size_t kF = 16;
  static constexpr size_t kD = 8;
  static constexpr bool kStream = true;

  static VF splat(float x) { return _mm512_set1_ps(x); }
  static VD splat(double x) { return _mm512_set1_pd(x); }

  static VF load(const float* p) { return _mm512_loadu_ps(p); }
  static VD load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(float* p, VF v) { _mm512_storeu_ps(p, v); }
  static void store(double* p, VD v) { _mm512_storeu_pd(p, v); }
  // Non-temporal stores: p must be 64-byte aligned (32 for streamHalf); fence() after the loop.
  static void stream(float* p, VF v) { _mm512_stream_ps(p, v); }
  static void stream(double* p, VD v) { _mm512_stream_pd(p, v); }
  static void streamBytes(void* p, const void* v) { _mm512_stream_si512(static_cast<__m512i*>(p), _mm512_loadu_si512(v)); }
  static void fence() { _mm_sfence(); }

  static VF loadHalf(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m256i toHalf(VF v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static void storeHalf(uint16_t* p, VF v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), toHalf(v)); }
  static void streamHalf(uint16_t* p, VF v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), toHalf(v)); }
  static void loadBf16Pair(const uint16_t* p, VF& even, VF& odd) {
    const __m512i x = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static __m512i roundBf16(VF v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), odd);
  }
  static __m512i packBf16(VF even, VF odd) {
    // (hi & 0xFFFF0000) | (lo >> 16) in one ternary-logic instruction after the shift.
    const __m512i lo = _mm512_srli_epi32(roundBf16(even), 16);
    const __m512i mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    return _mm512_ternarylogic_epi32(mask, roundBf16(odd), lo, 0xEA);
  }
  static void storeBf16Pair(uint16_t* p, VF even, VF odd) { _mm512_storeu_si512(p, packBf16(even, odd)); }
  static void streamBf16Pair(uint16_t* p, VF even, VF odd) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), packBf16(even, odd)); }

  static VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
  static VD add(VD a, VD b) { return _mm512_add_pd(a, b); }
  static VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
  static VD mul(VD a, VD b) { return _mm512_mul_pd(a, b); }

  static VF nanF() { return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kCanonicalNanF))); }
  static VD nanD() {
    return _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kCanonicalNanD)));
  }

  static VF canon(VF r) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r, nanF()); }
  static VD canon(VD r) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(r, r, _CMP_UNORD_Q), r, nanD()); }

  static VF andF(VF a, VF b) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
  static VF orF(VF a, VF b) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
  static VD andD(VD a, VD b) {
    return _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
  }
  static VD orD(VD a, VD b) {
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
  }

  static VF max(VF a, VF b) {
    VF m = _mm512_max_ps(a, b);
    m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), m, andF(a, b));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), m, nanF());
  }
  static VF min(VF a, VF b) {
    VF m = _mm512_min_ps(a, b);
    m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), m, orF(a, b));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), m, nanF());
  }
  static VD max(VD a, VD b) {
    VD m = _mm512_max_pd(a, b);
    m = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), m, andD(a, b));
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), m, nanD());
  }
  static VD min(VD a, VD b) {
    VD m = _mm512_min_pd(a, b);
    m = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), m, orD(a, b));
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), m, nanD());
  }
};

}  // namespace
}  // namespace ringfold::reduce_detail
