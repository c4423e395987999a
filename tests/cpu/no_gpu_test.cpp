// What the runtime does on a machine without a CUDA GPU (this suite's CI machine). Each test
// asserts the no-GPU behaviour only when cudaGetDeviceCount fails or reports 0 devices, and
// reports SKIPPED on machines that have a GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>

#include "cpu_util.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/topology.hpp"
#include "tilewire/runtime/version.hpp"

namespace {
using tw_test::catch_tw;
using tw_test::contains;

// "" when no GPU is visible, else a description of the GPUs (the reason to skip).
std::string gpu_present() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (e != cudaSuccess || n == 0) return "";
  return std::to_string(n) + " CUDA GPU(s) visible; the no-GPU behaviour is not observable here";
}

#define SKIP_IF_GPU()                        \
  do {                                       \
    const std::string why_ = gpu_present();  \
    if (!why_.empty()) GTEST_SKIP() << why_; \
  } while (0)

TEST(NoGpu, CreateThrowsUnsupported) {
  SKIP_IF_GPU();
  const ncclUniqueId id{};  // never used: the GPU check comes first
  const tw::Error e = catch_tw([&] { tw::Comm::create(id, 0, 1, 0); });
  EXPECT_EQ(e.code(), tw::Errc::kUnsupported);
  EXPECT_TRUE(contains(e.what(), "no CUDA GPU"));
}

TEST(NoGpu, RunLocalThrowsUnsupportedWithoutCallingFn) {
  SKIP_IF_GPU();
  std::atomic<int> calls{0};
  const tw::Error e = catch_tw([&] { tw::Comm::run_local({}, [&](tw::Comm&) { ++calls; }); });
  EXPECT_EQ(e.code(), tw::Errc::kUnsupported);
  EXPECT_TRUE(contains(e.what(), "no CUDA GPU"));
  EXPECT_EQ(calls.load(), 0);
}

TEST(NoGpu, ProbeSystemSaysWhy) {
  SKIP_IF_GPU();
  tw::SystemReport r = tw::probe_system();
  EXPECT_FALSE(r.no_gpu_reason.empty());
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_TRUE(r.links.empty());
  EXPECT_EQ(r.nccl_header, NCCL_VERSION_CODE);
  // Which NCCL this process loaded: the library file, in the report and its JSON.
  EXPECT_NE(r.nccl_library.find("libnccl"), std::string::npos) << r.nccl_library;
  EXPECT_NE(tw::format_report(r).find(r.nccl_library), std::string::npos);
  EXPECT_NE(tw::report_json(r).find("\"nccl_library\":\"" + r.nccl_library + "\""), std::string::npos);
  EXPECT_EQ(r.tilewire_version, tw::kVersion);
  tw::probe_comm(r);
  EXPECT_FALSE(r.comm.probed);
  EXPECT_FALSE(r.comm.error.empty());
  EXPECT_TRUE(contains(tw::format_report(r), "no CUDA GPU"));
  EXPECT_TRUE(contains(tw::report_json(r), "\"gpu_present\":false"));
}

// Argument checks come before the GPU check: these hold on every machine.
TEST(CommCreate, RejectsBadRanksBeforeTouchingTheGpu) {
  const ncclUniqueId id{};
  tw::Error e = catch_tw([&] { tw::Comm::create(id, 0, 0, 0); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "nranks"));
  e = catch_tw([&] { tw::Comm::create(id, 2, 2, 0); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "rank 2"));
  e = catch_tw([&] { tw::Comm::create(id, -1, 2, 0); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
}

}  // namespace
