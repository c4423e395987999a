// tilewire/ops/gemm_allreduce.hpp — fused GEMM + all-reduce over the LSA team, tile by tile:
//
//   C = sum over ranks r of A_r [M, K_local] * B_r,   written to every rank's C [M, N],
//   bf16 or fp16 in and out (A, B and C in one dtype), fp32 accumulation, bit-identical on every rank.
//   fp16 runs the owner algorithm only (the relay and exchange kernels are bf16); tested at 1-8
//   virtual ranks on one H200, not timed.
//
// Status: correct and bit-identical on 2 x H200 (GPU tests, compute-sanitizer memcheck + racecheck);
// 8192x8192x4096 (relay): 1.66-1.68x faster than cuBLASLt GEMM + NCCL, 1.02-1.08x the GEMM alone
// on two machines. Design note and measurements (with their result files): docs/gemm_allreduce.md.
//
// The GEMM is tw::gemm's sm90 kernel (ops/gemm.hpp) with a communicating epilogue hook. LSA
// loads/stores only: no NVLink multicast, no copy engine. Three algorithms (GemmAllReduceAlgo):
// relay (default for 2 ranks, src/ops/gemm_allreduce/relay_hook.cuh: the ranks walk the tiles half
// a grid apart; the first to compute a tile sends its partial, the second adds it in its epilogue
// and sends the final back), exchange (src/ops/gemm_allreduce/exchange_hook.cuh: every rank sends its
// partial of every tile to every rank through the kernel's idle epilogue-load warp and reduces
// every tile itself) and owner (below, src/ops/gemm_allreduce/hook.cuh). kAuto paths that do not
// pay run cuBLASLt + tw::allreduce instead (GemmAllReducePath).
//
// Owner algorithm. Tile ownership. Tiles are (128, 256) blocks of C. Number them along the GEMM's raster order
// (kAlongM: t = tn * tiles_m + tm, kAlongN: t = tm * tiles_n + tn); tile t is owned by rank t % P.
// Consecutive tiles of the walk, which the persistent CTAs compute at about the same time, have
// consecutive owners, and every rank owns floor(T/P) or ceil(T/P) of the T tiles.
//
//   C (tiles_m = 4, tiles_n = 2, kAlongM, P = 2):  t = tn*4 + tm, owner = t % 2
//
//            tn=0      tn=1
//   tm=0   t0  r0    t4  r0
//   tm=1   t1  r1    t5  r1
//   tm=2   t2  r0    t6  r0
//   tm=3   t3  r1    t7  r1
//
// Per tile t (owner o = t % P), in the epilogue hook of the CTA that computed it, on every rank:
//
//   rank q != o:  partial_q(t) --LSA stores (C's dtype or fp32, fragment order)--> staging[t][q] @ o
//                 then flag arrive[t][q] @ o := tag (release, system scope)
//   rank o:       wait arrive[t][q] >= tag for every q != o (bounded, acquire)
//                 sum = p_0 + p_1 + ... + p_{P-1}  in fp32, rank order, each p_q rounded to the
//                       partial type first (its own too), so the bits do not depend on who owns t
//                 round once to C's dtype --LSA stores--> C(t) on every rank (its own included)
//                 then flag done[t] @ every rank := tag (release)
//   every CTA, after its last tile: wait done[t] >= tag for all t on this rank (acquire):
//                 when the kernel ends, this rank's C is final.
//
//        rank0 (owns t0, t2, ..)                    rank1 (owns t1, t3, ..)
//        t0: wait p1(t0) <------ p1(t0) -------- t0: push
//            C(t0) -> rank0, rank1 ------------> C(t0) lands, done[t0]
//        t1: push ----------- p0(t1) ------> t1: wait p0(t1)
//            C(t1) lands <------------------ C(t1) -> rank0, rank1, done[t1]
//
// `tag` is per call: 1 + a call counter kept in the workspace (every rank makes the same calls,
// so every rank uses the same tag); flags hold the tag of the last call that set them, so no
// flag is ever reset. Why this cannot deadlock or overwrite: docs/gemm_allreduce.md and
// src/ops/gemm_allreduce/plan.hpp.
//
// Requirements (can_implement checks each, with the reason):
//   * everything tw::can_implement(GemmArgs) checks (K = K_local); bf16 or fp16, fp16 with kAuto
//     or kOwner only; B as [N, K_local] (kNK) or [K_local, N] (kKN), except that the exchange
//     algorithm is built for kNK only;
//   * every rank in the LSA team; the same call, shapes and config on every rank, in the same order;
//   * C inside a window of `comm` (Comm::alloc_window), at the same offset on every rank;
//   * workspace inside a window at the same offset on every rank, >= workspace_size() bytes
//     for this call, not touched by anything but gemm_allreduce (it keeps the call counter and
//     the flags); it must not overlap A, B or C. Any sequence of calls may share it — other
//     shapes, paths, algorithms, partial precisions — with no zeroing by the caller: the
//     library records what the workspace last held and, when a call's flags cannot trust it
//     (first use, another layout, the sequential path's partial left in it, the first call of a
//     CUDA-graph capture), re-initializes the flags on every rank between two LSA barriers
//     first (src/ops/gemm_allreduce/reinit.cu);
//   * residency: the persistent grid must be co-resident on the GPU (a CTA that never starts
//     would leave its peers waiting): the launcher sizes the grid from
//     cudaOccupancyMaxActiveClusters and refuses when the kernel does not fit at all. Do not run
//     other kernels concurrently on the same GPU (another stream) while it runs: they could take
//     SMs the grid counts on; the bounded waits then end in the timeout diagnostic, not a hang.
// Calls on one communicator are ordered on the device (one stream); CUDA-graph capturable (the
// call counter lives in device memory).
//
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

struct GemmAllReduceArgs {
  const void* A = nullptr;    // [M, K_local] row-major, this rank's shard (any device memory)
  const void* B = nullptr;    // [N, K_local] (kNK) or [K_local, N] (kKN) row-major, this rank's shard
  void* C = nullptr;          // [M, N] row-major, inside a window; the sum lands on every rank
  int M = 0, N = 0, K_local = 0;
  DType dtype = DType::kBFloat16;  // A, B and C
  BLayout b_layout = BLayout::kNK;
  void* workspace = nullptr;  // >= workspace_size() bytes inside a window (see above)
};

// Precision of the partial tiles that travel to the owner. kBFloat16 means 2-byte partials in
// C's dtype: bf16 partials for a bf16 call, fp16 partials for an fp16 call (the name is kept from
// when the op was bf16 only). Two-byte partials halve the NVLink bytes; fp32 keeps one rounding
// in the whole op. Both give bit-identical results on every rank.
enum class PartialPrecision { kBFloat16, kFloat32 };
// "bf16", "fp32". parse_partial_precision accepts exactly bf16|bfloat16 and fp32|float32: the
// union of the CLI's --partials (bf16, fp32) and Python's partials (bfloat16, float32).
const char* partial_precision_name(PartialPrecision p);
std::optional<PartialPrecision> parse_partial_precision(const std::string& s);

// How tiles are reduced (docs/gemm_allreduce.md compares them):
//   kRelay     P >= 2 ranks (bf16): the ranks walk the tiles 1/P of the grid apart, so each tile
//              is computed by rank r, then r - 1, .., and last by its owner; each adds the partial
//              sum it received (loaded into shared memory during its mainloop) to its fp32
//              accumulators in the epilogue and passes the bf16 sum on, the owner sends the final
//              tile to every rank: a ring reduce-scatter and an all-gather carried by the GEMM's
//              own tiles (src/ops/gemm_allreduce/relay_hook.cuh; P - 1 roundings of a partial sum);
//   kExchange  every rank sends its bf16 partial of every tile to every rank through asynchronous
//              bulk copies and sums all P partials itself (P = 2: the bytes of reduce-scatter +
//              all-gather, one hop, nothing on the consumers' path waits for NVLink);
//   kOwner     tile t's owner (spread over ranks and CTAs) receives the P - 1 partials, sums, stores C to every rank
//              (2 (P - 1) / P tile bytes per rank: fewer bytes for P > 2, but the consumers wait);
//   kAuto      M <= 256: the decode path (GemmAllReducePath) where it applies, else kOwner on its
//              decode tile (128 x 64 without clusters: one wave where 128 x 256 tiles leave most
//              SMs idle; the relay and exchange kernels keep 128 x 256 tiles at any M). Above:
//              bf16: kRelay for P >= 2 with bf16 partials, kExchange for
//              P = 1 (B [N, K]), else kOwner; fp16: kOwner (kRelay and kExchange are bf16
//              kernels, refused for fp16).
enum class GemmAllReduceAlgo { kAuto, kExchange, kOwner, kRelay };
const char* gemm_allreduce_algo_name(GemmAllReduceAlgo a);  // "auto", "exchange", "owner", "relay"
std::optional<GemmAllReduceAlgo> parse_gemm_allreduce_algo(const std::string& s);  // exactly those

// Fused kernel, or the sequential path: the partial A_r B_r (cuBLASLt, loaded at run time; tw::gemm
// where it cannot be loaded or TILEWIRE_SEQUENTIAL_GEMM=tilewire), then tw::allreduce into C (out of
// place from the workspace when the all-reduce is two-shot, else in place): each partial rounded
// to C's dtype, summed in fp32 in rank order, bit-identical.
// kAuto: gemm_allreduce_prefers_fused() — the cost model's call (docs/fused_gemm.md): fusion pays
// where the all-reduce it hides outweighs what the fused kernel costs the GEMM.
// Fused at M <= 256 with algo kAuto, 2-byte partials and P > 1 (the decode path,
// src/ops/gemm_allreduce/decode.cu): the plain GEMM into C, then one kernel that all-reduces C
// in place through the LSA team (an owner per shard sums the P partials in rank order, fp32,
// and stores the result into every rank's C; per-CTA barriers); the workspace is not touched.
enum class GemmAllReducePath { kAuto, kFused, kSequential };
const char* gemm_allreduce_path_name(GemmAllReducePath p);  // "auto", "fused", "sequential"
std::optional<GemmAllReducePath> parse_gemm_allreduce_path(const std::string& s);  // exactly those

struct GemmAllReduceConfig {
  int reserved_sms = 0;                   // SMs the GEMM leaves idle (0 .. num_sms - 2)
  GemmRaster raster = GemmRaster::kAuto;  // tile walk; also numbers the tiles for ownership
  int swizzle = 4;                        // 1, 2, 4, 8 (4: the plain GEMM's default; relay measured best)
  PartialPrecision partials = PartialPrecision::kBFloat16;
  GemmAllReduceAlgo algo = GemmAllReduceAlgo::kAuto;
  GemmAllReducePath path = GemmAllReducePath::kAuto;
  // Per-tile %globaltimer events (every fused kernel: owner, exchange, relay): MMA start/end, partial leaves,
  // partials seen, reduction done, tile landed, into this device ring (tilewire/trace/trace.hpp's
  // TraceBuffer::ring()). Null events pointer: off, one uniform branch per tile.
  trace::Ring trace{};
};

// The kAuto path rule: one rank: fused (the GEMM straight into C); 2 to 8 ranks: fused where the
// cost model (src/ops/fused_gemm/cost_model.hpp) predicts the fused kernel faster than the GEMM
// and tw::allreduce on H200 NVLink by its margin (3%), with the fused kernel's measured overhead;
// more ranks: sequential. Calibrated on 2 x H200 (fused at M >= 2048 and not below, above
// M = 256, on the measured grid); at M <= 256 the decode path pays only on GEMMs of a few us.
// Pure host logic.
bool gemm_allreduce_prefers_fused(int M, int N, int K_local, int nranks);

// Why a call cannot run, or ok. Needs the communicator (windows, LSA team) and the current
// device (sm_90, residency); writes nothing.
Status can_implement(const Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg = {});

// Bytes of symmetric workspace per rank for these shapes on `nranks` ranks: flags (a call
// counter, one arrive flag per owned tile and source rank, one done flag per tile) and the
// staging of the partial tiles this rank owns (P - 1 slots of 128 x 256 partials per owned tile).
size_t workspace_size(const GemmAllReduceArgs& a, int nranks, const GemmAllReduceConfig& cfg = {});

// Enqueue the fused op on `stream` (current device = comm's). Throws tw::Error(kInvalidArgument)
// with can_implement()'s reason and writes nothing on bad input; kUnsupported when the device
// cannot run it; kCuda when the launch fails.
void gemm_allreduce(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, cudaStream_t stream);

}  // namespace tw
