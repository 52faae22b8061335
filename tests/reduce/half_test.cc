// half.h against the independent reference (reference.h) and, where the CPU has F16C, against
// the hardware conversion instructions: every float16 value, and every float32 rounding
// boundary of float16 and bfloat16.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <random>
#include <vector>

#include "reduce/half.h"
#include "reference.h"

using namespace ringfold;
using namespace ringfold::testref;

namespace {

__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// F16C (CPUID leaf 1, ECX bit 29), asked of cpuid itself: clang 14 has no "f16c" for
// __builtin_cpu_supports (as in src/reduce/cpu_reducer.cc).
bool haveF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

// Floats around every float16 rounding boundary: each value, its midpoints and one ulp around.
std::vector<float> halfBoundaryInputs() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = refHalfToFloat(uint16_t(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : double(refHalfToFloat(uint16_t(h + 1)));
    const float mid = float((lo + hi) / 2);  // exact: midpoints of float16 values fit in float32
    for (float v : {float(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    std::nextafter(float(lo), INFINITY)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  }
  for (float v : {1e-10f, 1e-30f, 1e30f, 65519.996f, 65520.0f, 70000.0f, INFINITY,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    out.push_back(v);
    out.push_back(-v);
  }
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0xFFC00001u, 0x7FFFFFFFu,
                       0xFF802000u, 0x7F801FFFu}) {
    out.push_back(floatOf(nan));
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < (1 << 18); ++i) out.push_back(floatOf(rng()));
  return out;
}

TEST(Half, EveryHalfToFloatMatchesReference) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float got = halfToFloat(uint16_t(h));
    ASSERT_EQ(bitsOf(got), bitsOf(refHalfToFloat(uint16_t(h)))) << std::hex << "h=0x" << h;
    if ((h & 0x7FFF) <= 0x7C00) {  // not NaN: the round trip is exact
      ASSERT_EQ(floatToHalf(got), h) << std::hex << "h=0x" << h;
    }
  }
}

TEST(Half, EveryHalfToFloatMatchesF16c) {
  if (!haveF16c()) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    ASSERT_EQ(bitsOf(halfToFloat(uint16_t(h))), bitsOf(hwHalfToFloat(uint16_t(h))))
        << std::hex << "h=0x" << h;
  }
}

TEST(Half, FloatToHalfRoundsToNearestEven) {
  const bool hw = haveF16c();
  for (float f : halfBoundaryInputs()) {
    const uint16_t got = floatToHalf(f);
    ASSERT_EQ(got, refFloatToHalf(f)) << std::hex << "f=0x" << bitsOf(f) << " (" << f << ")";
    if (hw) {
      ASSERT_EQ(got, hwFloatToHalf(f)) << std::hex << "f=0x" << bitsOf(f);
    }
  }
}

TEST(Half, FloatToHalfKnownCases) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);                 // tie with odd 65504: up to Inf
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3C00);          // tie: stays even
  EXPECT_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);      // tie: up to even
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);                 // smallest subnormal
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);                 // tie with 0: to even
  EXPECT_EQ(floatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(floatToHalf(0x1.ffcp-15f), 0x0400);              // rounds up into the normals
  EXPECT_EQ(floatToHalf(floatOf(0x7F800001u)) & 0x7E00, 0x7E00);  // sNaN -> quiet NaN
  EXPECT_EQ(floatToHalf(floatOf(0xFFC00000u)), 0xFE00);
  EXPECT_EQ(bitsOf(halfToFloat(0x7D00)), 0x7FE00000u);      // sNaN payload kept, quieted
}

TEST(Bf16, RoundTripAndBoundaries) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = bf16ToFloat(uint16_t(b));
    ASSERT_EQ(bitsOf(f), uint32_t(b) << 16);
    const uint16_t back = floatToBf16(f);
    if ((b & 0x7FFF) > 0x7F80) {
      ASSERT_EQ(back, b | 0x40) << std::hex << b;  // NaN quieted
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x0001u, 0xFFFFu}) {
      const float g = floatOf((uint32_t(b) << 16) | low);
      ASSERT_EQ(floatToBf16(g), refFloatToBf16(g)) << std::hex << "f=0x" << bitsOf(g);
    }
  }
  EXPECT_EQ(floatToBf16(floatOf(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(floatToBf16(floatOf(0x3F818000u)), 0x3F82);  // tie, odd goes up
  EXPECT_EQ(floatToBf16(floatOf(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(floatToBf16(floatOf(0x00008000u)), 0x0000);  // subnormal tie to even (zero)
  EXPECT_EQ(floatToBf16(floatOf(0x00018000u)), 0x0002);
  EXPECT_EQ(floatToBf16(floatOf(0x7F800001u)), 0x7FC0);  // sNaN stays NaN, quiet
  EXPECT_EQ(floatToBf16(floatOf(0xFF810000u)), 0xFFC1);
}

}  // namespace
