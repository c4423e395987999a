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
// Its decode tile (HookTileT<kDecodeBlkN, kDecodeClusterM>), which the fused ops run at
// M <= kHookDecodeMaxM: 128 x 64 without clusters (gemm_allreduce/plan.hpp says why; the plain
// GEMM's own decode tiles are CUTLASS's kernels, plan_streamk).
inline constexpr int kDecodeBlkN = 64, kDecodeClusterM = 1, kHookDecodeMaxM = 256;

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

// When to leave the hook kernel (H200, 132 SMs, measured; docs/gemm.md holds the runs):
//   * M <= 256: plan_streamk's decode rows. One row of 128x256 tiles gives 16-32 tiles for 132
//     SMs at M <= 128 (0.34-0.47x cuBLASLt), two rows 0.30-0.94x at M = 256; the CUTLASS kernels
//     fill the machine with narrower tiles.
//   * M > 256: the tile of the least modelled time among k128x128pp (rows of A and B whole
//     128-byte lines, K * element size % 128 == 0, at least one tile per SM, and the GEMM on at
//     least 3/4 of the GPU's SMs: plan.cpp kPingpongMinSmShare), k256x160c2 (at
//     least one wave of its clusters) and the hook kernel (below). A tile's time is its full waves
//     (ceil(units / groups): a ragged last wave costs a whole one) times the outputs each SM makes
//     per wave times the tile's cost per output, relative to k256x160c2: kPingpongTileCost where
//     rows are whole lines, kHookTileCost where they are not, with the hook kernel's waves taken
//     as the lesser of ceil(w) and its stream-K estimate (next point). Read off the ragged sweep
//     under every plan (both dtypes): k256x160c2 ran
//     0.960-0.980x cuBLASLt on all 12 shapes; k128x128pp 0.98-1.03x where its grid comes out even
//     (3000 x 10248 x 3584: 14.7 waves) but 0.93-0.96x where 256x160's does (3000 x 5144: 7.45
//     waves against 3.0); the hook kernel 0.996x at 6143 x 10248 x 4000 (14.9 waves, 256x160
//     0.968x). The per-output costs fit those ratios on all 12 shapes (kPingpongTileCost 0.97 from
//     1.00-1.06 per shape, kHookTileCost 0.975 from 0.97-0.98); at K = 4000 (rows of 8000 bytes,
//     each 128-byte load split over two lines) the ping-pong tile fell to 0.86-0.92x and is not a
//     candidate. The five acceptance shapes stay on k128x128pp (1.03-1.10x).
//   * the hook kernel runs ceil(w) full-length waves of its w = hook_waves(); the stream-K kernel
//     on the same 128x256 tiles (kStreamK / kHeuristic, which split the ragged tail's K over every
//     SM) takes about kStreamKWaveCost * w + kStreamKFixedWaves waves. Read off the ragged sweep
//     under both kernels (hook / stream-K time ratios at 3.8-14.9 waves fit 1.023 w + 0.15 within 0.01): stream-K where that is under
//     0.99 ceil(w), i.e. last waves under ~0.65 full at 4-8 waves, under ~0.5 at 12. Under one wave
//     (plan_streamk: 128x128 tiles) stream-K where w * kStreamKPenalty < 1: the CUTLASS kernel's
//     data-parallel mode took 1.11x the hook kernel's time on the same tiles (2048x8192x4096).
inline constexpr double kStreamKWaveCost = 1.023, kStreamKFixedWaves = 0.15, kStreamKPenalty = 1.10;
inline constexpr double kPingpongTileCost = 0.97, kHookTileCost = 0.975;  // per output, against k256x160c2
inline constexpr int kLineBytes = 128;  // the ping-pong tile needs rows of A and B in whole lines

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
//   k128x64swappp, k128x128pp   the ping-pong kernel again with 128-row tiles (one consumer
//                warpgroup per tile, two wgmma row blocks): the swapped (128, 64, 64) tile and the
//                plain (128, 128, 64) one, where a warpgroup's epilogue hides under the other's
//                mainloop once a CTA has two tiles. k128x128pp is the plain GEMM's tile from M = 257
//                up wherever its grid fills the SMs and rows are whole 128-byte lines (plan_streamk).
//   k128x112pp   the ping-pong kernel on (128, 112, 64) tiles, plan_streamk's rule 4: N = 14336 is
//                128 of its tiles, one wave at M = 128 and two tiles per SM at M = 256, where
//                128x128 makes 224 tiles and leaves 92 SMs with two (cuBLASLt runs a one-wave grid
//                there). Its wgmma is the 64x112x16 atom (CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED in
//                the ping-pong translation units); without it CUTLASS's builder picks 64x16x16 atoms,
//                and the tile measured 0.12-0.73x.
//   k256x160c1, k256x160c2, k256x112c1   the cooperative kernel (stream-K scheduler) on 256-row
//                tiles, each consumer warpgroup 128 rows (160 or 112 fp32 accumulators per thread):
//                cuBLASLt's tile on the ragged sweep (its id 195, 160 x 256 in its column-major
//                terms), 35% fewer bytes per flop than 128x128, and grids that come out in whole
//                waves where 128x128 leaves a ragged one (5000 x 5144: 660 tiles, 5 waves, against
//                1640 128x128 tiles, 12.4 waves). Their wgmma atoms (64x160x16, 64x112x16) are
//                CuTe's extended shapes: their own translation units, gemm_sm90_{bf16,f16}_nk_wide.cu.
//                k256x160c2 is the rule's (M > 256, use_streamk); the other two are measured plans.
//   k128x128swappp   the ping-pong kernel on the swapped (128, 128, 64) tile: its narrow side covers
//                M = 65..128 in one tile, so every CTA streams its rows of B once (two 64-wide
//                row tiles stream the same rows of B from HBM twice). Its own translation units,
//                gemm_sm90_{bf16,f16}_nk_swapwide.cu. Wider swapped tiles (narrow sides of 256,
//                and 64 x 128) were measured and ran no faster (docs/gemm.md).
//   k256x64n2    the cooperative kernel on (256, 64, 64) tiles in 1x2 clusters along N, TMA
//                multicasting A to both CTAs: for 128 < M <= 256, one row tile (B streamed once)
//                of 64 columns (about a wave at N = 8192), each CTA loading half of A's tile.
//                The swapped tiles that also read B once load all of A in every CTA, 80% of a
//                CTA's bytes at these M (docs/gemm.md); a measured plan, not in the rule yet.
// For the swapped tile the kernel's own (M, N) are C's (N, M): the tile counts, StreamKPlan's
// raster and swizzle and CUTLASS's scheduler all speak of that swapped grid (streamk_grid).
enum class StreamKTile {
  k128x256c2, k128x128c1, k128x64c1, k128x64swap, k64x16swap, k64x32swap, k64x64swap, k128x64swappp, k128x128pp,
  k128x112pp, k256x160c1, k256x160c2, k256x112c1, k128x128swappp, k256x64n2
};
struct StreamKTileShape {
  int blk_m, blk_n, cluster_m;  // of the kernel's problem: along C's N and M when swapped
  bool swapped;
  bool pingpong;                // CUTLASS's ping-pong kernel, data-parallel (else the stream-K one)
  int cluster_n = 1;            // CTAs of a cluster along the kernel's N (A multicast to them)
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
    case StreamKTile::k128x64swappp: return {128, 64, 1, true, true};
    case StreamKTile::k128x128pp: return {128, 128, 1, false, true};
    case StreamKTile::k128x112pp: return {128, 112, 1, false, true};
    case StreamKTile::k256x160c1: return {256, 160, 1, false, false};
    case StreamKTile::k256x160c2: return {256, 160, 2, false, false};
    case StreamKTile::k256x112c1: return {256, 112, 1, false, false};
    case StreamKTile::k128x128swappp: return {128, 128, 1, true, true};
    case StreamKTile::k256x64n2: return {256, 64, 1, false, false, 2};
  }
  return {128, 128, 1, false, false};
}

// The swapped ping-pong tile of gemm_sm90_{bf16,f16}_nk_swapwide.cu (the others:
// gemm_sm90_{bf16,f16}_nk_pingpong.cu).
constexpr bool swapwide_pingpong(StreamKTile t) { return t == StreamKTile::k128x128swappp; }

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

// The plan tw::gemm uses (raster and swizzle from streamk_order, deterministic reduction). The
// decode rows follow cuBLASLt's picks (a tile whose narrow side is sized to M, a grid of about one
// wave, no split) as measured on the decode and narrow sweeps under every candidate plan
// (docs/gemm.md); sms = num_sms -
// reserved_sms, and a grid of "T tiles" is streamk_grid's count:
//   M <= 256   1a. on wide grids, between the steps of row 1 (plan.cpp decode_plan, measured at
//                 every M from 1 to 256, docs/gemm.md): k128x64swappp at
//                 32 < M < 64 where its grid covers 3/4 of the SMs; k128x128swappp at
//                 64 < M <= 112 where its grid makes 0.45-1 wave; k128x256c2 kHeuristic at
//                 128 < M <= 168 (B multicast to both row tiles); k128x64swappp at 168 < M <= 192;
//              1. the swapped ping-pong tile k64x{b}swap, b = 16 (M <= 16), 32 (M <= 32) or 64,
//                 b halved while the grid is under kNarrowFill * sms tiles and b > 16 (more, shorter
//                 tiles on narrow grids: M = 64, N = 1024 runs k64x16swap, 0.95 / 1.32x, where
//                 k64x64swap ran 0.84 / 0.88x); data-parallel, at M <= 64 at any T (0.93-1.10x on
//                 the decode sweep), at M > 64 while T <= sms (M = 128, N = 4096: 128 tiles).
//                 Under sms / 16 tiles (N < 528 at M <= 16) the split-K swapped tile instead:
//                 k128x64swap, S = max(1, min(sms / T, ceil(K / 64) / 8)) splits of >= 8 K tiles.
//              2. M > 64: the swapped 128x64 tile, data-parallel, while T <= sms: cooperative
//                 (k128x64swap) at M <= 128 (N = 8192: 0.93-0.95x at K = 8192 against the ping-pong
//                 tile's 0.86x), ping-pong (k128x64swappp) above (M = 256, N = 4096: 1.02-1.15x
//                 against 0.85-1.00x; 2026-12-02-gemm-plans-h200/pick-fb02961);
//              3. M <= 128 with more than sms 128x128 tiles: k128x128c1, kHeuristic (N = 57344);
//              4. else the 128-row ping-pong tile where rows are whole lines: k128x112pp at
//                 M > 128 where its full waves hold fewer columns per SM than k128x128pp's
//                 (ceil(T112 / sms) * 112 < ceil(T128 / sms) * 128: M = 256, N = 14336 is 256
//                 tiles in 2 waves against 224 in 2, 0.970-0.977x bf16 against 0.865-0.866x,
//                 2026-12-03-gemm-rule-h200/pick-b13653c; at M = 128, N = 14336, one wave of B
//                 streamed either way, 0.953-0.963x against 0.952-0.974x), else k128x128pp
//                 (M = 256, N >= 8192: 0.95-0.98x, the cooperative tiles 0.82-0.97x); k128x128c1
//                 kHeuristic where rows are not whole lines.
//   M > 256    the least modelled time (use_streamk above): k128x128pp data-parallel, k256x160c2
//              kHeuristic (data-parallel in whole waves, CUTLASS's split of the last two waves'
//              worth when the last is under half full), or the hook kernel's tile; when the hook
//              tile is the choice and the stream-K kernel runs it: k128x256c2, kHeuristic when its
//              last wave is under half full, else kStreamK; under a hook wave k128x128c1,
//              kHeuristic.
inline constexpr double kNarrowFill = 0.45;
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
// swap128x64 | 256x160 | 256x160c2 | 256x112 | the ping-pong tiles swap64x16 | swap64x32 | swap64x64 |
// swap128x64pp | 128x128pp | 128x112pp (mode heuristic or dp), mode
// heuristic | dp | splitk | streamk, splits 1..64, det 0 | 1, swizzle 1 | 2 | 4 | 8, raster m | n
// (the kernel's: swapped for the swapped tiles), pdl 0 | 1. Empty leaves the plan as it is. A bad
// entry: ok = false and the reason. Given the call's (a, cfg), a tile other than the plan's gets
// that tile's streamk_order (raster and swizzle on its own grid) unless the spec names them.
Status apply_streamk_plan_override(const std::string& spec, StreamKPlan* plan, const GemmArgs* a = nullptr,
                                   const GemmConfig* cfg = nullptr);
// "streamk 128x256c2 mode streamk det 1 raster m swizzle 4"; the swapped tile is "swap128x64c1".
std::string describe(const StreamKPlan& p);

}  // namespace tw::gemm_impl
