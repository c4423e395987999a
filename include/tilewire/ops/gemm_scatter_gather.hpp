// tilewire/ops/gemm_scatter_gather.hpp — the two GEMMs of sequence-parallel tensor parallelism:
//
//   gemm_reducescatter   C_shard(r) = rows of shard r of  sum over ranks q of A_q [M, K_local] B_q
//                        (after a row-parallel layer: the all-reduce becomes a reduce-scatter)
//   allgather_gemm       C [M, N_local] = [A_shard(0); A_shard(1); ...; A_shard(P-1)] B_r
//                        (before a column-parallel layer: its input is gathered first)
//
// Shards of M: S = shard_rows(M, P) = ceil(M / P) rounded up to a multiple of 128 (the GEMM's
// tile height), and rank r holds rows [r S, min(M, (r + 1) S)): M / P each when M is a multiple
// of 128 P; otherwise the last ranks hold fewer rows, or none. Both ops use this one rule, so a
// reduce-scatter's output is the next all-gather's input. Tiles of 128 rows never straddle two
// shards, which is what lets a fused kernel send each finished tile to the one rank that owns it.
//
// Paths (TpPath):
//   kSequential  the GEMM (cuBLASLt as a user would run it, tw::gemm where it cannot be loaded and
//                on a virtual team: src/ops/gemm/team_gemm.hpp) into the workspace, then
//                tw::reduce_scatter; or tw::all_gather into the workspace, then the GEMM;
//   kFused       the communication inside the GEMM, per tile. gemm_reducescatter: in bf16 where
//                every shard is whole 256-row blocks and M = P S, the fused all-reduce's relay
//                kernel: the ranks walk the shards 1/P of the grid apart, each tile's partial sum
//                passes down the ring (rank r - 1 adds its own in its epilogue) and ends at the
//                shard's owner, which stores it into its C_shard; otherwise (fp16, ragged shards)
//                the owner kernel: the other ranks push their partial of a tile to the rank whose
//                rows it holds, which sums the P partials in rank order in its epilogue.
//                allgather_gemm (bf16, fp16): after two LSA barriers (the own shard copied into
//                this rank's workspace between them), the GEMM (tilewire's hook kernel, 128 x 256
//                tiles in 2x1 clusters) reads every peer's shard in that peer's workspace, one
//                batch per rank; A_gathered is copied beside it. At M <= 256 (on 2 ranks or
//                more) both ops run the plain tw::gemm instead, with one kernel after it (the
//                reduce of this rank's shard of every partial) or before it (the gather);
//   kAuto        the fused path where the cost model (src/ops/fused_gemm/cost_model.hpp,
//                docs/fused_gemm.md) predicts it faster than the sequential one on H200 NVLink,
//                on 2 to 8 ranks, and the fused kernel can run here; else the sequential path.
//
// Numerics. gemm_reducescatter: each rank's partial is rounded to the dtype (the GEMM's output;
// the owner kernel rounds the owner's own partial too), the P partials are summed in fp32 in rank
// order and rounded once; the relay kernel rounds the running sum at each of its P - 1 hops
// instead (as a ring reduce-scatter does). Deterministic: the same bits on every run of a path. allgather_gemm: the gathered A is the shards' bits; C is the GEMM of it.
//
// Buffers: A, B, C_shard, A_shard, C and A_gathered may be any device memory. The workspace lies
// inside a window (Comm::alloc_window) at the same offset on every rank, holds at least
// *_workspace_size() bytes, is touched by nothing else while a call runs, and may serve any
// sequence of calls and shapes with no zeroing. bf16 or fp16 (A, B and C alike), B as [N, K]
// (kNK) or [K, N] (kKN). Every rank in the LSA team; the same call on every rank, in the same
// order. Calls run in host order on the device (Comm::CallOrder); CUDA-graph capturable.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

#include "tilewire/runtime/errors.hpp"  // tw::Status
#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/dtype.hpp"
#include "tilewire/trace/event.hpp"

namespace tw {

class Comm;

enum class TpPath { kAuto, kSequential, kFused };
const char* tp_path_name(TpPath p);                        // "auto", "sequential", "fused"
std::optional<TpPath> parse_tp_path(const std::string& s);  // exactly those (Python's path)

struct TpConfig {
  TpPath path = TpPath::kAuto;
  int reserved_sms = 0;  // SMs the GEMM leaves free (tw::gemm; cuBLASLt sizes its own grid)
  // The fused paths' %globaltimer events into this device ring (tilewire/trace/trace.hpp's
  // TraceBuffer::ring(); null events: off, one uniform branch per tile). docs/tracing.md lists
  // what each op records. The sequential path records nothing (cuBLASLt and NCCL kernels).
  trace::Ring trace{};
};

// Rows per shard (see above) and the rows rank r holds.
int shard_rows(int M, int P);
int shard_rows_of(int M, int P, int r);

struct GemmReduceScatterArgs {
  const void* A = nullptr;  // [M, K_local] row-major, this rank's shard of K
  const void* B = nullptr;  // [N, K_local] (kNK) or [K_local, N] (kKN) row-major
  void* C_shard = nullptr;  // [shard_rows_of(M, P, rank), N] row-major (unused when that is 0)
  int M = 0, N = 0, K_local = 0;
  DType dtype = DType::kBFloat16;
  BLayout b_layout = BLayout::kNK;
  void* workspace = nullptr;  // >= gemm_reducescatter_workspace_size() bytes inside a window
};

struct AllGatherGemmArgs {
  const void* A_shard = nullptr;  // [shard_rows_of(M, P, rank), K] row-major
  const void* B = nullptr;        // [N_local, K] (kNK) or [K, N_local] (kKN) row-major
  void* C = nullptr;              // [M, N_local] row-major
  void* A_gathered = nullptr;     // optional [M, K] row-major: the gathered A, for the backward pass
  int M = 0, N_local = 0, K = 0;
  DType dtype = DType::kBFloat16;
  BLayout b_layout = BLayout::kNK;
  void* workspace = nullptr;  // >= allgather_gemm_workspace_size() bytes inside a window
};

// Workspace bytes a call needs on P ranks.
size_t gemm_reducescatter_workspace_size(int M, int N, DType dtype, int P);
size_t allgather_gemm_workspace_size(int M, int K, DType dtype, int P);

// Checks that need no communicator and no GPU (rank `rank` of P): shapes, dtypes, pointers and
// alignment, the GEMM's own requirements, the path. The reason names the first problem.
Status check_gemm_reducescatter_args(const GemmReduceScatterArgs& a, int rank, int P, const TpConfig& cfg);
Status check_allgather_gemm_args(const AllGatherGemmArgs& a, int rank, int P, const TpConfig& cfg);

// CUTLASS-style: can_implement() says why a call cannot run (adding the communicator's checks:
// LSA team, the workspace's window and size); the op throws tw::Error with that reason, having
// written nothing, or enqueues the call on `stream`.
Status can_implement(const Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg = {});
void gemm_reducescatter(Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg, cudaStream_t stream);
Status can_implement(const Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg = {});
void allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream);

}  // namespace tw
