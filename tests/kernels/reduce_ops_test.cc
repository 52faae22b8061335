// The CUDA kernels' element rules (kernels/reduce_ops.cuh), compiled by g++ and run on the CPU,
// against the CPU reducer bit for bit: every dtype x op, with and without pre- and post-scale, on
// random bit patterns (NaNs with payloads, Inf, subnormals, -0) and on hand-picked specials; the
// compression functors against the independent reference conversions of tests/reduce.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/reduce_ops.cuh"
#include "reduce/cpu_reducer.h"
#include "reduce/reference.h"

namespace ringfold::cuda {
namespace {

constexpr size_t kCount = 4099;

template <class T> constexpr DataType dtypeOf();
template <> constexpr DataType dtypeOf<int8_t>() { return DataType::kInt8; }
template <> constexpr DataType dtypeOf<uint8_t>() { return DataType::kUint8; }
template <> constexpr DataType dtypeOf<int32_t>() { return DataType::kInt32; }
template <> constexpr DataType dtypeOf<uint32_t>() { return DataType::kUint32; }
template <> constexpr DataType dtypeOf<int64_t>() { return DataType::kInt64; }
template <> constexpr DataType dtypeOf<uint64_t>() { return DataType::kUint64; }
template <> constexpr DataType dtypeOf<Float16>() { return DataType::kFloat16; }
template <> constexpr DataType dtypeOf<Bfloat16>() { return DataType::kBfloat16; }
template <> constexpr DataType dtypeOf<Float8e4m3>() { return DataType::kFloat8e4m3; }
template <> constexpr DataType dtypeOf<Float8e5m2>() { return DataType::kFloat8e5m2; }
template <> constexpr DataType dtypeOf<float>() { return DataType::kFloat32; }
template <> constexpr DataType dtypeOf<double>() { return DataType::kFloat64; }

// Random bytes, with a third of the elements replaced by small "ordinary" values so that the
// arithmetic is exercised away from NaN and Inf too, and a few exact specials.
template <class T>
std::vector<T> randomData(std::mt19937_64& rng) {
  std::vector<T> v(kCount);
  std::vector<unsigned char> bytes(kCount * sizeof(T));
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  std::memcpy(v.data(), bytes.data(), bytes.size());
  std::uniform_real_distribution<float> small(-100.0f, 100.0f);
  for (size_t i = 0; i < kCount; i += 3) {
    const float x = small(rng);
    if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>(static_cast<int>(x));
    } else {
      v[i] = Elem<T>::store(static_cast<typename Elem<T>::C>(x));
    }
  }
  return v;
}

template <class T, class Op>
void checkReduce(Reducer& cpu, ReduceOp op, double pre, double post, std::mt19937_64& rng) {
  const DataType dt = dtypeOf<T>();
  const auto a = randomData<T>(rng), b = randomData<T>(rng);
  std::vector<T> scaledB = b, want(kCount), got(kCount);
  if (pre != 1.0) cpu.scale(scaledB.data(), b.data(), kCount, dt, pre);
  cpu.reduce(want.data(), a.data(), scaledB.data(), kCount, dt, op, post);
  Scales s;
  s.pre = pre;
  s.post = post;
  s.hasPre = pre != 1.0;
  s.hasPost = post != 1.0;
  for (size_t i = 0; i < kCount; ++i) got[i] = reduceElement<T, Op>(a[i], b[i], s);
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(T)))
        << dataTypeName(dt) << " " << reduceOpName(op) << " pre " << pre << " post " << post << " element " << i;
  }
}

template <class T>
void checkType(Reducer& cpu, std::mt19937_64& rng) {
  for (double pre : {1.0, 1.75, -0.3}) {
    for (double post : {1.0, 0.125, 3.3}) {
      checkReduce<T, OpSum>(cpu, ReduceOp::kSum, pre, post, rng);
      checkReduce<T, OpSum>(cpu, ReduceOp::kAvg, pre, post, rng);
      checkReduce<T, OpProd>(cpu, ReduceOp::kProd, pre, post, rng);
      checkReduce<T, OpMax>(cpu, ReduceOp::kMax, pre, post, rng);
      checkReduce<T, OpMin>(cpu, ReduceOp::kMin, pre, post, rng);
    }
  }
  // scale() with a factor other than 1 (1 is a copy the kernels never compute).
  const auto x = randomData<T>(rng);
  for (double f : {0.5, -2.25, 1e-3, 7e5}) {
    std::vector<T> want(kCount);
    cpu.scale(want.data(), x.data(), kCount, dtypeOf<T>(), f);
    for (size_t i = 0; i < kCount; ++i) {
      const T got = scaleElement<T>(x[i], f);
      ASSERT_EQ(0, std::memcmp(&want[i], &got, sizeof(T))) << dataTypeName(dtypeOf<T>()) << " x" << f << " at " << i;
    }
  }
}

TEST(ReduceOps, EveryDtypeAndOpMatchesCpuReducerBitwise) {
  auto cpu = makeCpuReducer(CpuIsa::kPortable);
  std::mt19937_64 rng(20261123);
  checkType<int8_t>(*cpu, rng);
  checkType<uint8_t>(*cpu, rng);
  checkType<int32_t>(*cpu, rng);
  checkType<uint32_t>(*cpu, rng);
  checkType<int64_t>(*cpu, rng);
  checkType<uint64_t>(*cpu, rng);
  checkType<Float16>(*cpu, rng);
  checkType<Bfloat16>(*cpu, rng);
  checkType<Float8e4m3>(*cpu, rng);
  checkType<Float8e5m2>(*cpu, rng);
  checkType<float>(*cpu, rng);
  checkType<double>(*cpu, rng);
}

TEST(ReduceOps, SpecialValues) {
  using testref::bitsOf;
  using testref::floatOf;
  const Scales none;
  const float nanPayload = floatOf(0xFFC01234u), inf = INFINITY;
  EXPECT_EQ(0x7FC00000u, bitsOf(reduceElement<float, OpSum>(inf, -inf, none)));
  EXPECT_EQ(0x7FC00000u, bitsOf(reduceElement<float, OpSum>(nanPayload, 1.0f, none)));
  EXPECT_EQ(0x7FC00000u, bitsOf(reduceElement<float, OpMax>(1.0f, nanPayload, none)));
  EXPECT_EQ(0x00000000u, bitsOf(reduceElement<float, OpMax>(-0.0f, 0.0f, none)));
  EXPECT_EQ(0x80000000u, bitsOf(reduceElement<float, OpMin>(0.0f, -0.0f, none)));
  EXPECT_EQ(0x7FF8000000000000ull, bitsOf(reduceElement<double, OpProd>(0.0, double(INFINITY), none)));
  // float16: 65504 + 8 rounds back to 65504, + 16 (the halfway point) to even: Inf; NaN is 0x7E00.
  const auto h = [](float x) { return Float16{floatToHalf(x)}; };
  EXPECT_EQ(0x7BFFu, (reduceElement<Float16, OpSum>(h(65504.0f), h(8.0f), none).bits));
  EXPECT_EQ(0x7C00u, (reduceElement<Float16, OpSum>(h(65504.0f), h(16.0f), none).bits));
  EXPECT_EQ(0x7C00u, (reduceElement<Float16, OpSum>(h(65504.0f), h(32.0f), none).bits));
  EXPECT_EQ(0x7E00u, (reduceElement<Float16, OpSum>(Float16{0xFC00}, Float16{0x7C00}, none).bits));
  EXPECT_EQ(0x7FC0u, (reduceElement<Bfloat16, OpProd>(Bfloat16{0x7F81}, Bfloat16{0x3F80}, none).bits));
  // Integer scaling: truncated toward zero as Horovod (int(sum * post), int(x * pre)),
  // saturating; sums wrap.
  Scales half;
  half.post = 0.5;
  half.hasPost = true;
  EXPECT_EQ(-1, (reduceElement<int32_t, OpSum>(-1, -2, half)));   // -1.5 -> -1
  EXPECT_EQ(1, (reduceElement<uint8_t, OpSum>(1, 2, half)));      // 1.5 -> 1
  EXPECT_EQ(28, (reduceElement<int32_t, OpSum>(47, 48, Scales{1.0, 0.3, false, true})));  // 28.5
  EXPECT_EQ(int64_t{-28}, (reduceElement<int64_t, OpSum>(-47, -48, Scales{1.0, 0.3, false, true})));
  EXPECT_EQ(int8_t{1}, (reduceElement<int8_t, OpSum>(0, 3, Scales{0.6, 1.0, true, false})));  // 1.8 -> 1
  EXPECT_EQ(int8_t{-1}, scaleElement<int8_t>(-3, 0.6));
  EXPECT_EQ(uint64_t{0}, scaleElement<uint64_t>(1, 0.6));
  // 16-bit floats: the sum is rounded to the type before the post-scale (Horovod's order):
  // 1 + 2^-11 ties to 1 in float16, so * 1.5 is exactly 1.5 (0x3E00), not 1.5 + 1 ulp.
  EXPECT_EQ(0x3E00u, (reduceElement<Float16, OpSum>(h(1.0f), Float16{0x1000}, Scales{1.0, 1.5, false, true}).bits));
  EXPECT_EQ(0x3FC0u, (reduceElement<Bfloat16, OpSum>(Bfloat16{0x3F80}, Bfloat16{0x3B80}, Scales{1.0, 1.5, false, true}).bits));
  EXPECT_EQ(127, (reduceElement<int8_t, OpMax>(100, 120, Scales{1.0, 3.0, false, true})));
  EXPECT_EQ(int8_t(-128), (reduceElement<int8_t, OpSum>(127, 1, none)));
}

TEST(CompressOps, MatchReferenceConversions) {
  std::mt19937_64 rng(7);
  for (float s : {1.0f, 0.5f, 1024.0f, 0x1p-20f}) {
    for (int i = 0; i < 200000; ++i) {
      const float x = testref::floatOf(static_cast<uint32_t>(rng()));
      const float y = x * s;
      ASSERT_EQ(testref::refFloatToHalf(y), compressElement<Float16>(x, s).bits) << x << " * " << s;
      ASSERT_EQ(testref::refFloatToBf16(y), compressElement<Bfloat16>(x, s).bits) << x << " * " << s;
      const uint16_t hb = static_cast<uint16_t>(rng());
      const float inv = 1.0f / s;
      const float wantH = testref::refHalfToFloat(hb) * inv, gotH = decompressElement(Float16{hb}, inv);
      const float wantB = testref::refBf16ToFloat(hb) * inv, gotB = decompressElement(Bfloat16{hb}, inv);
      ASSERT_EQ(testref::bitsOf(wantH), testref::bitsOf(gotH)) << std::hex << hb;
      ASSERT_EQ(testref::bitsOf(wantB), testref::bitsOf(gotB)) << std::hex << hb;
    }
  }
}

TEST(CompressOps, PowerOfTwoScale) {
  EXPECT_EQ(32768.0f, powerOfTwoScale(1.0f, 65504.0f));
  EXPECT_EQ(1.0f, powerOfTwoScale(65504.0f, 65504.0f));
  EXPECT_EQ(0.5f, powerOfTwoScale(65505.0f, 65504.0f));
  EXPECT_EQ(0x1p-18f, powerOfTwoScale(1e10f, 65504.0f));
  EXPECT_EQ(1.0f, powerOfTwoScale(0.0f, 65504.0f));
  EXPECT_EQ(1.0f, powerOfTwoScale(INFINITY, 65504.0f));
  EXPECT_EQ(1.0f, powerOfTwoScale(NAN, 65504.0f));
  EXPECT_EQ(0x1p126f, powerOfTwoScale(1e-45f, 65504.0f));
  EXPECT_EQ(0x1p-126f, powerOfTwoScale(3e38f, 1e-30f));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> e(-40.0f, 38.0f);
  for (int i = 0; i < 10000; ++i) {
    const float m = std::pow(10.0f, e(rng)), s = powerOfTwoScale(m, 65504.0f / 8);
    ASSERT_LE(m * s, 65504.0f / 8) << m;
    if (s < 0x1p126f) {
      ASSERT_GT(m * s * 2, 65504.0f / 8) << m;  // the largest such power of two
    }
  }
}

}  // namespace
}  // namespace ringfold::cuda
