// tw::Error and the CHECK macros (runtime/errors.hpp): codes, names, file:line in messages.
#include <cuda_runtime.h>
#include <nccl.h>

#include <set>

#include "cpu_util.hpp"

namespace {
using tw_test::catch_tw;
using tw_test::contains;

TEST(Errors, EveryCodeHasADistinctName) {
  const tw::Errc all[] = {
      tw::Errc::kInvalidArgument, tw::Errc::kUnsupported, tw::Errc::kVersionMismatch, tw::Errc::kCuda, tw::Errc::kNccl,
      tw::Errc::kTimeout,         tw::Errc::kState};
  std::set<std::string> names;
  for (tw::Errc c : all) {
    const std::string n = tw::errc_name(c);
    EXPECT_FALSE(n.empty());
    names.insert(n);
  }
  EXPECT_EQ(names.size(), std::size(all));
}

TEST(Errors, RequireCarriesCodeMessageAndLocation) {
  const int line = __LINE__ + 1;
  const tw::Error e = catch_tw([] { TW_REQUIRE(1 + 1 == 3, kUnsupported, std::string("arithmetic is off")); });
  EXPECT_EQ(e.code(), tw::Errc::kUnsupported);
  EXPECT_TRUE(contains(e.what(), "tilewire: arithmetic is off"));
  EXPECT_TRUE(contains(e.what(), "errors_test.cpp:" + std::to_string(line) + "]"));
  EXPECT_NO_THROW(TW_REQUIRE(true, kUnsupported, "never"));
}

TEST(Errors, CudaCheckNamesTheErrorAndExpression) {
  const tw::Error e = catch_tw([] { TW_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_EQ(e.code(), tw::Errc::kCuda);
  EXPECT_TRUE(contains(e.what(), "cudaErrorInvalidValue"));
  EXPECT_TRUE(contains(e.what(), "errors_test.cpp:"));
  EXPECT_NO_THROW(TW_CUDA_CHECK(cudaSuccess));
}

TEST(Errors, NcclCheckNamesTheErrorAndWhereToLook) {
  const tw::Error e = catch_tw([] { TW_NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_EQ(e.code(), tw::Errc::kNccl);
  EXPECT_TRUE(contains(e.what(), ncclGetErrorString(ncclInvalidArgument)));
  EXPECT_TRUE(contains(e.what(), "NCCL_DEBUG"));
  EXPECT_NO_THROW(TW_NCCL_CHECK(ncclSuccess));
}

}  // namespace
