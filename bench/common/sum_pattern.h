// The input pattern of sum reductions, shared by ringfold's bench programs (data.h) and the
// Gloo / MPI comparison programs, which do not link ringfold: rank r's element i is
// hash(i, r, seed) mod m with m = clamp(128 / ranks, 2, 8), so every sum over ranks is a small
// integer (< 128, exact in every type) that varies from element to element.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ringfold::bench {

// splitmix64's finalizer over (index, rank, seed).
inline uint64_t patternHash(uint64_t i, uint64_t r, uint64_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull ^ (r + 1) * 0xBF58476D1CE4E5B9ull ^
               (seed + 7) * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t sumModulus(int nranks) {
  return std::clamp<uint64_t>(128 / static_cast<uint64_t>(std::max(nranks, 1)), 2, 8);
}

inline uint64_t sumInput(uint64_t i, int rank, uint64_t seed, int nranks) {
  return patternHash(i, static_cast<uint64_t>(rank), seed) % sumModulus(nranks);
}

}  // namespace ringfold::bench
