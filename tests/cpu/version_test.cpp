// NCCL version discipline (runtime/version.hpp): exact header == runtime, and a mismatch message
// that names both versions and the fix.
#include "tilewire/runtime/version.hpp"

#include <nccl.h>

#include "cpu_util.hpp"

namespace {
using tw_test::catch_tw;
using tw_test::contains;

TEST(Version, MatchingVersionsPass) {
  EXPECT_NO_THROW(tw::check_nccl_versions(22809, 22809));
  EXPECT_NO_THROW(tw::check_nccl_versions(22903, 22903));
}

TEST(Version, MismatchNamesBothVersionsAndTheFix) {
  const tw::Error e = catch_tw([] { tw::check_nccl_versions(22809, 22803); });
  EXPECT_EQ(e.code(), tw::Errc::kVersionMismatch);
  const std::string m = e.what();
  EXPECT_TRUE(contains(m, "2.28.9"));  // headers
  EXPECT_TRUE(contains(m, "2.28.3"));  // runtime
  EXPECT_TRUE(contains(m, "LD_LIBRARY_PATH"));
}

TEST(Version, NewerRuntimeIsAMismatchToo) {
  // Device-API structs change between patch releases in either direction.
  EXPECT_EQ(catch_tw([] { tw::check_nccl_versions(22809, 22810); }).code(), tw::Errc::kVersionMismatch);
  EXPECT_EQ(catch_tw([] { tw::check_nccl_versions(22809, 22909); }).code(), tw::Errc::kVersionMismatch);
}

TEST(Version, VersionString) {
  EXPECT_EQ(tw::nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(tw::nccl_version_string(22803), "2.28.3");
  EXPECT_EQ(tw::nccl_version_string(21903), "2.19.3");
  EXPECT_EQ(tw::nccl_version_string(30001), "3.0.1");
  EXPECT_EQ(tw::nccl_version_string(0), "unknown");
  EXPECT_EQ(tw::nccl_version_string(-1), "unknown");
}

TEST(Version, HeaderAndRuntimeOfThisBuild) {
  EXPECT_EQ(tw::nccl_header_version(), NCCL_VERSION_CODE);
  EXPECT_GE(tw::nccl_header_version(), 22809) << "tilewire needs the device API of NCCL >= 2.28.9";
  // ncclGetVersion needs no GPU; the build and test environment load the matching library.
  EXPECT_EQ(tw::nccl_runtime_version(), tw::nccl_header_version())
      << "libnccl.so.2 loaded at run time is " << tw::nccl_version_string(tw::nccl_runtime_version());
  EXPECT_NO_THROW(tw::check_nccl_runtime());
  EXPECT_FALSE(std::string(tw::kVersion).empty());
}

}  // namespace
