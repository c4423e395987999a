// Element types (runtime/dtype.hpp): names, aliases, sizes.
#include "tilewire/runtime/dtype.hpp"

#include <gtest/gtest.h>

namespace {
using tw::DType;

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(tw::dtype_name(DType::kFloat32), "float");
  EXPECT_STREQ(tw::dtype_name(DType::kFloat16), "half");
  EXPECT_STREQ(tw::dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(tw::dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(tw::dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(tw::dtype_size(DType::kBFloat16), 2u);
  static_assert(tw::dtype_size(DType::kBFloat16) == 2, "usable at compile time");
}

TEST(DType, ParseAliases) {
  for (const char* s : {"float", "fp32", "float32", "f32"}) EXPECT_EQ(tw::parse_dtype(s), DType::kFloat32) << s;
  for (const char* s : {"half", "fp16", "float16", "f16"}) EXPECT_EQ(tw::parse_dtype(s), DType::kFloat16) << s;
  for (const char* s : {"bfloat16", "bf16"}) EXPECT_EQ(tw::parse_dtype(s), DType::kBFloat16) << s;
}

TEST(DType, NameRoundTrips) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) EXPECT_EQ(tw::parse_dtype(tw::dtype_name(t)), t);
}

TEST(DType, RejectsUnknown) {
  for (const char* s : {"", "int8", "fp8", "double", "bf", "float 32", " fp16"})
    EXPECT_FALSE(tw::parse_dtype(s).has_value()) << "'" << s << "'";
}

}  // namespace
