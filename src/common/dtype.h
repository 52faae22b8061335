// Element types and reduction operators. The numeric values of int8 .. bfloat16 (0-9) and of the
// operators follow NCCL's ncclDataType_t and ncclRedOp_t, so the NCCL-compatible API can cast
// them. kBool (10) is ringfold's own (its C ABI's RINGFOLD_BOOL) and is accepted only by
// collectives that copy (allgather, broadcast, alltoall, send/recv); NCCL's two 8-bit floats,
// which NCCL numbers 10 and 11, are ringfold's 11 and 12 (reduce/fp8.h has their formats and
// rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ringfold {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kBool = 10,
  kFloat8e4m3 = 11,  // OCP E4M3 (no infinities, largest 448)
  kFloat8e5m2 = 12,  // OCP E5M2 (IEEE-like, largest 57344)
};
inline constexpr int kNumDataTypes = 13;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
  kAvg = 4,  // sum, then divided by the number of contributing ranks
};
inline constexpr int kNumReduceOps = 5;

size_t dataTypeSize(DataType t);
// nccl-tests spelling: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 bool
// f8e4m3 f8e5m2.
const char* dataTypeName(DataType t);
const char* reduceOpName(ReduceOp op);  // sum prod max min avg
// Accepts the names above plus common aliases (float32, fp32, float16, fp16, bf16, float64, ...).
std::optional<DataType> parseDataType(std::string_view name);
std::optional<ReduceOp> parseReduceOp(std::string_view name);
bool isFloatingPoint(DataType t);
// True for types the reducers can combine (everything but kBool).
bool isReducible(DataType t);

}  // namespace ringfold
