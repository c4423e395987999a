// The GEMM's per-stream scratch (src/ops/gemm/scratch.hpp) after its other users. A stream-K
// launch skips zeroing its counters when the scratch says the last launch on the stream had the
// same layout (its last split left them zero). cuBLASLt (the sequential paths' GEMM, team_gemm)
// and the grouped GEMM write the same buffer as workspace: after either, the scratch must no
// longer vouch for any layout's counters, or the next stream-K GEMM of that layout would start
// from their garbage (wrong tiles, or a wait that never ends).
#include <string>

#include "common.cuh"
#include "ops/gemm/cublaslt.hpp"
#include "ops/gemm/scratch.hpp"
#include "ops/gemm/team_gemm.hpp"
#include "tilewire/ops/grouped_gemm.hpp"

namespace {
using tw::gemm_impl::lease_scratch;
using tw::gemm_impl::ScratchKey;
using tw_test::DeviceBuffer;
using tw_test::Stream;

constexpr size_t kLease = size_t(64) << 20;  // above team_gemm's 32 MiB: no regrowth (a fresh buffer is all zero)
const ScratchKey kKey{7, 1024, 1024, 1024, 132, 1, 2, 4, 0, 1};

void mark(cudaStream_t s) { lease_scratch(s, kLease).enqueued(kKey); }
bool trusted(cudaStream_t s) { return lease_scratch(s, kLease).counters_zero(kKey); }

TEST(GemmScratch, OtherUsersVoidTheCounters) {
  TW_SKIP_UNLESS_SM90();
  if (tw_test::virtual_ranks() > 0) GTEST_SKIP() << "team_gemm runs cuBLASLt on real ranks only";
  try {
    tw::lt::lt_api();
  } catch (const tw::Error& e) {
    GTEST_SKIP() << "no cuBLASLt: " << e.what();
  }
  std::string wrong;
  tw::Comm::run_local(std::vector<int>{0}, [&](tw::Comm& comm) {
    Stream s;
    DeviceBuffer A(256 * 256 * 2), B(256 * 256 * 2), C(256 * 256 * 2), counts(16);
    TW_CUDA_CHECK(cudaMemsetAsync(A.data(), 0, A.bytes, s));
    TW_CUDA_CHECK(cudaMemsetAsync(B.data(), 0, B.bytes, s));
    TW_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, counts.bytes, s));
    mark(s);
    if (!trusted(s)) wrong += "the scratch does not keep the layout it was told; ";
    tw::gemm_impl::team_gemm(comm, tw::GemmArgs{A.data(), B.data(), C.data(), 256, 256, 256}, 0, s);
    if (trusted(s)) wrong += "after cuBLASLt used the scratch it still vouches for the counters; ";
    mark(s);
    tw::GroupedGemmArgs g;
    g.A = A.data(), g.B = B.data(), g.C = C.data(), g.counts = static_cast<const int*>(counts.data());
    g.groups = 4, g.N = 64, g.K = 64, g.rows = 256, g.group_rows = 64;
    tw::grouped_gemm(g, {}, s);
    if (trusted(s)) wrong += "after the grouped GEMM used the scratch it still vouches for the counters; ";
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
  });
  EXPECT_EQ(wrong, "");
}

}  // namespace
