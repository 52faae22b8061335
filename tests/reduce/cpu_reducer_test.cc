// Every dtype x op x ISA path this CPU runs, against the scalar reference (reference.h), bit
// for bit: counts around the vector widths, unaligned offsets, in place, pre/post scale and
// the special values (NaN, Inf, -0, subnormals, rounding ties, integer saturation).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "reduce/cpu_reducer.h"
#include "reference.h"

using namespace ringfold;
using namespace ringfold::testref;

namespace {

constexpr DataType kTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                               DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                               DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kFloat8e4m3, DataType::kFloat8e5m2};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                             ReduceOp::kAvg};

std::vector<CpuIsa> availableIsas() {
  std::vector<CpuIsa> out{CpuIsa::kPortable};
  if (detectCpuIsa() != CpuIsa::kPortable) out.push_back(CpuIsa::kAvx2);
  if (detectCpuIsa() == CpuIsa::kAvx512) out.push_back(CpuIsa::kAvx512);
  return out;
}

// Random bit patterns mixed with special values and moderate values, so that sums round at ties,
// overflow and hit every class of input.
void fillRandom(std::vector<uint8_t>& buf, DataType t, std::mt19937_64& rng) {
  const size_t es = dataTypeSize(t);
  const size_t n = buf.size() / es;
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    const int pick = int(rng() % 16);
    if (t == DataType::kFloat32) {
      static const uint32_t kSpecial[] = {0, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                          0x7F800001u, 0xFFC12345u, 0x00000001u, 0x807FFFFFu,
                                          0x7F7FFFFFu, 0x3F800000u, 0x33800000u};
      if (pick < 2) bits = kSpecial[rng() % 12];
      else if (pick < 10) bits = bitsOf(float(std::uniform_real_distribution<double>(-300, 300)(rng)));
    } else if (t == DataType::kFloat64) {
      static const uint64_t kSpecial[] = {0, 1ull << 63, 0x7FF0000000000000ull, 0xFFF0000000000000ull,
                                          0x7FF8000000000000ull, 0x7FF0000000000001ull, 1,
                                          0x7FEFFFFFFFFFFFFFull, 0x3FF0000000000000ull};
      if (pick < 2) bits = kSpecial[rng() % 9];
      else if (pick < 10) bits = bitsOf(std::uniform_real_distribution<double>(-300, 300)(rng));
    } else if (t == DataType::kFloat16 || t == DataType::kBfloat16) {
      // Mostly moderate exponents so that operands interact; raw patterns cover the rest.
      if (pick < 10) bits = (bits & 0x83FF) | ((0x3400 + (rng() % 0x1000)) & 0x7C00);
      if (t == DataType::kBfloat16 && pick < 10) bits = (bits & 0x807F) | ((0x3C00 + (rng() % 0x600)) & 0x7F80);
    }
    std::memcpy(buf.data() + i * es, &bits, es);
  }
}

// Makes some b[i] equal to a[i], its negation or a neighbour, so that sums cancel to +-0 and
// max/min see equal operands.
void pairUp(const uint8_t* a, uint8_t* b, size_t n, DataType t, std::mt19937_64& rng) {
  const size_t es = dataTypeSize(t);
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 8 != 0) continue;
    uint64_t bits = 0;
    std::memcpy(&bits, a + i * es, es);
    switch (rng() % 3) {
      case 0: break;
      case 1: bits ^= uint64_t(1) << (es * 8 - 1); break;  // sign bit: -x for floats
      default: bits ^= 1; break;
    }
    std::memcpy(b + i * es, &bits, es);
  }
}

template <class T>
T get(const uint8_t* p, size_t i) { T v; std::memcpy(&v, p + i * sizeof(T), sizeof(T)); return v; }
template <class T>
void put(uint8_t* p, size_t i, T v) { std::memcpy(p + i * sizeof(T), &v, sizeof(T)); }

// Reference result into out (count elements of t).
void reference(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, DataType t, ReduceOp op,
               double scale) {
  const bool scaled = scale != 1.0;
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DataType::kInt8: put(out, i, refIntOp(get<int8_t>(a, i), get<int8_t>(b, i), op, scale, scaled)); break;
      case DataType::kUint8: put(out, i, refIntOp(get<uint8_t>(a, i), get<uint8_t>(b, i), op, scale, scaled)); break;
      case DataType::kInt32: put(out, i, refIntOp(get<int32_t>(a, i), get<int32_t>(b, i), op, scale, scaled)); break;
      case DataType::kUint32: put(out, i, refIntOp(get<uint32_t>(a, i), get<uint32_t>(b, i), op, scale, scaled)); break;
      case DataType::kInt64: put(out, i, refIntOp(get<int64_t>(a, i), get<int64_t>(b, i), op, scale, scaled)); break;
      case DataType::kUint64: put(out, i, refIntOp(get<uint64_t>(a, i), get<uint64_t>(b, i), op, scale, scaled)); break;
      // 16-bit floats: a op b rounded to the type, then (scaled) * scale in float32, rounded again.
      case DataType::kFloat16: {
        float r = refOp(refHalfToFloat(get<uint16_t>(a, i)), refHalfToFloat(get<uint16_t>(b, i)), op);
        uint16_t h = refFloatToHalf(refFinish(r, 1.0, false));
        if (scaled) h = refFloatToHalf(refFinish(refHalfToFloat(h), scale, true));
        put(out, i, h);
        break;
      }
      case DataType::kBfloat16: {
        float r = refOp(refBf16ToFloat(get<uint16_t>(a, i)), refBf16ToFloat(get<uint16_t>(b, i)), op);
        uint16_t h = refFloatToBf16(refFinish(r, 1.0, false));
        if (scaled) h = refFloatToBf16(refFinish(refBf16ToFloat(h), scale, true));
        put(out, i, h);
        break;
      }
      case DataType::kFloat32: put(out, i, refFinish(refOp(get<float>(a, i), get<float>(b, i), op), scale, scaled)); break;
      case DataType::kFloat64: put(out, i, refFinish(refOp(get<double>(a, i), get<double>(b, i), op), scale, scaled)); break;
      // 8-bit floats: as the 16-bit ones, rounded (and saturated) to the type after each step.
      case DataType::kFloat8e4m3:
      case DataType::kFloat8e5m2: {
        const RefFp8& f = t == DataType::kFloat8e4m3 ? kRefE4m3 : kRefE5m2;
        float r = refOp(refFp8ToFloat(get<uint8_t>(a, i), f), refFp8ToFloat(get<uint8_t>(b, i), f), op);
        uint8_t q = refFloatToFp8(refFinish(r, 1.0, false), f);
        if (scaled) q = refFloatToFp8(refFinish(refFp8ToFloat(q, f), scale, true), f);
        put(out, i, q);
        break;
      }
      default: FAIL();
    }
  }
}

std::string firstMismatch(const uint8_t* got, const uint8_t* want, size_t n, DataType t,
                          const uint8_t* a, const uint8_t* b) {
  const size_t es = dataTypeSize(t);
  if (std::memcmp(got, want, n * es) == 0) return "";
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) != 0) {
      auto hex = [es](const uint8_t* p) {
        uint64_t v = 0;
        std::memcpy(&v, p, es);
        char s[32];
        snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(v));
        return std::string(s);
      };
      return "element " + std::to_string(i) + ": a=" + hex(a + i * es) + " b=" + hex(b + i * es) +
             " got " + hex(got + i * es) + " want " + hex(want + i * es);
    }
  }
  return "";
}

enum class Placement { kOut, kInA, kInB };

TEST(CpuReducer, EveryDtypeOpIsaAgainstReference) {
  std::mt19937_64 rng(2024);
  int calls = 0;
  for (CpuIsa isa : availableIsas()) {
    auto reducer = makeCpuReducer(isa);
    for (DataType t : kTypes) {
      const size_t es = dataTypeSize(t);
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(31), size_t(4097)}) {
        const size_t pad = 5;
        std::vector<uint8_t> a((count + pad) * es), b((count + pad) * es), want((count + pad) * es);
        for (ReduceOp op : kOps) {
          for (double scale : {1.0, 0.25, 1.0 / 3.0, -3.5}) {
            for (Placement where : {Placement::kOut, Placement::kInA, Placement::kInB}) {
              const size_t offA = rng() % pad, offB = rng() % pad, offD = rng() % pad;
              fillRandom(a, t, rng);
              fillRandom(b, t, rng);
              uint8_t* pa = a.data() + offA * es;
              uint8_t* pb = b.data() + offB * es;
              pairUp(pa, pb, count, t, rng);
              reference(want.data(), pa, pb, count, t, op, scale);
              std::vector<uint8_t> out((count + pad) * es, 0xA5);
              const std::vector<uint8_t> aBefore = a, bBefore = b;
              uint8_t* dst = where == Placement::kOut ? out.data() + offD * es
                             : where == Placement::kInA ? pa : pb;
              reducer->reduce(dst, pa, pb, count, t, op, scale);
              ++calls;
              const std::vector<uint8_t> inA(aBefore.begin() + offA * es, aBefore.begin() + (offA + count) * es);
              const std::vector<uint8_t> inB(bBefore.begin() + offB * es, bBefore.begin() + (offB + count) * es);
              const std::string bad = firstMismatch(dst, want.data(), count, t, inA.data(), inB.data());
              ASSERT_EQ(bad, "") << cpuIsaName(isa) << " " << dataTypeName(t) << " "
                                 << reduceOpName(op) << " n=" << count << " scale=" << scale
                                 << " placement=" << int(where);
              if (where == Placement::kOut) {  // nothing written outside [dst, dst+count)
                for (size_t i = 0; i < offD * es; ++i) ASSERT_EQ(out[i], 0xA5);
                for (size_t i = (offD + count) * es; i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5);
                ASSERT_EQ(a, aBefore);
                ASSERT_EQ(b, bBefore);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(calls, 1000);
}

// Large out-of-place calls take the non-temporal-store kernels (4 MiB and up per operand); they
// must give the same bits as the in-place kernels, which the test above checks against the
// reference. dst starts one element past a 64-byte boundary and the count leaves a tail.
TEST(CpuReducer, StreamingStoresMatchInPlace) {
  std::mt19937_64 rng(99);
  for (CpuIsa isa : availableIsas()) {
    if (isa == CpuIsa::kPortable) continue;  // no streaming kernels there
    auto reducer = makeCpuReducer(isa);
    for (DataType t : kTypes) {
      const size_t es = dataTypeSize(t);
      const size_t count = (size_t(4) << 20) / es + 13;
      std::vector<uint8_t> a(count * es), b(count * es), out((count + 80) * es), inPlace;
      for (auto* v : {&a, &b}) {  // raw random bits (every class of value), cheaply
        for (size_t i = 0; i + 8 <= v->size(); i += 8) {
          const uint64_t r = rng();
          std::memcpy(v->data() + i, &r, 8);
        }
      }
      uint8_t* base = out.data() + (64 - reinterpret_cast<uintptr_t>(out.data()) % 64);
      uint8_t* dst = base + es;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
        for (double scale : {1.0, 0.125}) {
          std::memset(out.data(), 0xA5, out.size());
          reducer->reduce(dst, a.data(), b.data(), count, t, op, scale);
          inPlace = a;
          reducer->reduce(inPlace.data(), inPlace.data(), b.data(), count, t, op, scale);
          ASSERT_EQ(firstMismatch(dst, inPlace.data(), count, t, a.data(), b.data()), "")
              << cpuIsaName(isa) << " " << dataTypeName(t) << " " << reduceOpName(op) << " scale=" << scale;
          for (uint8_t* p = out.data(); p < dst; ++p) ASSERT_EQ(*p, 0xA5);
          for (uint8_t* p = dst + count * es; p < out.data() + out.size(); ++p) ASSERT_EQ(*p, 0xA5);
        }
      }
    }
  }
}

TEST(CpuReducer, ScaleAgainstReference) {
  std::mt19937_64 rng(7);
  for (CpuIsa isa : availableIsas()) {
    auto reducer = makeCpuReducer(isa);
    for (DataType t : kTypes) {
      const size_t es = dataTypeSize(t);
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(31), size_t(4097)}) {
        for (double factor : {1.0, 0.5, 1.0 / 7.0, -2.0, 1e30}) {
          for (bool inPlace : {false, true}) {
            std::vector<uint8_t> src((count + 1) * es), want(count * es + 1);
            fillRandom(src, t, rng);
            uint8_t* ps = src.data() + es;  // unaligned by one element
            for (size_t i = 0; i < count && factor != 1.0; ++i) {
              switch (t) {
                case DataType::kInt8: put(want.data(), i, refTruncSaturate<int8_t>(get<int8_t>(ps, i) * factor)); break;
                case DataType::kUint8: put(want.data(), i, refTruncSaturate<uint8_t>(get<uint8_t>(ps, i) * factor)); break;
                case DataType::kInt32: put(want.data(), i, refTruncSaturate<int32_t>(get<int32_t>(ps, i) * factor)); break;
                case DataType::kUint32: put(want.data(), i, refTruncSaturate<uint32_t>(get<uint32_t>(ps, i) * factor)); break;
                case DataType::kInt64: put(want.data(), i, refTruncSaturate<int64_t>(double(get<int64_t>(ps, i)) * factor)); break;
                case DataType::kUint64: put(want.data(), i, refTruncSaturate<uint64_t>(double(get<uint64_t>(ps, i)) * factor)); break;
                case DataType::kFloat16: put(want.data(), i, refFloatToHalf(refFinish(refHalfToFloat(get<uint16_t>(ps, i)), factor, true))); break;
                case DataType::kBfloat16: put(want.data(), i, refFloatToBf16(refFinish(refBf16ToFloat(get<uint16_t>(ps, i)), factor, true))); break;
                case DataType::kFloat32: put(want.data(), i, refFinish(get<float>(ps, i), factor, true)); break;
                case DataType::kFloat64: put(want.data(), i, refFinish(get<double>(ps, i), factor, true)); break;
                case DataType::kFloat8e4m3: put(want.data(), i, refFloatToFp8(refFinish(refFp8ToFloat(get<uint8_t>(ps, i), kRefE4m3), factor, true), kRefE4m3)); break;
                case DataType::kFloat8e5m2: put(want.data(), i, refFloatToFp8(refFinish(refFp8ToFloat(get<uint8_t>(ps, i), kRefE5m2), factor, true), kRefE5m2)); break;
                default: FAIL();
              }
            }
            if (factor == 1.0) std::memcpy(want.data(), ps, count * es);  // a plain copy, NaNs and all
            const std::vector<uint8_t> before(ps, ps + count * es);
            std::vector<uint8_t> out(count * es + 1);
            uint8_t* dst = inPlace ? ps : out.data();
            reducer->scale(dst, ps, count, t, factor);
            ASSERT_EQ(firstMismatch(dst, want.data(), count, t, before.data(), before.data()), "")
                << cpuIsaName(isa) << " " << dataTypeName(t) << " n=" << count << " f=" << factor;
          }
        }
      }
    }
  }
}

TEST(CpuReducer, IsaSelection) {
  EXPECT_NO_THROW(makeCpuReducer(CpuIsa::kPortable));
  EXPECT_NO_THROW(makeCpuReducer(detectCpuIsa()));
  setenv("RINGFOLD_CPU_ISA", "portable", 1);
  EXPECT_NO_THROW(makeCpuReducer());
  setenv("RINGFOLD_CPU_ISA", "sse9", 1);
  EXPECT_THROW(makeCpuReducer(), InvalidArgument);
  setenv("RINGFOLD_CPU_ISA", "avx512", 1);
  if (detectCpuIsa() == CpuIsa::kAvx512) {
    EXPECT_NO_THROW(makeCpuReducer());
  } else {
    EXPECT_THROW(makeCpuReducer(), InvalidArgument);
  }
  setenv("RINGFOLD_CPU_ISA", "auto", 1);
  EXPECT_NO_THROW(makeCpuReducer());
  unsetenv("RINGFOLD_CPU_ISA");
  EXPECT_STREQ(cpuIsaName(CpuIsa::kAvx2), "avx2");
}

}  // namespace
