#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/error.h"

using namespace ringfold;

TEST(DataType, SizesAndNamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    EXPECT_EQ(parseDataType(dataTypeName(t)), t);
    EXPECT_GE(dataTypeSize(t), 1u);
  }
  EXPECT_EQ(dataTypeSize(DataType::kBfloat16), 2u);
  EXPECT_EQ(parseDataType("fp16"), DataType::kFloat16);
  EXPECT_EQ(parseDataType("float32"), DataType::kFloat32);
  EXPECT_FALSE(parseDataType("complex64").has_value());
}

TEST(ReduceOp, NamesRoundTrip) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    EXPECT_EQ(parseReduceOp(reduceOpName(op)), op);
  }
}

TEST(Enforce, PrintsBothOperands) {
  try {
    int a = 3, b = 4;
    RF_ENFORCE_EQ(a, b, "counts differ");
    FAIL();
  } catch (const InvalidArgument& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("3 vs 4"), std::string::npos) << w;
    EXPECT_NE(w.find("counts differ"), std::string::npos) << w;
  }
}
