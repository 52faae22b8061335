#include "engine/tensor_args.h"

#include <limits>

#include "common/error.h"
#include "engine/device_ops.h"

namespace ringfold::engine {

namespace {

// Horovod's reduce op codes (horovod/common/basics.py, ringfold.h's RINGFOLD_OP_*).
enum HorovodReduceOp { kHvdAverage = 0, kHvdSum = 1, kHvdAdasum = 2, kHvdMin = 3, kHvdMax = 4, kHvdProduct = 5 };

void checkDataTypeCode(int code) {
  if (code < 0 || code >= kNumDataTypes) {
    RF_THROW(InvalidArgument, "unknown dtype code ", code, " (expected RINGFOLD_INT8 (0) to RINGFOLD_BOOL (",
             kNumDataTypes - 1, "))");
  }
}

// The size of `shape` in bytes. The product of its non-zero dimensions, in bytes, must fit in
// 63 bits.
size_t checkedBytes(const std::vector<int64_t>& shape, DataType dtype) {
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dataTypeSize(dtype));
  int64_t nonZero = 1;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) RF_THROW(InvalidArgument, "dimension ", i, " of shape ", shapeString(shape), " is negative");
    if (shape[i] == 0) {
      empty = true;
      continue;
    }
    if (nonZero > limit / shape[i]) RF_THROW(InvalidArgument, "shape ", shapeString(shape), " is too large");
    nonZero *= shape[i];
  }
  return empty ? 0 : static_cast<size_t>(nonZero) * dataTypeSize(dtype);
}

void checkSplits(const std::vector<int64_t>& splits, const std::vector<int64_t>& shape) {
  if (splits.empty() || shape.empty()) return;  // a scalar: negotiation says alltoall needs a first dimension
  const int64_t first = shape[0];
  int64_t sum = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    if (splits[i] < 0) RF_THROW(InvalidArgument, "splits[", i, "] is ", splits[i], ": a split cannot be negative");
    if (splits[i] > first) {
      RF_THROW(InvalidArgument, "splits add up to more than the first dimension ", first, ": splits[", i,
               "] alone is ", splits[i]);
    }
    if (__builtin_add_overflow(sum, splits[i], &sum)) {
      RF_THROW(InvalidArgument, "splits add up to more than the first dimension ", first,
               " (their sum does not fit in 64 bits)");
    }
  }
  if (sum > first) RF_THROW(InvalidArgument, "splits add up to ", sum, ", more than the first dimension ", first);
}

}  // namespace

bool carriesData(OpType op) {
  return op != OpType::kJoin && op != OpType::kBarrier && op != OpType::kAddProcessSet &&
         op != OpType::kRemoveProcessSet;
}

void checkStream(const void* stream, int device) {
  if (stream == nullptr) return;
  if (!deviceOpsBuilt()) {
    RF_THROW(InvalidArgument, "a CUDA stream was given, but this ringfold build has no CUDA support");
  }
  if (device == kCpuDevice) {
    RF_THROW(InvalidArgument, "a CUDA stream was given for a CPU tensor (device RINGFOLD_CPU_DEVICE)");
  }
}

DataType dataTypeFromCode(int code) {
  checkDataTypeCode(code);
  return static_cast<DataType>(code);
}

ReduceOp reduceOpFromHorovodCode(int code) {
  switch (code) {
    case kHvdAverage:
      return ReduceOp::kAvg;
    case kHvdSum:
      return ReduceOp::kSum;
    case kHvdMin:
      return ReduceOp::kMin;
    case kHvdMax:
      return ReduceOp::kMax;
    case kHvdProduct:
      return ReduceOp::kProd;
    case kHvdAdasum:
      RF_THROW(InvalidArgument, "reduce op ADASUM (2) is not supported by ringfold; use SUM (1) or AVERAGE (0)");
    default:
      RF_THROW(InvalidArgument, "unknown reduce op code ", code,
               " (expected Horovod's: 0 average, 1 sum, 3 min, 4 max, 5 product)");
  }
}

namespace {
void checkName(const TensorArgs& a) {
  if (a.name.empty()) RF_THROW(InvalidArgument, opTypeLowerName(a.op), ": a tensor needs a name");
  if (a.name.size() > kMaxNameBytes) {
    RF_THROW(InvalidArgument, "tensor name of ", a.name.size(), " bytes is longer than ", kMaxNameBytes);
  }
}
}  // namespace

size_t validateTensor(const TensorArgs& a) {
  if (!carriesData(a.op)) {
    checkName(a);
    return 0;
  }
  checkStream(a.stream, a.device);
  checkDataTypeCode(static_cast<int>(a.dtype));
  const size_t bytes = checkedBytes(a.shape, a.dtype);
  if (bytes > 0 && a.input == nullptr) RF_THROW(InvalidArgument, "input is NULL");
  const bool reducing = reduces(a.op);
  if (reducing && !isReducible(a.dtype)) {
    RF_THROW(InvalidArgument, "dtype ", dataTypeName(a.dtype), " cannot be reduced");
  }
  if (writesCallerOutput(a.op) && bytes > 0 && a.output == nullptr) {
    RF_THROW(InvalidArgument, "output is NULL");
  }
  if (reducing && static_cast<int>(a.reduceOp) >= kNumReduceOps) {
    RF_THROW(InvalidArgument, "unknown reduce op ", static_cast<int>(a.reduceOp), " (ReduceOp has ", kNumReduceOps,
             " values)");
  }
  if (a.op == OpType::kAlltoall) checkSplits(a.splits, a.shape);
  checkName(a);
  return bytes;
}

}  // namespace ringfold::engine
