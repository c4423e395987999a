// src/ops/gemm/plan.hpp — host-side GEMM planning shared by the launcher and the CPU tests
// (tests/cpu/gemm_plan_test.cpp): raster choice, the config checks that need the SM count, and
// which of the two kernels runs a plain GEMM (and how the stream-K one splits its work).
#pragma once
#include <optional>
#include <string>

#include "scheduler.hpp"
#include "tilewire/ops/gemm.hpp"

namespace tw::gemm_impl {

// The hook kernel's tile (gemm_sm90.cuh static_asserts it): (BLK_M, BLK_N) = (128, 256), clusters
// of 2 CTAs along M.
inline constexpr int kBlkM = 128, kBlkN = 256, kClusterM = 2;

// GemmConfig::raster resolved for (M, N): kAuto walks along M when the output has more tile
// columns than tile rows (a band of B tiles stays in L2 while A streams), else along N.
Raster resolve_raster(const GemmArgs& a, const GemmConfig& cfg, int blk_m, int blk_n);

// Checks that need the device's SM count: reserved_sms must leave at least one cluster of
// `cluster_m` SMs to the GEMM.
Status check_sms(const GemmConfig& cfg, int num_sms, int cluster_m);

// ------------------------------------------------------------------------------ kernel choice
// Two kernels compute a plain GEMM:
//   kHook     gemm_sm90.cuh: 128x256 tiles, 2x1 clusters, tilewire's tile order, the per-tile hook
//             epilogue (StoreC). The fused ops always use it. One output tile per CTA per step,
//             so a problem of T tiles on G cluster groups runs ceil(T / G) full-length waves.
//   kStreamK  streamk.cuh (gemm_sm90_{bf16,f16}_nk_streamk.cu): CUTLASS's kernel with its stream-K scheduler and TMA
//             epilogue; CTAs split the K loop of some tiles and add up partial tiles in a device
//             workspace, so small grids and ragged last waves keep every SM busy. bf16 and fp16,
//             B kNK only.
enum class GemmKernel { kHook, kStreamK };
const char* kernel_name(GemmKernel k);  // "hook", "streamk"

// TILEWIRE_GEMM_KERNEL: auto (kernel_for's rule), hook, streamk (wherever it is built).
enum class KernelPref { kAuto, kHook, kStreamK };
std::optional<KernelPref> parse_kernel_pref(const std::string& s);  // nullopt when not one of the three

// The hook kernel's grid, in its own units: `units` cluster units of (256 rows, 256 columns) over
// `groups` persistent cluster groups ((num_sms - reserved_sms) / 2).
struct HookWaves {
  int units = 0, groups = 1;
  double waves() const { return double(units) / groups; }
  // Fill of the last wave, in (0, 1]: 1 when the waves come out even.
  double tail_fill() const;
};
HookWaves hook_waves(const GemmArgs& a, const GemmConfig& cfg, int num_sms);

// When to leave the hook kernel (H200, 132 SMs, measured):
//   * M <= 128: one row of 128x256 tiles gives 16-32 tiles for 132 SMs (0.34-0.47x cuBLASLt,
//     bench/results/2026-11-30-s2-h200/run06-gemm); the stream-K kernel (plan_streamk: 128x64
//     tiles, swapped operands at M <= 64) fills the machine.
//   * otherwise the hook kernel runs ceil(waves) full-length waves, the CUTLASS stream-K kernel
//     ~waves * kStreamKPenalty: its data-parallel mode with the same 128x256 tiles and order took
//     1.11x the hook kernel's time on 2048x8192x4096 (bench/results/2026-11-30-s3-h200/run01), so
//     splitting K pays only when the last wave is mostly empty (e.g. 1.1 waves, or under one wave
//     at M > 128). The ragged acceptance shapes (3.88 and 7.76 waves) stay on the hook kernel.
inline constexpr double kStreamKPenalty = 1.10;

bool use_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms);

// The kernel tw::gemm runs: `pref` (TILEWIRE_GEMM_KERNEL) first, the rule for kAuto. Where the
// stream-K kernel is not built (B kKN; it is for bf16 and fp16 with B kNK) it is always kHook.
GemmKernel kernel_for(const GemmArgs& a, const GemmConfig& cfg, int num_sms, KernelPref pref);

// ------------------------------------------------------------------------------ stream-K plan
// The instantiations of the stream-K kernel (streamk.cuh), all CUTLASS's warp-specialized
// cooperative kernel (one TMA producer warp, two consumer warpgroups of 64 rows; CUTLASS's
// ping-pong kernel does not take the stream-K scheduler):
//   k128x256c2   (128, 256, 64) tiles, 2x1 clusters: the hook kernel's mainloop, for grids of a
//                wave or more whose last wave is ragged;
//   k128x128c1   (128, 128, 64) tiles, 1x1 clusters: twice the tiles to spread, half the bytes per
//                partial tile, no padding CTA when M <= 128: for grids under one hook wave.
//   k128x64c1    (128, 64, 64) tiles, 1x1 clusters: four times the tiles of k128x256c2 for the
//                skinny, bandwidth-bound grids (65 <= M <= 128), where a split of K costs a
//                partial tile and more tiles cost only re-reads of the small A from L2.
//   k128x64swap  the same (128, 64, 64) tile on the swapped problem C^T [N, M] = B A^T (swap-AB):
//                N on the 128-wide MMA dimension, M on the 64-wide one, so at M <= 64 a tile
//                wastes none of its 128 rows and the grid has ceil(N / 128) tiles, each streaming
//                128 rows of B. C^T column-major is C row-major, so nothing is transposed.
//   k64x16swap, k64x32swap, k64x64swap   swapped (64, 16 | 32 | 64, 64) tiles on CUTLASS's ping-pong
//                kernel (two consumer warpgroups, each on its own 64-row tile, taking turns at the
//                tensor cores) with its persistent data-parallel scheduler: no split of K (the
//                ping-pong kernel does not take the stream-K scheduler) but twice the tiles of the
//                128-row tile, a narrow side sized to M (cuBLASLt picks 64x8 .. 256x32 tiles
//                without a split on most decode shapes) and deep pipelines (22 stages at 64x16).
//                Decomposition kDataParallel or kHeuristic (the same here) only.
// For the swapped tile the kernel's own (M, N) are C's (N, M): the tile counts, StreamKPlan's
// raster and swizzle and CUTLASS's scheduler all speak of that swapped grid (streamk_grid).
enum class StreamKTile { k128x256c2, k128x128c1, k128x64c1, k128x64swap, k64x16swap, k64x32swap, k64x64swap };
struct StreamKTileShape {
  int blk_m, blk_n, cluster_m;  // of the kernel's problem: along C's N and M when swapped
  bool swapped;
  bool pingpong;                // CUTLASS's ping-pong kernel, data-parallel (else the stream-K one)
};
constexpr StreamKTileShape tile_shape(StreamKTile t) {
  switch (t) {
    case StreamKTile::k128x256c2: return {128, 256, 2, false, false};
    case StreamKTile::k128x128c1: return {128, 128, 1, false, false};
    case StreamKTile::k128x64c1: return {128, 64, 1, false, false};
    case StreamKTile::k128x64swap: return {128, 64, 1, true, false};
    case StreamKTile::k64x16swap: return {64, 16, 1, true, true};
    case StreamKTile::k64x32swap: return {64, 32, 1, true, true};
    case StreamKTile::k64x64swap: return {64, 64, 1, true, true};
  }
  return {128, 128, 1, false, false};
}

// The output tile grid the kernel of `t` walks, in the kernel's own (M, N): (ceil(M / blk_m),
// ceil(N / blk_n)) of C, or (ceil(N / blk_m), ceil(M / blk_n)) for the swapped tile.
struct StreamKGrid {
  int tiles_m, tiles_n;
};
StreamKGrid streamk_grid(const GemmArgs& a, StreamKTile t);

// CUTLASS's decomposition modes (PersistentTileSchedulerSm90StreamKParams::DecompositionMode):
// kHeuristic (CUTLASS decides: data-parallel, except when the last wave is under half full: then
// stream-K over all the tiles if they make under one wave, else over the last two waves' worth;
// K loops of <= 8 K tiles stay data-parallel), kDataParallel, kSplitK (`splits` equal K ranges per tile), kStreamK (the last
// one or two waves' worth of tiles split evenly in K over all CTAs, the rest data-parallel).
enum class Decomposition { kHeuristic, kDataParallel, kSplitK, kStreamK };

struct StreamKPlan {
  StreamKTile tile = StreamKTile::k128x128c1;
  Decomposition decomposition = Decomposition::kHeuristic;
  int splits = 1;                // kSplitK only
  Raster raster = Raster::kAlongM;  // over the kernel's grid (streamk_grid), swapped for k128x64swap
  int swizzle = 1;               // CUTLASS max_swizzle_size (see streamk_swizzle)
  bool deterministic = true;     // partial tiles added in K order (bitwise reproducible), else atomics
  bool pdl = false;              // ping-pong tiles: programmatic dependent launch (measured only)
};

// The plan tw::gemm uses (raster and swizzle from streamk_order, deterministic reduction):
//   M <= 64         k128x64swap: T = ceil(N / 128) tiles (32 at N = 4096, 448 at N = 57344);
//                   split-K S = max(1, min(sms / T, ceil(K / 64) / 8)) (sms = num_sms -
//                   reserved_sms; every split keeps >= 8 K tiles) when S > 1, so that T * S
//                   units fill the SMs; else kHeuristic, which is data-parallel except over more
//                   than one wave with a last wave under half full (448 tiles: 3.39 waves), where
//                   it splits the last two waves' worth of tiles in K (stream-K) instead of
//                   leaving most SMs, and so HBM, idle in the last wave. Measured on the decode sweep
//                   (bench/results/2026-12-02-gemm-fp16-h200/run02-9cbc73c): 0.66-1.00x cuBLASLt.
//   M <= 128        k128x64c1; split-K 2 while 2 * ceil(N / 64) units fit on the SMs and K has
//                   >= 16 K tiles, else kHeuristic (data-parallel at ~1 wave). cuBLASLt runs these
//                   with 64x64 / 128x64 tiles, no split (its algorithm is printed by bench gemm).
//   hook grid >= 1 wave   k128x256c2, kStreamK (the ragged tail is what stream-K fixes);
//   otherwise       k128x128c1, kHeuristic.
StreamKPlan plan_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms);

// Sets plan->raster and plan->swizzle for plan->tile, in the kernel's grid (streamk_grid):
// GemmConfig::raster is C's, so for the swapped tile kAlongM (down C's M) is the kernel's kAlongN
// and the other way round; kAuto is resolve_raster's rule on the kernel's grid (a swapped grid at
// M <= 64 has one tile column, where both orders are the same list). Swizzle: streamk_swizzle of
// cfg.swizzle on that grid (1 for a one-column grid).
void streamk_order(const GemmArgs& a, const GemmConfig& cfg, StreamKPlan* plan);

// CUTLASS's scheduler rounds the tile grid up to a multiple of swizzle * cluster along both axes
// and gives the padding tiles real work (a K loop over zeros). The largest power of two <= `want`
// that adds no padding tile to a (tiles_m, tiles_n) grid of `cluster_m`-CTA clusters.
int streamk_swizzle(int tiles_m, int tiles_n, int cluster_m, int want);

// TILEWIRE_GEMM_STREAMK_PLAN, for measurement: overrides fields of `plan` from a comma-separated
// list of key=value ("tile=128x128,mode=splitk,splits=4,det=0"): tile 128x256 | 128x128 | 128x64 |
// swap128x64 | swap64x16 | swap64x32 | swap64x64 (the last three: mode heuristic or dp), mode
// heuristic | dp | splitk | streamk, splits 1..64, det 0 | 1, swizzle 1 | 2 | 4 | 8, raster m | n
// (the kernel's: swapped for the swapped tiles), pdl 0 | 1. Empty leaves the plan as it is. A bad
// entry: ok = false and the reason. Given the call's (a, cfg), a tile other than the plan's gets
// that tile's streamk_order (raster and swizzle on its own grid) unless the spec names them.
Status apply_streamk_plan_override(const std::string& spec, StreamKPlan* plan, const GemmArgs* a = nullptr,
                                   const GemmConfig* cfg = nullptr);
// "streamk 128x256c2 mode streamk det 1 raster m swizzle 4"; the swapped tile is "swap128x64c1".
std::string describe(const StreamKPlan& p);

}  // namespace tw::gemm_impl
