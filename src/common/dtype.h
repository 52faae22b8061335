// Element types and reduction operators. The numeric values follow NCCL's ncclDataType_t and
// ncclRedOp_t, so the NCCL-compatible API can cast instead of translate. kBool is ringfold's own
// and is accepted only by collectives that copy (allgather, broadcast, alltoall, send/recv).
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
};
inline constexpr int kNumDataTypes = 11;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
  kAvg = 4,  // sum, then divided by the number of contributing ranks
};
inline constexpr int kNumReduceOps = 5;

size_t dataTypeSize(DataType t);
// nccl-tests spelling: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 bool.
const char* dataTypeName(DataType t);
const char* reduceOpName(ReduceOp op);  // sum prod max min avg
// Accepts the names above plus common aliases (float32, fp32, float16, fp16, bf16, float64, ...).
std::optional<DataType> parseDataType(std::string_view name);
std::optional<ReduceOp> parseReduceOp(std::string_view name);
bool isFloatingPoint(DataType t);
// True for types the reducers can combine (everything but kBool).
bool isReducible(DataType t);

}  // namespace ringfold
