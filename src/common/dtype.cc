#include "common/dtype.h"

#include <string>

#include "common/error.h"

namespace ringfold {

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kBool:
    case DataType::kFloat8e4m3:
    case DataType::kFloat8e5m2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  RF_THROW(InvalidArgument, "unknown data type ", static_cast<int>(t));
}

const char* dataTypeName(DataType t) {
  switch (t) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "half";
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kBool: return "bool";
    case DataType::kFloat8e4m3: return "f8e4m3";
    case DataType::kFloat8e5m2: return "f8e5m2";
  }
  return "unknown";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

std::optional<DataType> parseDataType(std::string_view n) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    if (n == dataTypeName(t)) return t;
  }
  if (n == "char" || n == "i8") return DataType::kInt8;
  if (n == "u8" || n == "byte") return DataType::kUint8;
  if (n == "int" || n == "i32") return DataType::kInt32;
  if (n == "u32") return DataType::kUint32;
  if (n == "long" || n == "i64") return DataType::kInt64;
  if (n == "u64") return DataType::kUint64;
  if (n == "float16" || n == "fp16" || n == "f16") return DataType::kFloat16;
  if (n == "float32" || n == "fp32" || n == "f32") return DataType::kFloat32;
  if (n == "float64" || n == "fp64" || n == "f64") return DataType::kFloat64;
  if (n == "bf16") return DataType::kBfloat16;
  if (n == "float8_e4m3" || n == "float8_e4m3fn" || n == "fp8_e4m3" || n == "e4m3") return DataType::kFloat8e4m3;
  if (n == "float8_e5m2" || n == "fp8_e5m2" || n == "e5m2") return DataType::kFloat8e5m2;
  return std::nullopt;
}

std::optional<ReduceOp> parseReduceOp(std::string_view n) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (n == reduceOpName(op)) return op;
  }
  if (n == "product") return ReduceOp::kProd;
  if (n == "average" || n == "mean") return ReduceOp::kAvg;
  return std::nullopt;
}

bool isFloatingPoint(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16 || t == DataType::kFloat8e4m3 || t == DataType::kFloat8e5m2;
}

bool isReducible(DataType t) { return t != DataType::kBool && static_cast<int>(t) < kNumDataTypes; }

}  // namespace ringfold
