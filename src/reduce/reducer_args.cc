#include "reduce/reducer_args.h"

#include <cstdint>

#include "common/error.h"

namespace ringfold::reduce_detail {
namespace {

// True when [p, p+bytes) and [q, q+bytes) share a byte but do not start at the same address.
bool partialOverlap(const void* p, const void* q, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  const auto y = reinterpret_cast<uintptr_t>(q);
  if (x == y || bytes == 0) return false;
  return x < y ? y - x < bytes : x - y < bytes;
}

void checkDtype(const char* who, DataType dtype) {
  const int d = static_cast<int>(dtype);
  RF_ENFORCE(d >= 0 && d < kNumDataTypes && isReducible(dtype), who, ": data type ", dataTypeName(dtype), " (", d,
             ") cannot be reduced");
}

}  // namespace

bool checkReduceArgs(const char* who, const void* dst, const void* a, const void* b, size_t count, DataType dtype,
                     ReduceOp op) {
  checkDtype(who, dtype);
  const int o = static_cast<int>(op);
  RF_ENFORCE(o >= 0 && o < kNumReduceOps, who, ": unknown reduce op ", o);
  if (count == 0) return false;
  RF_ENFORCE(dst != nullptr && a != nullptr && b != nullptr, who, ": null buffer for ", count, " elements");
  const size_t bytes = count * dataTypeSize(dtype);
  RF_ENFORCE(!partialOverlap(dst, a, bytes) && !partialOverlap(dst, b, bytes), who,
             ": dst partially overlaps a source (only dst == a or dst == b is allowed)");
  return true;
}

bool checkScaleArgs(const char* who, const void* dst, const void* src, size_t count, DataType dtype) {
  checkDtype(who, dtype);
  if (count == 0) return false;
  RF_ENFORCE(dst != nullptr && src != nullptr, who, ": null buffer for ", count, " elements");
  RF_ENFORCE(!partialOverlap(dst, src, count * dataTypeSize(dtype)), who,
             ": scale dst partially overlaps src (only dst == src is allowed)");
  return true;
}

}  // namespace ringfold::reduce_detail
