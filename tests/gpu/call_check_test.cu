// tests/gpu/call_check_test.cu — TILEWIRE_CHECK_CALLS: ranks that make different calls fail
// loudly, on every rank, before anything is written.
//
//   CallCheck.DifferentCallsFailOnEveryRank   with the check on, the last rank passes its send
//       buffer at another offset of the same window, then a different count, then a fused
//       GEMM + all-reduce with another M: every rank gets kInvalidArgument naming the field and
//       both values, the outputs stay poisoned, the communicator stays usable, and the same calls
//       made alike on every rank are exact. Without the check, a different offset reads peers'
//       bytes at the wrong place (a wrong sum) and a different count or shape ends in a timeout.
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using namespace tw_test;
using tw::DType;

constexpr size_t kCount = 4099, kOffset = 4104;  // kOffset x 4 bytes = 16416
constexpr uint64_t kSeed = 0xCA11;

std::string poisoned(const Bytes& b) {
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] != kPoison) return "byte " + std::to_string(i) + " was written";
  return "";
}

TEST(CallCheck, DifferentCallsFailOnEveryRank) {
  TW_SKIP_UNLESS_RANKS(2);
  TW_SKIP_UNLESS_SM90();
  ScopedEnv check("TILEWIRE_CHECK_CALLS", "1");  // read when the communicators are made
  const int P = team_size();
  const Bytes want = exact_sum(DType::kFloat32, kCount, kSeed, P);
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), last = comm.nranks() - 1;
    std::vector<std::string>& w = wrong[r];
    EXPECT_TRUE(comm.checks_calls());
    Stream s;
    tw::Window send = comm.alloc_window((kOffset + kCount) * 4), recv = comm.alloc_window(kCount * 4);
    fill(send.data(), DType::kFloat32, kOffset + kCount, Fill::kSmallInt, kSeed, r, s);
    poison(recv.data(), recv.bytes(), s);
    comm.sync(s);
    auto* base = static_cast<float*>(send.data());
    // `call` must be refused on every rank with a message holding every needle, `out` unwritten.
    auto refused = [&](const char* what, const std::function<void()>& call, const std::vector<const char*>& needles,
                       const tw::Window& out) {
      const ::testing::AssertionResult t = throws_tw(call, tw::Errc::kInvalidArgument, needles);
      if (!t) w.push_back(std::string(what) + ": " + t.message());
      comm.sync(s);
      if (std::string p = poisoned(to_host(out.data(), out.bytes(), s)); !p.empty()) w.push_back(std::string(what) + ": " + p);
      if (comm.aborted()) w.push_back(std::string(what) + ": the communicator was aborted");
    };
    // The last rank's send starts kOffset elements into the window: same window, another offset
    // (16-byte aligned, as the kernels require, so that only the call check can refuse it).
    const size_t off = r == last ? kOffset : 0;
    refused("offset", [&] { tw::allreduce(comm, {base + off, recv.data(), kCount, DType::kFloat32}, s); },
            {"ranks made different calls", "send: rank 0 has 'window", "offset 0'", "offset 16416'"}, recv);
    refused("count", [&] { tw::allreduce(comm, {base, recv.data(), r == last ? kCount - 1 : kCount, DType::kFloat32}, s); },
            {"count: rank 0 has '4099', rank", "has '4098'"}, recv);
    {
      const int M = 256, N = 512, K = 128;
      DeviceBuffer A(size_t(M) * K * 2), B(size_t(N) * K * 2);
      fill(A.data(), DType::kBFloat16, size_t(M) * K, Fill::kRandom, 5, r, s);
      fill(B.data(), DType::kBFloat16, size_t(N) * K, Fill::kRandom, 6, r, s);
      tw::Window C = comm.alloc_window(size_t(M) * N * 2);
      poison(C.data(), C.bytes(), s);
      tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), M, N, K, DType::kBFloat16, tw::BLayout::kNK, nullptr};
      tw::Window ws = comm.alloc_window(tw::workspace_size(a, comm.nranks(), {}));
      a.workspace = ws.data();
      if (r == last) a.M = M - 128;
      tw::GemmAllReduceConfig fused;
      fused.path = tw::GemmAllReducePath::kFused;
      refused("gemm_allreduce M", [&] { tw::gemm_allreduce(comm, a, fused, s); }, {"gemm_allreduce", "M: rank 0 has '256'", "has '128'"}, C);
    }
    // The same calls made alike: the check passes and the sum is exact.
    comm.barrier();
    tw::allreduce(comm, {base, recv.data(), kCount, DType::kFloat32}, s);
    comm.sync(s);
    if (std::string c = compare_exact(to_host(recv.data(), kCount * 4, s), want, DType::kFloat32, kCount); !c.empty())
      w.push_back("the matching call: " + c);
    comm.barrier();
  });
  for (int r = 0; r < P; ++r)
    for (const std::string& m : wrong[r]) ADD_FAILURE() << "rank " << r << ": " << m;
}

}  // namespace
