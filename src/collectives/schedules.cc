#include "collectives/schedules.h"

#include <algorithm>

namespace ringfold::sched {

Range chunk(size_t count, int n, int c) {
  const size_t base = count / n;
  const size_t extra = count % n;
  const size_t uc = static_cast<size_t>(c);
  Range r;
  r.offset = uc * base + std::min(uc, extra);
  r.length = base + (uc < extra ? 1 : 0);
  return r;
}

size_t directSegmentBytes(size_t segmentBytes, size_t bytes) {
  constexpr size_t kMinBytes = size_t{64} << 10;
  return std::min(segmentBytes, std::max(kMinBytes, bytes / 4));
}

size_t segmentElems(size_t segmentBytes, size_t elemSize) {
  return std::max<size_t>(1, segmentBytes / elemSize);
}

size_t segmentCount(size_t length, size_t segElems) {
  return length == 0 ? 1 : (length + segElems - 1) / segElems;
}

Range segment(Range range, size_t segElems, size_t k) {
  Range s;
  const size_t start = std::min(range.length, k * segElems);
  s.offset = range.offset + start;
  s.length = std::min(segElems, range.length - start);
  return s;
}

size_t ringRoundElems(size_t count, int n, size_t chunkBytes, size_t elemSize) {
  if (chunkBytes == 0) return count;
  return std::min(count, static_cast<size_t>(n) * std::max<size_t>(1, chunkBytes / elemSize));
}

int disseminationRounds(int n) {
  int rounds = 0;
  for (int reach = 1; reach < n; reach *= 2) ++rounds;
  return rounds;
}

double finalScale(ReduceOp op, double postScale, int n) {
  return op == ReduceOp::kAvg ? postScale / n : postScale;
}

double CostModel::ring(size_t bytes, int n) const {
  const double s = static_cast<double>(bytes);
  const double f = static_cast<double>(n - 1) / n;
  return 2.0 * (n - 1) * alpha + 2.0 * f * s * beta + f * s * gamma;
}

double CostModel::direct(size_t bytes, int n) const {
  const double s = static_cast<double>(bytes);
  return alpha + (n - 1) * s * (beta + gamma);
}

size_t directMaxBytes(int n, const CostModel& model) {
  if (n <= 1) return 0;
  constexpr size_t kCap = size_t{4} << 20;
  // direct - ring grows linearly in S; find where it turns positive (bisection on bytes).
  size_t lo = 0, hi = kCap;
  if (model.direct(hi, n) <= model.ring(hi, n)) return kCap;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (model.direct(mid, n) <= model.ring(mid, n)) lo = mid; else hi = mid;
  }
  return lo;
}

}  // namespace ringfold::sched
