// The head / vector / tail split of the kernels (kernels/vector_split.h), host-side: every
// element covered exactly once, every vector access aligned, misaligned buffers fall back to
// scalar, and the float <-> half address trick of compress.cu.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/vector_split.h"

namespace ringfold::cuda {
namespace {

TEST(VectorSplit, CoversEveryElementOnceWithAlignedVectors) {
  for (size_t es : {1, 2, 4, 8}) {
    const size_t lanes = kVectorBytes / es;
    for (uintptr_t base : {uintptr_t{0x1000}, uintptr_t{0x2340}}) {
      for (size_t off = 0; off < kVectorBytes; off += es) {
        for (size_t count : {0, 1, 2, 3, 7, 15, 16, 17, 33, 1000, 4099}) {
          const uintptr_t p = base + off;
          const uintptr_t addrs[3] = {p, p + 0x10000, p + 0x20000};
          const VectorSplit s = splitVectors(addrs, 3, count, es);
          ASSERT_EQ(count, s.head + s.vectors * lanes + s.tail) << es << " " << off << " " << count;
          ASSERT_LT(s.tail, lanes);
          if (s.vectors > 0) {
            ASSERT_EQ(0u, (p + s.head * es) % kVectorBytes);
          }
          ASSERT_LT(s.head, count == 0 ? 1 : std::min(count + 1, lanes));
          std::vector<int> seen(count, 0);
          for (size_t k = 0; k < s.head + s.tail; ++k) ++seen[s.scalarIndex(k, lanes)];
          for (size_t v = 0; v < s.vectors; ++v) {
            for (size_t j = 0; j < lanes; ++j) ++seen[s.head + v * lanes + j];
          }
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(1, seen[i]) << "element " << i;
        }
      }
    }
  }
}

TEST(VectorSplit, MutuallyMisalignedBuffersAreAllScalar) {
  const uintptr_t addrs[3] = {0x1000, 0x2004, 0x3000};
  const VectorSplit s = splitVectors(addrs, 3, 100, 4);
  EXPECT_EQ(100u, s.head);
  EXPECT_EQ(0u, s.vectors);
  EXPECT_EQ(0u, s.tail);
  EXPECT_EQ(100u, s.work());
  const uintptr_t inside[1] = {0x1002};  // not element-aligned for 4-byte elements
  EXPECT_EQ(7u, splitVectors(inside, 1, 7, 4).head);
}

TEST(VectorSplit, ExamplesAndWork) {
  // 4-byte elements 8 bytes past a boundary: 2 head elements, then vectors of 4.
  const VectorSplit s = splitVectors3(reinterpret_cast<void*>(0x1008), reinterpret_cast<void*>(0x2008),
                                      reinterpret_cast<void*>(0x3008), 23, 4);
  EXPECT_EQ(2u, s.head);
  EXPECT_EQ(5u, s.vectors);
  EXPECT_EQ(1u, s.tail);
  EXPECT_EQ(5u, s.work());
  EXPECT_EQ(22u, s.scalarIndex(2, 4));
  // Fewer elements than the head: all head.
  const VectorSplit t = splitVectors3(reinterpret_cast<void*>(0x1004), reinterpret_cast<void*>(0x2004),
                                      reinterpret_cast<void*>(0x3004), 2, 4);
  EXPECT_EQ(2u, t.head);
  EXPECT_EQ(0u, t.vectors);
}

TEST(VectorSplit, FloatHalfPairsAlignTogether) {
  // compress.cu splits {float address, 2 * half address} with 4-byte elements: where it
  // vectorises, both the 16-byte float vector and the 8-byte half vector are aligned.
  for (uintptr_t f = 0x1000; f < 0x1010; f += 4) {
    for (uintptr_t h = 0x5000; h < 0x5008; h += 2) {
      const uintptr_t addrs[2] = {f, 2 * h};
      const VectorSplit s = splitVectors(addrs, 2, 37, 4);
      if (s.vectors == 0) {
        EXPECT_NE((f % 16) / 4, (h % 8) / 2);
        continue;
      }
      EXPECT_EQ(0u, (f + s.head * 4) % 16);
      EXPECT_EQ(0u, (h + s.head * 2) % 8);
    }
  }
}

}  // namespace
}  // namespace ringfold::cuda
