// The GPU suite's host reference (tests/gpu/host_ref.hpp), checked here where it can run in CI:
// a wrong reference would make the GPU tests fail (or pass) for the wrong reason.
//
// The conversions are compared with CUDA's host implementations in cuda_bf16.h / cuda_fp16.h
// over special values, every 16-bit pattern, and random fp32 values.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "../gpu/host_ref.hpp"

namespace {
using namespace tw_test;
using tw::DType;

uint16_t cuda_bf16(float f) {
  const __nv_bfloat16 h = __float2bfloat16_rn(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
uint16_t cuda_f16(float f) {
  const __half h = __float2half_rn(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
bool is_nan16(uint16_t h, int exp_bits) {
  const int man_bits = 15 - exp_bits;
  const uint16_t exp_mask = (uint16_t)(((1u << exp_bits) - 1) << man_bits);
  return (h & exp_mask) == exp_mask && (h & ((1u << man_bits) - 1)) != 0;
}

std::vector<float> probe_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          0.5f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          65536.0f,
                          1e30f,
                          -1e30f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::ldexp(1.0f, -14),
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(3.0f, -26),
                          std::ldexp(1.5f, -25),
                          1.00390625f,
                          1.01171875f,
                          3.4e38f};
  for (uint64_t i = 0; i < 200000; ++i) {
    const uint32_t bits = (uint32_t)mix(42, 0, i);
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  for (uint64_t i = 0; i < 100000; ++i) v.push_back(std::ldexp((float)(mix(7, 1, i) % 100000) - 50000.0f, -12));
  return v;
}

TEST(TestReference, Bf16RoundingMatchesCuda) {
  for (float f : probe_values()) ASSERT_EQ(f32_to_bf16(f), cuda_bf16(f)) << f;
  EXPECT_TRUE(is_nan16(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), 8));
}

TEST(TestReference, Fp16RoundingMatchesCuda) {
  for (float f : probe_values()) ASSERT_EQ(f32_to_f16(f), cuda_f16(f)) << f;
  EXPECT_TRUE(is_nan16(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 5));
}

TEST(TestReference, EverySixteenBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (!is_nan16((uint16_t)h, 8)) {
      ASSERT_EQ(f32_to_bf16(bf16_to_f32((uint16_t)h)), h);
      ASSERT_EQ(bf16_to_f32((uint16_t)h), __bfloat162float(__ushort_as_bfloat16((unsigned short)h))) << h;
    }
    if (!is_nan16((uint16_t)h, 5)) {
      ASSERT_EQ(f32_to_f16(f16_to_f32((uint16_t)h)), h);
      ASSERT_EQ(f16_to_f32((uint16_t)h), __half2float(__ushort_as_half((unsigned short)h))) << h;
    }
  }
}

TEST(TestReference, SmallIntsAreNonZeroAndBounded) {
  int seen[17] = {};
  for (uint64_t i = 0; i < 100000; ++i) {
    const int v = small_int(1, 0, i);
    ASSERT_GE(v, -8);
    ASSERT_LE(v, 8);
    ASSERT_NE(v, 0);
    ++seen[v + 8];
  }
  for (int v = -8; v <= 8; ++v) {
    if (v == 0) continue;
    EXPECT_GT(seen[v + 8], 4000) << "value " << v << " is rare";
  }
}

TEST(TestReference, RandomValuesAreExactInTheirType) {
  for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    for (uint64_t i = 0; i < 20000; ++i) {
      const float v = random_exact(3, 1, i, t);
      ASSERT_NE(v, 0.0f);
      ASSERT_GE(std::fabs(v), 1.0f / 16);
      ASSERT_LT(std::fabs(v), 32.0f);
      ASSERT_EQ((float)from_bits(t, to_bits(t, v)), v) << tw::dtype_name(t) << " " << v;
    }
}

TEST(TestReference, ExactSumAndCompare) {
  const DType t = DType::kBFloat16;
  const Bytes want = exact_sum(t, 1000, 9, 4);
  for (size_t i = 0; i < 1000; ++i) {
    int s = 0;
    for (int r = 0; r < 4; ++r) s += small_int(9, r, i);
    ASSERT_EQ(from_bits(t, elem(want, t, i)), (double)s);
  }
  Bytes got = want;
  EXPECT_EQ(compare_exact(got, want, t, 1000), "");
  set_elem(got, t, 17, 0xFFFF);
  EXPECT_NE(compare_exact(got, want, t, 1000).find("first at 17"), std::string::npos);
  EXPECT_EQ(ulp(1.0, 8), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp(-3.0, 24), std::ldexp(1.0, -22));
  EXPECT_EQ(ulp(0.0, 8), 0.0);
}

}  // namespace
