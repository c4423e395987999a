// The sequential paths' choice of cuBLASLt per shape (src/ops/gemm/team_gemm.hpp LtPlans): a
// shape cuBLASLt has no algorithm for falls back alone; the shapes before and after it keep their
// plans, and a failure other than kUnsupported still throws.
#include <gtest/gtest.h>

#include <memory>

#include "ops/gemm/team_gemm.hpp"

namespace {

struct FakePlan {
  int id;
};

TEST(TeamGemm, ShapeWithoutAlgorithmFallsBackAlone) {
  tw::gemm_impl::LtPlans<FakePlan> plans;
  int made = 0;
  const auto ok = [&] { return std::make_unique<FakePlan>(FakePlan{++made}); };
  const auto none = [&]() -> std::unique_ptr<FakePlan> {
    ++made;
    throw tw::Error(tw::Errc::kUnsupported, "cuBLASLt: no algorithm");
  };
  const FakePlan* a = plans.get({0, 128, 256, 512, 0, 0}, ok);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(plans.get({0, 193, 256, 512, 0, 0}, none), nullptr);
  // The shape after the failed one still gets its plan, the first keeps its own, and neither
  // the failed shape nor the first is tried again.
  const FakePlan* b = plans.get({0, 256, 256, 512, 0, 0}, ok);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(plans.get({0, 128, 256, 512, 0, 0}, none), a);
  EXPECT_EQ(plans.get({0, 193, 256, 512, 0, 0}, ok), nullptr);
  EXPECT_EQ(made, 3);
  // The same shape on another device is its own entry.
  EXPECT_NE(plans.get({1, 193, 256, 512, 0, 0}, ok), nullptr);
}

TEST(TeamGemm, OtherFailuresPropagate) {
  tw::gemm_impl::LtPlans<FakePlan> plans;
  const auto broken = []() -> std::unique_ptr<FakePlan> { throw tw::Error(tw::Errc::kCuda, "cudaMalloc failed"); };
  EXPECT_THROW(plans.get({0, 1, 1, 1, 0, 0}, broken), tw::Error);
  // Not remembered as "no algorithm": the next call tries again.
  EXPECT_NE(plans.get({0, 1, 1, 1, 0, 0}, [] { return std::make_unique<FakePlan>(FakePlan{7}); }), nullptr);
}

}  // namespace
