// tilewire/ops/gemm.hpp — C = A * B on Hopper (sm_90a): persistent, warp-specialized, with a
// per-tile epilogue hook the fused ops (GEMM + all-reduce, ...) plug their communication into.
//
//   A  [M, K] row-major          bf16 (fp16: see "What is built" below)
//   B  [N, K] row-major (kNK, the usual weight layout) or [K, N] row-major (kKN)
//   C  [M, N] row-major          same dtype as A and B; fp32 accumulation, one rounding
//
// The kernel (src/ops/gemm/gemm_sm90.cuh) is built from CUTLASS 4.2 / CuTe building blocks
// (nvidia-cutlass==4.2.0.0 headers): the TMA warp-specialized *cooperative* mainloop from
// cutlass::gemm::collective::CollectiveBuilder (one producer warp issues TMA loads into an
// mbarrier pipeline; two consumer warpgroups run wgmma on a 128x256x64 tile, each owning 64 rows),
// cluster 2x1x1 (B tiles multicast to both CTAs), persistent over num_sms - reserved_sms SMs, in
// the tile order of src/ops/gemm/scheduler.hpp.
//
// The fused ops plug their communication into a per-tile epilogue hook of this kernel; the hook
// contract is internal to the library (src/ops/gemm/epilogue_hook.cuh), not API.
//
// Two kernel families for the plain GEMM. tw::gemm() runs, per call, either the hook kernel above
// (with StoreC) or, for B kNK (bf16 and fp16), one of CUTLASS's own kernels (src/ops/gemm/streamk.cuh):
// the cooperative kernel with CUTLASS's stream-K tile scheduler and TMA epilogue, whose CTAs split
// the K loop of some tiles and add the fp32 partial tiles up in device scratch (small grids,
// ragged last waves), and the ping-pong kernel, data-parallel (two consumer warpgroups on two
// tiles, one's epilogue under the other's mainloop).
// Rule (src/ops/gemm/plan.hpp use_streamk and plan_streamk, from H200 measurements against
// cuBLASLt): M <= 256, the decode rows (the swapped ping-pong tiles with a narrow side sized to
// M, a one-wave 128x64 tile, the 128x128 ping-pong or cooperative tile); M > 256 with rows of A
// and B in whole 128-byte lines (K % 64 == 0) and a grid of at least one 128x128 tile per SM, the
// 128x128 ping-pong tile; otherwise the hook kernel, or stream-K on its 128x256 tiles where the
// last wave is so empty that 1.023 waves + 0.15 < 0.99 ceil(waves). TILEWIRE_GEMM_KERNEL=
// auto|hook|streamk overrides it (read once). Partial tiles are added in K order, so results are
// bitwise reproducible with every kernel (two kernels may differ from each other in the last bit).
// The fused ops always use the hook kernel.
//
// What is built (compile time on a 2-core machine matters; each instantiation is ~1 min of nvcc),
// each in bf16 and fp16 (C in the inputs' dtype, fp32 accumulation):
//   hook kernel, B kNK                src/ops/gemm/gemm_sm90_{bf16,f16}_nk.cu (+ _variants.cu in the
//                                     measurement build: epilogues measured against it,
//                                     TILEWIRE_GEMM_EPILOGUE)
//   hook kernel, B kKN                src/ops/gemm/gemm_sm90_{bf16,f16}_kn.cu
//   stream-K, B kNK                   src/ops/gemm/gemm_sm90_{bf16,f16}_nk_streamk.cu (128x256 tiles in
//                                     2x1 clusters; 128x128, 128x64 and swapped 128x64 in 1x1 clusters)
//   ping-pong, B kNK                  src/ops/gemm/gemm_sm90_{bf16,f16}_nk_pingpong.cu (swapped 64x16,
//                                     64x32, 64x64 and 128x64; 128x128; 128x112, measured plans only)
// plus, in the test binary only, bf16 kNK with tests/gpu/gemm_test.cu's recording hook.
//
// Device memory. gemm() takes no workspace: the stream-K kernel's scratch (fp32 partial tiles and
// per-tile counters; up to a few tens of MiB for the largest shapes) is allocated by the library
// on first need and cached, one buffer per (device, stream) — so GEMMs on different streams never
// share one — grown (cudaMalloc, powers of two from 1 MiB) when a call needs more, never shrunk,
// and freed at process exit; old buffers are kept until exit too, as earlier kernels or captured
// CUDA graphs may still use them. A mutex makes it safe to call gemm() from several host threads.
// Under stream capture, captured calls get scratch of their own (allocated during the capture; the
// counters are zeroed by a memset node in the graph), apart from eager calls on the same stream;
// the graph keeps using the scratch of the stream it was captured on: replay it on that stream,
// or at least not concurrently with another replay or capture of a GEMM on that stream.
//
// Rank rotation and the tile order: GemmConfig's raster/swizzle/rank/nranks choose the order of
// scheduler.hpp; reserved_sms leaves SMs idle for communication kernels running concurrently.
// The stream-K kernel honours reserved_sms, raster and swizzle (CUTLASS's raster order and swizzle,
// the swizzle lowered where it would add padding tiles) and ignores rank/nranks: rank rotation only
// orders tiles for the fused ops, which do not use it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

#include "tilewire/runtime/errors.hpp"  // tw::Status
#include "tilewire/runtime/dtype.hpp"

namespace tw {

enum class BLayout {
  kNK,  // B stored [N, K] row-major (each output column's K values contiguous: weights)
  kKN,  // B stored [K, N] row-major
};
const char* blayout_name(BLayout l);                        // "nk", "kn"
std::optional<BLayout> parse_blayout(const std::string& s);  // exactly nk|kn (CLI --layout, Python b_layout)

struct GemmArgs {
  const void* A = nullptr;  // [M, K] row-major
  const void* B = nullptr;  // [N, K] (kNK) or [K, N] (kKN) row-major
  void* C = nullptr;        // [M, N] row-major; must not overlap A or B
  int M = 0, N = 0, K = 0;
  DType dtype = DType::kBFloat16;  // A, B and C
  BLayout b_layout = BLayout::kNK;
};

enum class GemmRaster { kAuto, kAlongM, kAlongN };
const char* gemm_raster_name(GemmRaster r);                        // "auto", "m", "n"
std::optional<GemmRaster> parse_gemm_raster(const std::string& s);  // exactly auto|m|n (CLI --raster)

struct GemmConfig {
  int reserved_sms = 0;                  // SMs left free for communication (0 .. num_sms - 2)
  GemmRaster raster = GemmRaster::kAuto; // kAuto: resolve_raster() (src/ops/gemm/plan.hpp)
  int swizzle = 4;                       // band width in tiles (1, 2, 4, 8); 4: measured best overall
                                         // (docs/gemm.md)
  int rank = 0, nranks = 1;              // rank rotation (scheduler.hpp); 1 rank: no rotation
  int walk_rounds = 0;                   // >= 2: the ranks' staggered walk in that many rounds
                                         // (scheduler.hpp; the relay all-reduce); 0: rotation
  int walk_chunk = 0;                    // >= 1: the ranks' walk interleaves their P shards of M in
                                         // chunks of that many cluster units (scheduler.hpp; the
                                         // reduce-scatter relay); 0: rotation
};

// Why a call cannot run; pure host logic (no GPU). Rejects, each with its reason: null A/B/C,
// M/N/K <= 0, rows that TMA cannot address (row pitch K*2 bytes for A
// and kNK B, N*2 bytes for kKN B and C must be multiples of 16), pointers not 16-byte aligned,
// C overlapping A or B, unsupported or not-built dtypes, a bad GemmConfig.
Status can_implement(const GemmArgs& a, const GemmConfig& cfg = {});

// Bytes of device workspace the caller must provide: 0 (the stream-K scratch is the library's own,
// see "Device memory" above; the API keeps the slot).
size_t workspace_size(const GemmArgs& a, const GemmConfig& cfg = {});

// Enqueue C = A * B on `stream` (current device). Throws tw::Error(kInvalidArgument) with
// can_implement()'s reason and writes nothing on bad input; kUnsupported on a device that is not
// sm_90 or when the kernel does not fit; kCuda when a launch or the scratch allocation fails.
void gemm(const GemmArgs& a, const GemmConfig& cfg, cudaStream_t stream);

// What gemm() would run for (a, cfg) on the current device, in words, for bench reports:
// "hook raster m swizzle 4" or "streamk 128x256c2 mode streamk det 1 raster m swizzle 4".
std::string gemm_plan(const GemmArgs& a, const GemmConfig& cfg = {});

}  // namespace tw
