// Hand-written cases with known answers, run on every ISA path: float16/bfloat16 rounding, NaN,
// Inf, -0 and subnormals, max/min rules, integer wrap-around and scale saturation, argument
// checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "reduce/cpu_reducer.h"
#include "reduce/half.h"
#include "reference.h"

using namespace ringfold;
using testref::bitsOf;
using testref::floatOf;
using testref::doubleOf;

namespace {

std::vector<CpuIsa> availableIsas() {
  std::vector<CpuIsa> out{CpuIsa::kPortable};
  if (detectCpuIsa() != CpuIsa::kPortable) out.push_back(CpuIsa::kAvx2);
  if (detectCpuIsa() == CpuIsa::kAvx512) out.push_back(CpuIsa::kAvx512);
  return out;
}

// Repeats each case 37 times so that it lands in the vector body and in the scalar tail.
template <class T>
std::vector<T> run(CpuIsa isa, DataType t, ReduceOp op, std::vector<T> a, std::vector<T> b,
                   double scale = 1.0) {
  const size_t k = a.size();
  std::vector<T> ra, rb;
  for (int r = 0; r < 37; ++r) {
    ra.insert(ra.end(), a.begin(), a.end());
    rb.insert(rb.end(), b.begin(), b.end());
  }
  std::vector<T> out(ra.size());
  makeCpuReducer(isa)->reduce(out.data(), ra.data(), rb.data(), ra.size(), t, op, scale);
  for (size_t i = k; i < out.size(); ++i) {
    EXPECT_EQ(std::memcmp(&out[i], &out[i % k], sizeof(T)), 0) << "position " << i << " differs";
  }
  out.resize(k);
  return out;
}

uint16_t h(float f) { return floatToHalf(f); }

class Special : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(Special, HalfRounding) {
  const CpuIsa isa = GetParam();
  // 1 + 2^-11 is a tie between 1 and 1+2^-10: to even (1). 1+2^-10 + 2^-11: up to 1+2^-9.
  auto r = run<uint16_t>(isa, DataType::kFloat16, ReduceOp::kSum,
                         {h(1.0f), 0x3C01, h(65504.0f), h(65504.0f), 0x0001, 0x0200, 0x8000, 0x8000},
                         {0x1000, 0x1000, h(16.0f), h(8.0f), 0x0001, 0x0200, 0x0000, 0x8000});
  EXPECT_EQ(r[0], 0x3C00);  // 1 + 2^-11: tie, stays even
  EXPECT_EQ(r[1], 0x3C02);  // (1+2^-10) + 2^-11: tie, rounds up to even
  EXPECT_EQ(r[2], 0x7C00);  // 65504 + 16 = 65520: overflows to Inf
  EXPECT_EQ(r[3], 0x7BFF);  // 65504 + 8 rounds back to 65504
  EXPECT_EQ(r[4], 0x0002);  // subnormals add exactly
  EXPECT_EQ(r[5], 0x0400);  // two subnormals make the smallest normal
  EXPECT_EQ(r[6], 0x0000);  // -0 + +0 = +0
  EXPECT_EQ(r[7], 0x8000);  // -0 + -0 = -0
  // The scale is applied in float32 to the sum rounded to float16: (1+1) * 0.5 and (1+2) * 0.5.
  auto s = run<uint16_t>(isa, DataType::kFloat16, ReduceOp::kAvg, {h(1.0f), h(1.0f)},
                         {h(1.0f), h(2.0f)}, 0.5);
  EXPECT_EQ(s[0], h(1.0f));
  EXPECT_EQ(s[1], h(1.5f));
}

TEST_P(Special, Bf16Rounding) {
  const CpuIsa isa = GetParam();
  auto r = run<uint16_t>(isa, DataType::kBfloat16, ReduceOp::kSum,
                         {0x3F80, 0x3F81, 0x7F7F, 0x0001},
                         {0x3B80, 0x3B80, 0x7F7F, 0x0001});
  EXPECT_EQ(r[0], 0x3F80);  // 1 + 2^-8: tie, stays even
  EXPECT_EQ(r[1], 0x3F82);  // tie from odd: up
  EXPECT_EQ(r[2], 0x7F80);  // max + max: Inf
  EXPECT_EQ(r[3], 0x0002);  // subnormals
}

TEST_P(Special, NanIsCanonicalAndPropagates) {
  const CpuIsa isa = GetParam();
  const float snan = floatOf(0xFF800001u), qnan = floatOf(0x7FC12345u), inf = INFINITY;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    auto r = run<float>(isa, DataType::kFloat32, op, {snan, 1.0f, qnan, snan, 5.0f},
                        {2.0f, qnan, snan, snan, 6.0f});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(bitsOf(r[i]), 0x7FC00000u) << reduceOpName(op) << i;
    auto d = run<double>(isa, DataType::kFloat64, op, {doubleOf(0xFFF0000000000001ull), 1.0},
                         {1.0, doubleOf(0x7FF8000000000123ull)});
    EXPECT_EQ(bitsOf(d[0]), 0x7FF8000000000000ull);
    EXPECT_EQ(bitsOf(d[1]), 0x7FF8000000000000ull);
    auto hr = run<uint16_t>(isa, DataType::kFloat16, op, {0xFD01, 0x3C00}, {0x3C00, 0x7E55});
    EXPECT_EQ(hr[0], 0x7E00);
    EXPECT_EQ(hr[1], 0x7E00);
    auto br = run<uint16_t>(isa, DataType::kBfloat16, op, {0xFF81, 0x3F80}, {0x3F80, 0x7FC5});
    EXPECT_EQ(br[0], 0x7FC0);
    EXPECT_EQ(br[1], 0x7FC0);
  }
  // Inf - Inf and 0 * Inf are NaN too; Inf + 1 stays Inf.
  auto s = run<float>(isa, DataType::kFloat32, ReduceOp::kSum, {inf, inf}, {-inf, 1.0f});
  EXPECT_EQ(bitsOf(s[0]), 0x7FC00000u);
  EXPECT_EQ(s[1], inf);
  auto p = run<float>(isa, DataType::kFloat32, ReduceOp::kProd, {0.0f}, {inf});
  EXPECT_EQ(bitsOf(p[0]), 0x7FC00000u);
  // A NaN scale makes every result the canonical NaN.
  auto n = run<float>(isa, DataType::kFloat32, ReduceOp::kMax, {1.0f}, {2.0f}, std::nan(""));
  EXPECT_EQ(bitsOf(n[0]), 0x7FC00000u);
}

TEST_P(Special, MaxMinZerosAndOrder) {
  const CpuIsa isa = GetParam();
  const std::vector<float> a = {0.0f, -0.0f, -0.0f, 1.0f, -INFINITY, 3.0f};
  const std::vector<float> b = {-0.0f, 0.0f, -0.0f, 2.0f, 4.0f, -7.0f};
  auto mx = run<float>(isa, DataType::kFloat32, ReduceOp::kMax, a, b);
  auto mn = run<float>(isa, DataType::kFloat32, ReduceOp::kMin, a, b);
  const std::vector<uint32_t> wantMax = {0, 0, 0x80000000u, bitsOf(2.0f), bitsOf(4.0f), bitsOf(3.0f)};
  const std::vector<uint32_t> wantMin = {0x80000000u, 0x80000000u, 0x80000000u, bitsOf(1.0f),
                                         bitsOf(-INFINITY), bitsOf(-7.0f)};
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bitsOf(mx[i]), wantMax[i]) << i;
    EXPECT_EQ(bitsOf(mn[i]), wantMin[i]) << i;
  }
  auto dmx = run<double>(isa, DataType::kFloat64, ReduceOp::kMax, {0.0, -0.0}, {-0.0, 0.0});
  EXPECT_FALSE(std::signbit(dmx[0]));
  EXPECT_FALSE(std::signbit(dmx[1]));
  auto hmn = run<uint16_t>(isa, DataType::kFloat16, ReduceOp::kMin, {0x0000, 0x8000}, {0x8000, 0x0000});
  EXPECT_EQ(hmn[0], 0x8000);
  EXPECT_EQ(hmn[1], 0x8000);
}

TEST_P(Special, IntegerWrapAndSaturation) {
  const CpuIsa isa = GetParam();
  auto s8 = run<int8_t>(isa, DataType::kInt8, ReduceOp::kSum, {100, -100, 127}, {100, -100, 1});
  EXPECT_EQ(s8, (std::vector<int8_t>{-56, 56, -128}));
  auto p8 = run<uint8_t>(isa, DataType::kUint8, ReduceOp::kProd, {16, 255}, {17, 255});
  EXPECT_EQ(p8, (std::vector<uint8_t>{16, 1}));
  auto m64 = run<int64_t>(isa, DataType::kInt64, ReduceOp::kMin, {INT64_MIN, 5}, {INT64_MAX, -5});
  EXPECT_EQ(m64, (std::vector<int64_t>{INT64_MIN, -5}));
  auto mu = run<uint64_t>(isa, DataType::kUint64, ReduceOp::kMax, {UINT64_MAX, 1}, {0, 2});
  EXPECT_EQ(mu, (std::vector<uint64_t>{UINT64_MAX, 2}));
  // Scaled: double, truncated toward zero (as Horovod), saturated.
  auto sc = run<int8_t>(isa, DataType::kInt8, ReduceOp::kSum, {100, -100, 2, -2, 1, 0}, {0, 0, 3, -3, 2, 0}, 2.5);
  EXPECT_EQ(sc, (std::vector<int8_t>{127, -128, 12, -12, 7, 0}));  // 12.5 -> 12, -12.5 -> -12, 7.5 -> 7
  auto su = run<uint8_t>(isa, DataType::kUint8, ReduceOp::kSum, {10, 200, 1}, {0, 0, 0}, -1.0);
  EXPECT_EQ(su, (std::vector<uint8_t>{0, 0, 0}));
  auto sa = run<uint8_t>(isa, DataType::kUint8, ReduceOp::kAvg, {1, 2, 255}, {2, 2, 255}, 0.5);
  EXPECT_EQ(sa, (std::vector<uint8_t>{1, 2, 127}));  // 1.5 -> 1; 255+255 wraps to 254 -> 127
  auto s64 = run<int64_t>(isa, DataType::kInt64, ReduceOp::kSum, {INT64_MAX / 2, INT64_MIN / 2}, {0, 0}, 4.0);
  EXPECT_EQ(s64, (std::vector<int64_t>{INT64_MAX, INT64_MIN}));
  auto u64 = run<uint64_t>(isa, DataType::kUint64, ReduceOp::kSum, {UINT64_MAX / 2}, {0}, 3.0);
  EXPECT_EQ(u64, (std::vector<uint64_t>{UINT64_MAX}));
  auto nan = run<int32_t>(isa, DataType::kInt32, ReduceOp::kSum, {7}, {1}, std::nan(""));
  EXPECT_EQ(nan, (std::vector<int32_t>{0}));
  auto big = run<int32_t>(isa, DataType::kInt32, ReduceOp::kMax, {7, -7}, {1, 1}, 1e300);
  EXPECT_EQ(big, (std::vector<int32_t>{INT32_MAX, INT32_MAX}));
}

// Horovod scales integers in double and converts back with C's truncation toward zero: prescale
// gives int(x * f) on each rank before the sum, postscale int(sum * f). Values where rounding to
// nearest would differ, negative ones included, for every integer type.
template <class T>
void expectTruncatedScaling(CpuIsa isa, DataType t) {
  SCOPED_TRACE(dataTypeName(t));
  auto reducer = makeCpuReducer(isa);
  // postscale 0.75: sums 2, 10, 3, 1 -> 1.5, 7.5, 2.25, 0.75 -> 1, 7, 2, 0 (nearest: 2, 8, 2, 1)
  const std::vector<T> a = {1, 4, 1, 1}, b = {1, 6, 2, 0};
  EXPECT_EQ(run<T>(isa, t, ReduceOp::kSum, a, b, 0.75), (std::vector<T>{1, 7, 2, 0}));
  // Average of 2 ranks goes through the same factor (postscale / size): 5 * 0.5 = 2.5 -> 2.
  EXPECT_EQ(run<T>(isa, t, ReduceOp::kAvg, {2}, {3}, 0.5), (std::vector<T>{2}));
  // prescale 0.6: 1, 3, 9 -> 0.6, 1.8, 5.4 -> 0, 1, 5 (nearest: 1, 2, 5)
  std::vector<T> x = {1, 3, 9}, y(3);
  reducer->scale(y.data(), x.data(), x.size(), t, 0.6);
  EXPECT_EQ(y, (std::vector<T>{0, 1, 5}));
  if constexpr (std::is_signed_v<T>) {
    // toward zero for negative values too: -7.5 -> -7, -2.25 -> -2, -0.75 -> 0 (nearest: -8, -2, -1)
    EXPECT_EQ(run<T>(isa, t, ReduceOp::kSum, {-4, -1, -1}, {-6, -2, 0}, 0.75), (std::vector<T>{-7, -2, 0}));
    std::vector<T> nx = {-1, -3, -9}, ny(3);
    reducer->scale(ny.data(), nx.data(), nx.size(), t, 0.6);
    EXPECT_EQ(ny, (std::vector<T>{0, -1, -5}));
    // a negative factor: 10 * -0.75 = -7.5 -> -7
    EXPECT_EQ(run<T>(isa, t, ReduceOp::kSum, {4}, {6}, -0.75), (std::vector<T>{-7}));
  } else {
    // unsigned: a negative product saturates to 0 (C's conversion would be undefined there)
    EXPECT_EQ(run<T>(isa, t, ReduceOp::kSum, {4}, {6}, -0.75), (std::vector<T>{0}));
  }
}

TEST_P(Special, IntegerScalingTruncatesTowardZeroAsHorovod) {
  const CpuIsa isa = GetParam();
  expectTruncatedScaling<int8_t>(isa, DataType::kInt8);
  expectTruncatedScaling<uint8_t>(isa, DataType::kUint8);
  expectTruncatedScaling<int32_t>(isa, DataType::kInt32);
  expectTruncatedScaling<uint32_t>(isa, DataType::kUint32);
  expectTruncatedScaling<int64_t>(isa, DataType::kInt64);
  expectTruncatedScaling<uint64_t>(isa, DataType::kUint64);
  // The case: 2 ranks, postscale 0.3 on int32, 47 + 48 = 95; 95 * 0.3 = 28.5: Horovod 28.
  EXPECT_EQ(run<int32_t>(isa, DataType::kInt32, ReduceOp::kSum, {47}, {48}, 0.3), (std::vector<int32_t>{28}));
  EXPECT_EQ(run<int64_t>(isa, DataType::kInt64, ReduceOp::kSum, {47}, {48}, 0.3), (std::vector<int64_t>{28}));
  EXPECT_EQ(run<int64_t>(isa, DataType::kInt64, ReduceOp::kSum, {-47}, {-48}, 0.3), (std::vector<int64_t>{-28}));
}

// float16/bfloat16 with a post-scale, as Horovod on the CPU: the sum is rounded to the 16-bit type,
// then scaled in float32 and rounded again. 1 + 2^-11 (float16) and 1 + 2^-8 (bfloat16) are ties
// that round to 1, so * 1.5 gives exactly 1.5; scaling the unrounded sum would give 1.5 + 1 ulp.
TEST_P(Special, HalfPostScaleRoundsTheSumFirst) {
  const CpuIsa isa = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    auto hs = run<uint16_t>(isa, DataType::kFloat16, op, {h(1.0f), h(1.0f)}, {0x1000, 0x1000}, 1.5);
    EXPECT_EQ(hs[0], 0x3E00) << reduceOpName(op);
    auto bs = run<uint16_t>(isa, DataType::kBfloat16, op, {0x3F80, 0x3F80}, {0x3B80, 0x3B80}, 1.5);
    EXPECT_EQ(bs[0], 0x3FC0) << reduceOpName(op);
  }
}

TEST_P(Special, ScaleSaturatesAndCopies) {
  auto reducer = makeCpuReducer(GetParam());
  std::vector<int32_t> v = {1, -1, 3, INT32_MAX, INT32_MIN};
  std::vector<int32_t> out(v.size());
  reducer->scale(out.data(), v.data(), v.size(), DataType::kInt32, 0.5);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 0, 1, 1073741823, -1073741824}));
  reducer->scale(v.data(), v.data(), v.size(), DataType::kInt32, 2.0);
  EXPECT_EQ(v, (std::vector<int32_t>{2, -2, 6, INT32_MAX, INT32_MIN}));
  std::vector<float> f = {floatOf(0x7F800001u), 1.0f};
  std::vector<float> g(2);
  reducer->scale(g.data(), f.data(), 2, DataType::kFloat32, 1.0);  // factor 1: bits copied
  EXPECT_EQ(bitsOf(g[0]), 0x7F800001u);
  reducer->scale(g.data(), f.data(), 2, DataType::kFloat32, 3.0);
  EXPECT_EQ(bitsOf(g[0]), 0x7FC00000u);
  EXPECT_EQ(g[1], 3.0f);
}

// Every float16 / bfloat16 value scaled by powers of two: the scaled float32 is exact, so this
// checks each path's conversions exhaustively, including every subnormal rounding tie (down)
// and the overflow boundary (up). Also max(x, x) == x: the load/store round trip.
TEST_P(Special, Every16BitValueThroughEachPath) {
  auto reducer = makeCpuReducer(GetParam());
  std::vector<uint16_t> all(65536), out(65536), same(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  for (bool bf : {false, true}) {
    const DataType t = bf ? DataType::kBfloat16 : DataType::kFloat16;
    auto toF = [bf](uint16_t v) { return bf ? testref::refBf16ToFloat(v) : testref::refHalfToFloat(v); };
    auto fromF = [bf](float f) { return bf ? testref::refFloatToBf16(f) : testref::refFloatToHalf(f); };
    reducer->reduce(same.data(), all.data(), all.data(), all.size(), t, ReduceOp::kMax);
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool nan = std::isnan(toF(uint16_t(i)));
      ASSERT_EQ(same[i], nan ? (bf ? 0x7FC0 : 0x7E00) : i) << std::hex << i;
    }
    for (int k = -12; k <= 12; ++k) {
      if (k == 0) continue;
      const double factor = std::ldexp(1.0, k);
      reducer->scale(out.data(), all.data(), all.size(), t, factor);
      for (uint32_t i = 0; i < 65536; ++i) {
        float r = toF(uint16_t(i)) * float(factor);
        if (std::isnan(r)) r = std::numeric_limits<float>::quiet_NaN();
        ASSERT_EQ(out[i], fromF(r)) << std::hex << dataTypeName(t) << " x=0x" << i << std::dec
                                    << " k=" << k;
      }
    }
  }
}

TEST_P(Special, InvalidArguments) {
  auto reducer = makeCpuReducer(GetParam());
  std::vector<float> buf(64);
  EXPECT_THROW(reducer->reduce(buf.data(), buf.data(), buf.data(), 4, DataType::kBool, ReduceOp::kSum),
               InvalidArgument);
  EXPECT_THROW(reducer->reduce(buf.data(), buf.data(), buf.data(), 4, DataType::kFloat32,
                               static_cast<ReduceOp>(9)),
               InvalidArgument);
  EXPECT_THROW(reducer->reduce(nullptr, buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum),
               InvalidArgument);
  EXPECT_THROW(reducer->reduce(buf.data() + 1, buf.data(), buf.data() + 32, 8, DataType::kFloat32,
                               ReduceOp::kSum),
               InvalidArgument);  // dst overlaps a partially
  EXPECT_THROW(reducer->scale(buf.data() + 1, buf.data(), 8, DataType::kFloat32, 2.0), InvalidArgument);
  EXPECT_THROW(reducer->scale(buf.data(), buf.data(), 8, DataType::kBool, 2.0), InvalidArgument);
  // count 0 accepts null pointers; dst == a == b is allowed.
  EXPECT_NO_THROW(reducer->reduce(nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
  buf.assign(64, 1.5f);
  reducer->reduce(buf.data(), buf.data(), buf.data(), 64, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(buf[63], 3.0f);
}

INSTANTIATE_TEST_SUITE_P(Isa, Special, ::testing::ValuesIn(availableIsas()),
                         [](const auto& info) { return std::string(cpuIsaName(info.param)); });

}  // namespace
