// tests/gpu/gemm_allreduce_reuse_test.cu — one workspace, any sequence of calls.
//
//   GemmAllReduceReuse.AlternatingShapesPathsAlgorithms   50 calls of tw::gemm_allreduce on ONE
//       workspace, zeroed once before the first and never again, alternating M in {200, 1024,
//       3000, 4096, 8192} (N = 2048, K_local = 1024; M = 200 runs the owner kernel on its decode
//       tile, 128 x 64), the sequential path (which leaves its bf16
//       partial in the workspace's staging area) and every fused algorithm the team can run.
//       Each call's C is checked over every element against the GPU reference (gemm_ref.cuh) and
//       for bit-identity across ranks. Before the workspace kept a record of its layout, a call
//       whose flags fell where an earlier call of another shape, path or algorithm had left
//       bytes read those bytes as flags already set, and used tiles that had not landed.
#include <array>
#include <string>
#include <vector>

#include "common.cuh"
#include "gemm_allreduce_cases.hpp"
#include "gemm_ref.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using namespace tw_test;
using tw::BLayout;
using tw::DType;

constexpr uint64_t kSeedA = 131, kSeedB = 137;
constexpr int kN = 2048, kK = 1024, kCalls = 50;
constexpr std::array<int, 5> kMs = {200, 1024, 3000, 4096, 8192};

struct Case {
  tw::GemmAllReduceConfig cfg;
  std::string name;
  bool bf16_partials;
  int hops = 1;  // roundings of a partial sum (partial_hops: the relay's P - 1 at P > 2)
};

std::vector<Case> cases_for(int P) {
  std::vector<Case> v;
  tw::GemmAllReduceConfig seq;
  seq.path = tw::GemmAllReducePath::kSequential;  // its partial goes through the workspace
  v.push_back({seq, "sequential", true});
  for (const AlgoCase& c : fused_algos(P, BLayout::kNK)) {
    tw::GemmAllReduceConfig f;
    f.path = tw::GemmAllReducePath::kFused;
    f.algo = c.algo;
    f.partials = c.partials;
    const char* a = c.algo == tw::GemmAllReduceAlgo::kRelay      ? "relay"
                    : c.algo == tw::GemmAllReduceAlgo::kExchange ? "exchange"
                                                                 : "owner";
    v.push_back({f, std::string("fused ") + a + (c.partials == tw::PartialPrecision::kFloat32 ? " fp32" : " bf16"),
                 c.partials == tw::PartialPrecision::kBFloat16, partial_hops(c.algo, P)});
  }
  return v;
}

TEST(GemmAllReduceReuse, AlternatingShapesPathsAlgorithms) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const std::vector<Case> cases = cases_for(P);
  // Every shape's reference, computed once on GPU 0 before the team starts.
  std::vector<GemmReference> refs(kMs.size());
  for (size_t i = 0; i < kMs.size(); ++i) refs[i].prepare({kMs[i], kN, kK, BLayout::kNK, P, kSeedA, kSeedB});

  // Call i: shape i % 5, case (i + i / 5) % cases: every shape meets every case, and consecutive
  // calls differ in shape and usually in path or algorithm.
  auto shape_of = [](int i) { return (size_t)i % kMs.size(); };
  auto case_of = [&](int i) { return (size_t)(i + i / (int)kMs.size()) % cases.size(); };
  std::vector<Bytes> got(P);
  std::vector<std::string> failures;  // rank 0's record of the calls that went wrong
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream st;
    const int m_max = kMs.back();
    DeviceBuffer A(size_t(m_max) * kK * 2), B(size_t(kN) * kK * 2);
    // The first M rows of A are the reference's A for that M (the fill depends on the index only).
    fill(A.data(), DType::kBFloat16, size_t(m_max) * kK, Fill::kRandom, kSeedA, r, st);
    fill(B.data(), DType::kBFloat16, size_t(kN) * kK, Fill::kRandom, kSeedB, r, st);
    tw::Window C = comm.alloc_window(size_t(m_max) * kN * 2);
    size_t ws_bytes = 0;
    for (int M : kMs)
      for (const Case& c : cases) {
        const tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), M, kN, kK, DType::kBFloat16, BLayout::kNK, nullptr};
        ws_bytes = std::max(ws_bytes, tw::workspace_size(a, P, c.cfg));
      }
    tw::Window ws = comm.alloc_window(ws_bytes);
    TW_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), st));  // once, before the first call only
    comm.sync(st);
    comm.barrier();
    for (int i = 0; i < kCalls; ++i) {
      const size_t si = shape_of(i);
      const Case& c = cases[case_of(i)];
      const int M = kMs[si];
      const tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), M, kN, kK, DType::kBFloat16, BLayout::kNK, ws.data()};
      poison(C.data(), C.bytes(), st);
      // Every rank's poison is done before any rank's kernel waits for its peers: compute-sanitizer
      // orders a memset behind a kernel running on another stream of the (shared) device.
      comm.sync(st);
      comm.barrier();
      tw::gemm_allreduce(comm, a, c.cfg, st);
      comm.sync(st);
      got[r] = to_host(C.data(), size_t(M) * kN * 2, st);
      comm.barrier();  // every rank's C of this call is on the host
      if (r == 0) {
        const std::string what = "call " + std::to_string(i) + " (" + std::to_string(M) + "x" + std::to_string(kN) +
                                 "x" + std::to_string(kK) + ", " + c.name + ")";
        std::string bad = compare_ranks(got, got[0].size());
        if (bad.empty()) bad = refs[si].check(got[0], c.bf16_partials, c.hops);
        if (!bad.empty()) failures.push_back(what + ": " + bad);
      }
      comm.barrier();  // nobody overwrites got[] or C before rank 0 has checked
    }
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << kCalls << " calls on one workspace went wrong";
}

}  // namespace
