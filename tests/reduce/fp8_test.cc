// The 8-bit float conversions of reduce/fp8.h and the CPU reducer's 8-bit float arithmetic:
// against the definition in double arithmetic (reference.h), and, where the CUDA toolkit is
// installed, against CUDA's own host conversions (cuda_fp8.hpp, what NCCL's kernels round with)
// over every float16 value, every rounding boundary of both formats and random float32 values;
// then every pair of 8-bit values through each op and ISA path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reduce/cpu_reducer.h"
#include "reduce/fp8.h"
#include "reduce/half.h"
#include "reference.h"

#if defined(RF_TEST_HAVE_CUDA_FP8)
#include <cuda_fp8.h>
#endif

using namespace ringfold;
using namespace ringfold::testref;

namespace {

struct Format {
  const char* name;
  DataType dtype;
  const RefFp8& ref;
  float (*toFloat)(uint8_t);
  uint8_t (*fromFloat)(float);
};
const Format kFormats[] = {
    {"e4m3", DataType::kFloat8e4m3, kRefE4m3, [](uint8_t v) { return fp8e4m3ToFloat(v); },
     [](float f) { return floatToFp8e4m3(f); }},
    {"e5m2", DataType::kFloat8e5m2, kRefE5m2, [](uint8_t v) { return fp8e5m2ToFloat(v); },
     [](float f) { return floatToFp8e5m2(f); }},
};

uint32_t bitsOfFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every float16 value, the midpoints between neighbouring 8-bit values of `f` and the floats
// next to them, zero's and the saturation threshold's neighbourhoods, and random float32s.
std::vector<float> probes(const Format& f) {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x10000; ++h) out.push_back(halfToFloat(static_cast<uint16_t>(h)));
  std::vector<double> grid;
  for (int code = 0; code < 0x80; ++code) {
    const float v = refFp8ToFloat(static_cast<uint8_t>(code), f.ref);
    if (std::isfinite(v)) grid.push_back(v);
  }
  grid.push_back(f.ref.maxFinite * (f.dtype == DataType::kFloat8e4m3 ? 480.0 / 448.0 : 65536.0 / 57344.0));
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    for (double x : {(grid[i] + grid[i + 1]) / 2, grid[i]}) {
      const float m = static_cast<float>(x);
      for (float y : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) {
        out.push_back(y);
        out.push_back(-y);
      }
    }
  }
  std::mt19937 rng(8);
  for (int i = 0; i < 400000; ++i) out.push_back(floatOfBits(rng()));
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4e38f}) out.push_back(x);
  return out;
}

std::string hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%x", v);
  return s;
}

TEST(Fp8, EveryValueConvertsExactlyAndBack) {
  for (const Format& f : kFormats) {
    for (int code = 0; code < 0x100; ++code) {
      const auto v = static_cast<uint8_t>(code);
      const float want = refFp8ToFloat(v, f.ref);
      const float got = f.toFloat(v);
      if (std::isnan(want)) {
        EXPECT_EQ(bitsOfFloat(got), 0x7FC00000u) << f.name << " " << hex(v);  // the canonical NaN
        EXPECT_EQ(f.fromFloat(got), 0x7F) << f.name;
        continue;
      }
      EXPECT_EQ(bitsOfFloat(got), bitsOfFloat(want)) << f.name << " " << hex(v);
      // Saturating conversion: E5M2's infinities come back as the largest finite value.
      const uint8_t back = std::isinf(want) ? static_cast<uint8_t>((v & 0x80) | 0x7B) : v;
      EXPECT_EQ(f.fromFloat(got), back) << f.name << " " << hex(v);
    }
  }
}

TEST(Fp8, RoundsToNearestEvenAndSaturatesAsTheDefinition) {
  for (const Format& f : kFormats) {
    int wrong = 0;
    for (float x : probes(f)) {
      const uint8_t want = refFloatToFp8(x, f.ref);
      const uint8_t got = f.fromFloat(x);
      if (got != want && ++wrong <= 5) {
        ADD_FAILURE() << f.name << " of " << hex(bitsOfFloat(x)) << " (" << x << "): got " << hex(got) << " want "
                      << hex(want);
      }
    }
    EXPECT_EQ(wrong, 0) << f.name;
  }
  // The edges, spelled out: E4M3 has no Inf (448 + half an ulp ties down to 448; past it, and Inf,
  // saturate); E5M2 saturates at 57344; half the smallest subnormal ties to zero, keeping the sign.
  EXPECT_EQ(floatToFp8e4m3(464.0f), 0x7E);
  EXPECT_EQ(floatToFp8e4m3(464.1f), 0x7E);
  EXPECT_EQ(floatToFp8e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(floatToFp8e5m2(61440.0f), 0x7B);
  EXPECT_EQ(floatToFp8e5m2(INFINITY), 0x7B);
  EXPECT_EQ(floatToFp8e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(floatToFp8e4m3(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(floatToFp8e4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(floatToFp8e5m2(std::ldexp(3.0f, -17)), 0x02);  // 1.5 subnormal units: tie to even
  EXPECT_EQ(floatToFp8e4m3(std::ldexp(15.5f, -10)), 0x08);  // rounds up into the smallest normal
}

#if defined(RF_TEST_HAVE_CUDA_FP8)
TEST(Fp8, MatchesCudasOwnConversions) {
  for (const Format& f : kFormats) {
    const __nv_fp8_interpretation_t kind = f.dtype == DataType::kFloat8e4m3 ? __NV_E4M3 : __NV_E5M2;
    int wrong = 0;
    for (float x : probes(f)) {
      const uint8_t want = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind);
      const uint8_t got = f.fromFloat(x);
      if (got != want && ++wrong <= 5) {
        ADD_FAILURE() << f.name << " of " << hex(bitsOfFloat(x)) << ": got " << hex(got) << ", CUDA " << hex(want);
      }
    }
    EXPECT_EQ(wrong, 0) << f.name;
    for (int code = 0; code < 0x100; ++code) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), kind);
      const float want = halfToFloat(h.x);
      const float got = f.toFloat(static_cast<uint8_t>(code));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " " << hex(code);
      } else {
        EXPECT_EQ(bitsOfFloat(got), bitsOfFloat(want)) << f.name << " " << hex(code);
      }
    }
  }
}
#else
TEST(Fp8, MatchesCudasOwnConversions) { GTEST_SKIP() << "cuda_fp8.h not found at configure time"; }
#endif

// Every pair of 8-bit values through each op, with and without a post-scale, on every ISA path,
// against the reference rule: a op b in float32, rounded to the type, then scaled and rounded.
TEST(Fp8, EveryPairThroughTheReducer) {
  std::vector<CpuIsa> isas{CpuIsa::kPortable};
  if (detectCpuIsa() != CpuIsa::kPortable) isas.push_back(CpuIsa::kAvx2);
  if (detectCpuIsa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  std::vector<uint8_t> a(0x10000), b(0x10000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i >> 8);
    b[i] = static_cast<uint8_t>(i);
  }
  for (const Format& f : kFormats) {
    for (CpuIsa isa : isas) {
      auto reducer = makeCpuReducer(isa);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
        for (double scale : {1.0, 0.25, 1.0 / 3.0}) {
          std::vector<uint8_t> got(a.size());
          reducer->reduce(got.data(), a.data(), b.data(), a.size(), f.dtype, op, scale);
          int wrong = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            const float r = refOp(refFp8ToFloat(a[i], f.ref), refFp8ToFloat(b[i], f.ref), op);
            uint8_t want = refFloatToFp8(r, f.ref);
            if (scale != 1.0) want = refFloatToFp8(refFp8ToFloat(want, f.ref) * static_cast<float>(scale), f.ref);
            if (got[i] != want && ++wrong <= 3) {
              ADD_FAILURE() << f.name << " " << cpuIsaName(isa) << " " << reduceOpName(op) << " x" << scale << ": "
                            << hex(a[i]) << " op " << hex(b[i]) << " got " << hex(got[i]) << " want " << hex(want);
            }
          }
          EXPECT_EQ(wrong, 0);
        }
      }
    }
  }
  // NCCL's saturating arithmetic: a sum past the largest value is the largest value, not a NaN.
  auto reducer = makeCpuReducer();
  const uint8_t big[2] = {0x7E, 0xFE};  // 448, -448 (E4M3)
  uint8_t out[2];
  reducer->reduce(out, big, big, 2, DataType::kFloat8e4m3, ReduceOp::kSum);
  EXPECT_EQ(out[0], 0x7E);
  EXPECT_EQ(out[1], 0xFE);
}

}  // namespace
