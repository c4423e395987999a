// tests/gpu/gemm_scatter_gather_graph_test.cu — gemm_reducescatter and allgather_gemm captured
// into a CUDA graph (both paths) on the test team (real ranks or TILEWIRE_TEST_VIRTUAL):
// replays on the same inputs give the eager call's bits (both ops are deterministic), and a
// replay after new inputs were written gives the bits of an eager call on those inputs. Outputs
// (C, and allgather_gemm's A_gathered) are poisoned before every run; every element is compared.
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using namespace tw_test;

struct GraphCase {
  bool rs;  // gemm_reducescatter, else allgather_gemm
  tw::TpPath path;
  DType dtype;
  BLayout b;
};

std::string label(const GraphCase& c) {
  return std::string(c.rs ? "gemm_reducescatter " : "allgather_gemm ") + tw::tp_path_name(c.path) + " " +
         tw::dtype_name(c.dtype) + (c.b == BLayout::kNK ? " NK" : " KN");
}

TEST(GemmScatterGather, GraphReplayMatchesEagerCalls) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const int M = 1000, N = 384, K = 256;  // M neither P- nor 128-aligned
  const std::vector<GraphCase> cases = {
      {true, tw::TpPath::kSequential, DType::kBFloat16, BLayout::kNK},
      {true, tw::TpPath::kFused, DType::kBFloat16, BLayout::kNK},
      {true, tw::TpPath::kFused, DType::kFloat16, BLayout::kKN},
      {false, tw::TpPath::kSequential, DType::kFloat16, BLayout::kNK},
      {false, tw::TpPath::kFused, DType::kBFloat16, BLayout::kNK},
      {false, tw::TpPath::kFused, DType::kFloat16, BLayout::kKN},
  };
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank(), S = tw::shard_rows(M, P), rows = tw::shard_rows_of(M, P, me);
    Stream s;
    for (const GraphCase& c : cases) {
      const size_t e = tw::dtype_size(c.dtype);
      // gemm_reducescatter: A [M, K_local], C_shard [rows, N]; allgather_gemm: A_shard [rows, K], C [M, N].
      const size_t a_elems = c.rs ? (size_t)M * K : (size_t)rows * K, c_bytes = c.rs ? (size_t)rows * N * e : (size_t)M * N * e;
      DeviceBuffer A(std::max<size_t>(a_elems * e, 16)), B((size_t)N * K * e), C(std::max<size_t>(c_bytes, 16)),
          G(c.rs ? 16 : (size_t)M * K * e);  // allgather_gemm's A_gathered
      tw::Window ws = comm.alloc_window(c.rs ? tw::gemm_reducescatter_workspace_size(M, N, c.dtype, P)
                                             : tw::allgather_gemm_workspace_size(M, K, c.dtype, P));
      tw::TpConfig cfg;
      cfg.path = c.path;
      const auto call = [&] {
        if (c.rs)
          tw::gemm_reducescatter(comm, tw::GemmReduceScatterArgs{A.data(), B.data(), C.data(), M, N, K, c.dtype, c.b, ws.data()},
                                 cfg, s);
        else
          tw::allgather_gemm(comm, tw::AllGatherGemmArgs{A.data(), B.data(), C.data(), G.data(), M, N, K, c.dtype, c.b, ws.data()},
                             cfg, s);
      };
      const auto inputs = [&](uint64_t seed) {
        if (c.rs) fill(A.data(), c.dtype, a_elems, Fill::kRandom, seed, me, s);
        else fill(A.data(), c.dtype, a_elems, Fill::kRandom, seed, 0, s, (size_t)me * S * K);  // shards of one matrix
        fill(B.data(), c.dtype, (size_t)N * K, Fill::kRandom, seed + 1, me, s);
      };
      // Every rank's copies done before any rank's op (the ranks of a virtual team share the device).
      const auto meet = [&] {
        comm.sync(s);
        comm.barrier();
      };
      const auto output = [&] {
        Bytes out = to_host(C.data(), c_bytes, s);
        if (!c.rs) {
          const Bytes g = to_host(G.data(), G.bytes, s);
          out.insert(out.end(), g.begin(), g.end());
        }
        return out;
      };
      const auto poison_out = [&] {
        poison(C.data(), C.bytes, s);
        poison(G.data(), G.bytes, s);
      };
      inputs(501);
      poison_out();
      meet();
      call();
      const Bytes eager = output();
      meet();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      call();
      TW_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      TW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) {
        if (rep == 2) inputs(733);  // new data: the replay must compute, not repeat
        poison_out();
        meet();
        TW_CUDA_CHECK(cudaGraphLaunch(exec, s));
        const Bytes replay = output();
        meet();
        Bytes want = eager;
        if (rep == 2) {
          poison_out();
          meet();
          call();
          want = output();
          meet();
        }
        if (replay != want) wrong[me] += label(c) + ": replay " + std::to_string(rep) + " differs from the eager call; ";
      }
      TW_CUDA_CHECK(cudaGraphExecDestroy(exec));
      TW_CUDA_CHECK(cudaGraphDestroy(graph));
      meet();  // no rank frees its window while a peer may still read it
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

}  // namespace
