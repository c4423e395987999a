// Host-side GEMM checks and planning (no GPU): can_implement, workspace_size, raster choice, the
// kernel choice and the stream-K plan.
// Unit-tested in tests/cpu/gemm_plan_test.cpp.
#include "plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace tw {

namespace {

Status fail(std::string why) { return Status{false, "gemm: " + std::move(why)}; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool overlap(const void* p, size_t pn, const void* q, size_t qn) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + qn && b < a + pn;
}

}  // namespace

Status can_implement(const GemmArgs& a, const GemmConfig& cfg) {
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return fail(std::string("unsupported dtype ") + dtype_name(a.dtype) +
                " (A, B and C must be bfloat16 or half)");
  if (a.b_layout != BLayout::kNK && a.b_layout != BLayout::kKN) return fail("unknown B layout (kNK or kKN)");
  if (a.M <= 0 || a.N <= 0 || a.K <= 0)
    return fail("M, N and K must be positive (got M=" + std::to_string(a.M) + " N=" + std::to_string(a.N) +
                " K=" + std::to_string(a.K) + ")");
  if (a.A == nullptr) return fail("A is null");
  if (a.B == nullptr) return fail("B is null");
  if (a.C == nullptr) return fail("C is null");
  const size_t es = dtype_size(a.dtype);
  // TMA addresses rows with a stride that must be a multiple of 16 bytes.
  if ((size_t)a.K * es % 16 != 0)
    return fail("K=" + std::to_string(a.K) + ": rows of A" + (a.b_layout == BLayout::kNK ? " and B" : "") +
                " are K*" + std::to_string(es) + " bytes, TMA needs a multiple of 16 (K % " + std::to_string(16 / es) +
                " == 0); pad K with zeros");
  if ((size_t)a.N * es % 16 != 0)
    return fail("N=" + std::to_string(a.N) + ": rows of C" + (a.b_layout == BLayout::kKN ? " and B" : "") +
                " are N*" + std::to_string(es) + " bytes, must be a multiple of 16 (N % " + std::to_string(16 / es) +
                " == 0); pad N");
  if (!aligned16(a.A)) return fail("A is not 16-byte aligned (TMA needs 16-byte aligned bases)");
  if (!aligned16(a.B)) return fail("B is not 16-byte aligned (TMA needs 16-byte aligned bases)");
  if (!aligned16(a.C)) return fail("C is not 16-byte aligned");
  const size_t bytes_a = (size_t)a.M * a.K * es, bytes_b = (size_t)a.N * a.K * es, bytes_c = (size_t)a.M * a.N * es;
  if (overlap(a.C, bytes_c, a.A, bytes_a)) return fail("C overlaps A (the kernel reads A while tiles of C land)");
  if (overlap(a.C, bytes_c, a.B, bytes_b)) return fail("C overlaps B (the kernel reads B while tiles of C land)");
  if (cfg.reserved_sms < 0) return fail("reserved_sms is negative");
  if (cfg.swizzle != 1 && cfg.swizzle != 2 && cfg.swizzle != 4 && cfg.swizzle != 8)
    return fail("swizzle " + std::to_string(cfg.swizzle) + " (1, 2, 4 or 8)");
  if (cfg.raster != GemmRaster::kAuto && cfg.raster != GemmRaster::kAlongM && cfg.raster != GemmRaster::kAlongN)
    return fail("unknown raster order");
  if (cfg.nranks < 1 || cfg.rank < 0 || cfg.rank >= cfg.nranks)
    return fail("rank " + std::to_string(cfg.rank) + " of " + std::to_string(cfg.nranks) +
                " (need 0 <= rank < nranks)");
  if (cfg.walk_rounds < 0 || cfg.walk_rounds > 64)
    return fail("walk_rounds " + std::to_string(cfg.walk_rounds) + " (0 .. 64)");
  if (cfg.walk_chunk < 0) return fail("walk_chunk " + std::to_string(cfg.walk_chunk) + " (>= 0)");
  return Status{};
}

// Nothing from the caller: the stream-K kernel's scratch is cached by the launcher
// (src/ops/gemm/scratch.hpp; ops/gemm.hpp "Device memory").
size_t workspace_size(const GemmArgs&, const GemmConfig&) { return 0; }

namespace gemm_impl {

Raster resolve_raster(const GemmArgs& a, const GemmConfig& cfg, int blk_m, int blk_n) {
  if (cfg.raster == GemmRaster::kAlongM) return Raster::kAlongM;
  if (cfg.raster == GemmRaster::kAlongN) return Raster::kAlongN;
  return ceil_div(a.N, blk_n) > ceil_div(a.M, blk_m) ? Raster::kAlongM : Raster::kAlongN;
}

Status check_sms(const GemmConfig& cfg, int num_sms, int cluster_m) {
  if (num_sms - cfg.reserved_sms < cluster_m)
    return Status{false, "gemm: reserved_sms=" + std::to_string(cfg.reserved_sms) + " leaves " +
                             std::to_string(num_sms - cfg.reserved_sms) + " of " + std::to_string(num_sms) +
                             " SMs; the kernel needs at least " + std::to_string(cluster_m) + " (one cluster)"};
  return Status{};
}

const char* kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::kHook: return "hook";
    case GemmKernel::kStreamK: return "streamk";
  }
  return "?";
}

std::optional<KernelPref> parse_kernel_pref(const std::string& s) {
  if (s == "auto") return KernelPref::kAuto;
  if (s == "hook") return KernelPref::kHook;
  if (s == "streamk") return KernelPref::kStreamK;
  return std::nullopt;
}

double HookWaves::tail_fill() const {
  const int rem = units % groups;
  return rem == 0 ? 1.0 : double(rem) / groups;
}

HookWaves hook_waves(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  HookWaves w;
  w.units = ceil_div(ceil_div(a.M, kBlkM), kClusterM) * ceil_div(a.N, kBlkN);
  w.groups = (num_sms - cfg.reserved_sms) / kClusterM;
  if (w.groups < 1) w.groups = 1;
  return w;
}

namespace {
constexpr int kPingpongMaxM = 64;       // M <= this: a swapped ping-pong tile covers M in one tile
constexpr int kDecodeMaxM = 256;        // M <= this: the decode rows of plan_streamk
constexpr int kMinKTilesPerSplit = 8;   // a split of the swapped tile's K loop keeps >= 8 K tiles
constexpr int kSwap128x128MaxM = 112;   // 64 < M <= this: the swapped 128x128 tile (decode_plan 1a)
constexpr int kMulticastMaxM = 168;     // 128 < M <= this: the 128x256 tile in 2x1 clusters (1a)
constexpr double kWideFill = 0.75;      // 32 < M < 64: the swapped 128x64 tile from this fill (1a)

int tiles_of(const GemmArgs& a, StreamKTile t) {
  const StreamKGrid g = streamk_grid(a, t);
  return g.tiles_m * g.tiles_n;
}

// Rows of A and B (K elements each, both K-contiguous) start on 128-byte lines.
bool whole_lines(const GemmArgs& a) { return (size_t)a.K * dtype_size(a.dtype) % kLineBytes == 0; }

// The swapped ping-pong tile of narrow side b (16, 32, 64).
StreamKTile swapped_pingpong(int b) {
  return b <= 16 ? StreamKTile::k64x16swap : b <= 32 ? StreamKTile::k64x32swap : StreamKTile::k64x64swap;
}

// plan_streamk's rows for M <= 256 (plan.hpp), before the raster and swizzle; nullopt above.
std::optional<StreamKPlan> decode_plan(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  if (a.M > kDecodeMaxM) return std::nullopt;
  const int sms = num_sms - cfg.reserved_sms;
  const int k_tiles = ceil_div(a.K, 64);
  StreamKPlan p;
  auto take = [&](StreamKTile t, Decomposition d) {
    p.tile = t;
    p.decomposition = d;
    return p;
  };
  // 1. The swapped ping-pong tile: its narrow side sized to M, halved on narrow grids.
  int b = a.M <= 16 ? 16 : a.M <= 32 ? 32 : 64;
  while (b > 16 && tiles_of(a, swapped_pingpong(b)) < kNarrowFill * sms) b /= 2;
  const int narrow_tiles = tiles_of(a, swapped_pingpong(b));
  if (16 * narrow_tiles < sms) {
    // A grid too small to fill the SMs even so: the split-K swapped tile, T * S units.
    const int tiles = tiles_of(a, StreamKTile::k128x64swap);
    const int splits = std::max(1, std::min(sms / tiles, k_tiles / kMinKTilesPerSplit));
    if (splits == 1) return take(StreamKTile::k128x64swap, Decomposition::kHeuristic);
    take(StreamKTile::k128x64swap, Decomposition::kSplitK);
    p.splits = splits;
    return p;
  }
  // 1a. Between the ping-pong tile's steps, on wide grids (the candidates at 35 M from 33 to 256
  // at N x K = 8192 x 8192 and 14336 x 4096, and at four M on 4096 x 4096, 57344 x 8192 and
  // 1024 x 8192; docs/gemm.md, "What is still short", has the runs):
  //   32 < M < 64: the swapped 128x64 ping-pong tile where its grid covers 3/4 of the SMs
  //     (N = 14336: 0.89-0.96x cuBLASLt against the 64x64 tile's 0.80-0.91x);
  //   64 < M <= 112: the swapped 128x128 ping-pong tile, one tile across M, where its grid makes
  //     0.45-1 wave (N = 8192: 0.61-0.86x against the two 64-row tiles' 0.57-0.82x);
  //   128 < M <= 168: the cooperative 128x256 tile in 2x1 clusters, B multicast to both row
  //     tiles, CUTLASS's heuristic split (0.65-0.74x against the 128-row ping-pong tiles'
  //     0.36-0.47x: each of their two row tiles streams B from HBM on its own);
  //   168 < M <= 192: the swapped 128x64 ping-pong tile, three row tiles of 64 (0.76-0.83x
  //     against 0.48-0.60x).
  // Narrow grids keep the rows below (their tiles' grids would leave most SMs idle).
  if (a.M > 32 && a.M < kPingpongMaxM && tiles_of(a, StreamKTile::k128x64swappp) >= kWideFill * sms)
    return take(StreamKTile::k128x64swappp, Decomposition::kDataParallel);
  if (a.M > kPingpongMaxM && a.M <= kSwap128x128MaxM) {
    const int t = tiles_of(a, StreamKTile::k128x128swappp);
    if (t >= kNarrowFill * sms && t <= sms) return take(StreamKTile::k128x128swappp, Decomposition::kDataParallel);
  }
  if (a.M > kBlkM && a.M <= kMulticastMaxM && tiles_of(a, StreamKTile::k128x256c2) >= kNarrowFill * sms)
    return take(StreamKTile::k128x256c2, Decomposition::kHeuristic);
  if (a.M > kMulticastMaxM && a.M <= 3 * kPingpongMaxM &&
      tiles_of(a, StreamKTile::k128x64swappp) >= kNarrowFill * sms)
    return take(StreamKTile::k128x64swappp, Decomposition::kDataParallel);
  if (a.M <= kPingpongMaxM || narrow_tiles <= sms) return take(swapped_pingpong(b), Decomposition::kDataParallel);
  // 2. The swapped 128x64 tile in one wave: ping-pong at M > 128 (M = 256, N = 4096: 1.02-1.15x
  // against the cooperative tile's 0.85-1.00x), cooperative at M <= 128 (N = 8192: 0.93-0.95x at
  // K = 8192 against 0.86x, a tie at K = 4096; 2026-12-02-gemm-plans-h200/pick-fb02961).
  if (tiles_of(a, StreamKTile::k128x64swap) <= sms)
    return take(a.M > kBlkM ? StreamKTile::k128x64swappp : StreamKTile::k128x64swap, Decomposition::kDataParallel);
  // 3. One row of more than a wave of 128x128 tiles: the cooperative tile (measured ahead there).
  if (a.M <= kBlkM && tiles_of(a, StreamKTile::k128x128c1) > sms)
    return take(StreamKTile::k128x128c1, Decomposition::kHeuristic);
  // 4. The 128-row ping-pong tile where rows are whole lines: at M > 128, 112 columns where its
  // full waves give each SM fewer columns than 128 do (at M <= 128 one wave streams B either way:
  // the two measured within 2%).
  if (whole_lines(a)) {
    const int cols112 = ceil_div(tiles_of(a, StreamKTile::k128x112pp), sms) * 112;
    const int cols128 = ceil_div(tiles_of(a, StreamKTile::k128x128pp), sms) * 128;
    const bool t112 = a.M > kBlkM && cols112 < cols128;
    return take(t112 ? StreamKTile::k128x112pp : StreamKTile::k128x128pp, Decomposition::kDataParallel);
  }
  return take(StreamKTile::k128x128c1, Decomposition::kHeuristic);
}

// Full waves of tile t's grid: ceil(cluster units / cluster groups).
int full_waves(const GemmArgs& a, int sms, StreamKTile t) {
  const StreamKTileShape s = tile_shape(t);
  const StreamKGrid g = streamk_grid(a, t);
  return ceil_div(ceil_div(g.tiles_m, s.cluster_m) * g.tiles_n, std::max(1, sms / s.cluster_m));
}

// Whether the hook tile's w >= 1 waves take less time on CUTLASS's stream-K kernel (about
// 1.023 w + 0.15 waves, plan.hpp) than on the hook kernel (ceil(w) waves).
bool hook_tail_streamk(double w) { return kStreamKWaveCost * w + kStreamKFixedWaves < 0.99 * std::ceil(w); }

// The 128x128 ping-pong tile is a candidate only where the GEMM has most of the GPU: at least
// kPingpongMinSmShare of the device's SMs (num_sms - reserved_sms of num_sms). On a part of it,
// beside other GEMMs of the same size (a virtual team's ranks: each has GPU SMs / P), it ran
// 1.37-1.87x slower than the hook tile at 33 of 132 SMs with 4 GEMMs at once, and 0-6% at 66 with
// 2, where the hook tile and 128x256 (heuristic) were within 1-4% of the best plan on every shape
// (`bench gemm --virtual 2, 4 --plans` on the acceptance shapes and the 70B FFN shapes;
// docs/fused_gemm.md, "The basis"). Its operands per output are twice the 256-wide tiles', which is
// the likely cost where several grids share L2 and HBM; not measured further.
constexpr double kPingpongMinSmShare = 0.75;
constexpr bool pingpong_fits_budget(int gemm_sms, int device_sms) { return gemm_sms >= kPingpongMinSmShare * device_sms; }

// M > 256 (plan.hpp, use_streamk): the 128x128 ping-pong tile or the 256x160 one where one of them
// has the least modelled time, nullopt where the hook kernel's tile does (or neither applies).
// Times are in outputs per SM over the full waves, in units of k256x160c2's cost per output.
std::optional<StreamKTile> large_tile(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  if (a.M <= kDecodeMaxM) return std::nullopt;
  const int sms = num_sms - cfg.reserved_sms;
  constexpr StreamKTile kWide = StreamKTile::k256x160c2, kPp = StreamKTile::k128x128pp;
  const StreamKTileShape ws = tile_shape(kWide), ps = tile_shape(kPp);
  const StreamKGrid wg = streamk_grid(a, kWide);
  const bool wide_fills = ceil_div(wg.tiles_m, ws.cluster_m) * wg.tiles_n >= sms / ws.cluster_m;
  const double wide = wide_fills ? double(full_waves(a, sms, kWide)) * ws.blk_m * ws.blk_n : 0;
  if (whole_lines(a) && tiles_of(a, kPp) >= sms && pingpong_fits_budget(sms, num_sms)) {
    const double pp = kPingpongTileCost * full_waves(a, sms, kPp) * ps.blk_m * ps.blk_n;
    return wide_fills && wide < pp ? kWide : kPp;
  }
  if (!wide_fills) return std::nullopt;
  const double w = hook_waves(a, cfg, num_sms).waves();
  const double hook_waves_taken = std::min(std::ceil(w), kStreamKWaveCost * w + kStreamKFixedWaves);
  const double hook = kHookTileCost * hook_waves_taken * kBlkM * kBlkN;
  return wide < hook ? std::optional<StreamKTile>(kWide) : std::nullopt;
}
}  // namespace

bool use_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  if (a.b_layout != BLayout::kNK) return false;  // not built (bf16 and fp16 are)
  // decode_plan takes every M <= 256 (it has a row for every grid there).
  if (a.M <= kDecodeMaxM || large_tile(a, cfg, num_sms)) return true;
  const double waves = hook_waves(a, cfg, num_sms).waves();
  if (waves < 1.0) return waves * kStreamKPenalty < 1.0;  // plan_streamk's 128x128 tiles
  return hook_tail_streamk(waves);
}

GemmKernel kernel_for(const GemmArgs& a, const GemmConfig& cfg, int num_sms, KernelPref pref) {
  if (a.b_layout != BLayout::kNK) return GemmKernel::kHook;  // the stream-K kernel is built for kNK
  switch (pref) {
    case KernelPref::kHook: return GemmKernel::kHook;
    case KernelPref::kStreamK: return GemmKernel::kStreamK;
    case KernelPref::kAuto: break;
  }
  return use_streamk(a, cfg, num_sms) ? GemmKernel::kStreamK : GemmKernel::kHook;
}

int streamk_swizzle(int tiles_m, int tiles_n, int cluster_m, int want) {
  const int blocks_m = ceil_div(tiles_m, cluster_m) * cluster_m;  // CUTLASS pads M to whole clusters first
  int s = 1;
  while (s * 2 <= want) s *= 2;
  for (; s > 1; s /= 2)
    if (blocks_m % (s * cluster_m) == 0 && tiles_n % s == 0) break;
  return s;
}

StreamKGrid streamk_grid(const GemmArgs& a, StreamKTile t) {
  const StreamKTileShape s = tile_shape(t);
  return s.swapped ? StreamKGrid{ceil_div(a.N, s.blk_m), ceil_div(a.M, s.blk_n)}
                   : StreamKGrid{ceil_div(a.M, s.blk_m), ceil_div(a.N, s.blk_n)};
}

void streamk_order(const GemmArgs& a, const GemmConfig& cfg, StreamKPlan* plan) {
  const StreamKTileShape t = tile_shape(plan->tile);
  const StreamKGrid g = streamk_grid(a, plan->tile);
  if (!t.swapped) {
    plan->raster = resolve_raster(a, cfg, t.blk_m, t.blk_n);
  } else {
    // The kernel's problem is (N, M): resolve the caller's raster on it, axes exchanged.
    GemmArgs swapped = a;
    swapped.M = a.N, swapped.N = a.M;
    GemmConfig c = cfg;
    if (cfg.raster == GemmRaster::kAlongM) c.raster = GemmRaster::kAlongN;
    else if (cfg.raster == GemmRaster::kAlongN) c.raster = GemmRaster::kAlongM;
    plan->raster = resolve_raster(swapped, c, t.blk_m, t.blk_n);
  }
  plan->swizzle = streamk_swizzle(g.tiles_m, g.tiles_n, t.cluster_m, cfg.swizzle);
}

StreamKPlan plan_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  StreamKPlan p;
  if (const std::optional<StreamKPlan> d = decode_plan(a, cfg, num_sms)) {
    p = *d;
  } else if (const std::optional<StreamKTile> t = large_tile(a, cfg, num_sms)) {
    p.tile = *t;
    p.decomposition = tile_shape(*t).pingpong ? Decomposition::kDataParallel : Decomposition::kHeuristic;
  } else if (const HookWaves w = hook_waves(a, cfg, num_sms); w.waves() >= 1.0) {
    p.tile = StreamKTile::k128x256c2;
    // CUTLASS's heuristic splits the last two waves' worth when the last wave is under half full
    // (measured a little faster there than kStreamK on the ragged sweep); above half, kStreamK.
    p.decomposition = w.tail_fill() < 0.5 ? Decomposition::kHeuristic : Decomposition::kStreamK;
  } else {
    p.tile = StreamKTile::k128x128c1;
    p.decomposition = Decomposition::kHeuristic;
  }
  streamk_order(a, cfg, &p);
  if (p.decomposition != Decomposition::kSplitK) p.splits = 1;
  p.deterministic = true;
  return p;
}

Status apply_streamk_plan_override(const std::string& spec, StreamKPlan* plan, const GemmArgs* a,
                                   const GemmConfig* cfg) {
  StreamKPlan p = *plan;
  bool raster_set = false, swizzle_set = false, mode_set = false;
  auto bad = [&](const std::string& why) {
    return Status{false, "TILEWIRE_GEMM_STREAMK_PLAN='" + spec + "': " + why +
                             " (keys: tile=128x256|128x128|128x64|swap128x64|swap64x16|swap64x32|"
                             "swap64x64|swap128x64pp|swap128x128pp|128x128pp|128x112pp|"
                             "256x160|256x160c2|256x112|256x64n2, "
                             "mode=heuristic|dp|splitk|streamk, "
                             "splits=1..64, det=0|1, swizzle=1|2|4|8, raster=m|n, pdl=0|1)"};
  };
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("'" + item + "' is not key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    auto as_int = [&](int lo, int hi, int* out) {
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos) return false;
      const int x = std::stoi(v);
      if (x < lo || x > hi) return false;
      *out = x;
      return true;
    };
    if (k == "tile") {
      if (v == "128x256") p.tile = StreamKTile::k128x256c2;
      else if (v == "128x128") p.tile = StreamKTile::k128x128c1;
      else if (v == "128x64") p.tile = StreamKTile::k128x64c1;
      else if (v == "swap128x64") p.tile = StreamKTile::k128x64swap;
      else if (v == "swap64x16") p.tile = StreamKTile::k64x16swap;
      else if (v == "swap64x32") p.tile = StreamKTile::k64x32swap;
      else if (v == "swap64x64") p.tile = StreamKTile::k64x64swap;
      else if (v == "swap128x128pp") p.tile = StreamKTile::k128x128swappp;
      else if (v == "swap128x64pp") p.tile = StreamKTile::k128x64swappp;
      else if (v == "128x128pp") p.tile = StreamKTile::k128x128pp;
      else if (v == "128x112pp") p.tile = StreamKTile::k128x112pp;
      else if (v == "256x160") p.tile = StreamKTile::k256x160c1;
      else if (v == "256x160c2") p.tile = StreamKTile::k256x160c2;
      else if (v == "256x112") p.tile = StreamKTile::k256x112c1;
      else if (v == "256x64n2") p.tile = StreamKTile::k256x64n2;
      else return bad("tile '" + v + "'");
    } else if (k == "mode") {
      if (v == "heuristic") p.decomposition = Decomposition::kHeuristic;
      else if (v == "dp") p.decomposition = Decomposition::kDataParallel;
      else if (v == "splitk") p.decomposition = Decomposition::kSplitK;
      else if (v == "streamk") p.decomposition = Decomposition::kStreamK;
      else return bad("mode '" + v + "'");
      mode_set = true;
    } else if (k == "splits") {
      if (!as_int(1, 64, &p.splits)) return bad("splits '" + v + "'");
    } else if (k == "det") {
      if (v != "0" && v != "1") return bad("det '" + v + "'");
      p.deterministic = v == "1";
    } else if (k == "pdl") {
      if (v != "0" && v != "1") return bad("pdl '" + v + "'");
      p.pdl = v == "1";
    } else if (k == "swizzle") {
      if (!as_int(1, 8, &p.swizzle) || (p.swizzle & (p.swizzle - 1)) != 0) return bad("swizzle '" + v + "'");
      swizzle_set = true;
    } else if (k == "raster") {
      if (v == "m") p.raster = Raster::kAlongM;
      else if (v == "n") p.raster = Raster::kAlongN;
      else return bad("raster '" + v + "'");
      raster_set = true;
    } else {
      return bad("unknown key '" + k + "'");
    }
  }
  if (tile_shape(p.tile).pingpong) {  // data-parallel only: a split the plan had does not carry over
    if (!mode_set) p.decomposition = Decomposition::kDataParallel;
    if (p.decomposition != Decomposition::kHeuristic && p.decomposition != Decomposition::kDataParallel)
      return bad("the ping-pong tiles (swap64x*, *pp) are data-parallel only (mode heuristic or dp)");
    p.splits = 1;
  }
  if (p.pdl && !tile_shape(p.tile).pingpong)
    return bad("pdl is built for the ping-pong tiles (swap64x*, *pp) only");
  // Another tile walks another grid (swapped axes, other tile counts): its own raster and swizzle,
  // unless the spec names them.
  if (a != nullptr && cfg != nullptr && p.tile != plan->tile) {
    StreamKPlan ordered = p;
    streamk_order(*a, *cfg, &ordered);
    if (!raster_set) p.raster = ordered.raster;
    if (!swizzle_set) p.swizzle = ordered.swizzle;
  }
  *plan = p;
  return Status{};
}

std::string describe(const StreamKPlan& p) {
  const StreamKTileShape t = tile_shape(p.tile);
  const char* mode = p.decomposition == Decomposition::kHeuristic      ? "heuristic"
                     : p.decomposition == Decomposition::kDataParallel ? "dp"
                     : p.decomposition == Decomposition::kSplitK       ? "splitk"
                                                                       : "streamk";
  // The tile's kernel: pp (ping-pong), nC (C CTAs a cluster along N), cC (along M).
  std::string kernel = "pp";
  if (!t.pingpong) {
    kernel = t.cluster_n > 1 ? "n" : "c";
    kernel += std::to_string(t.cluster_n > 1 ? t.cluster_n : t.cluster_m);
  }
  std::string s = std::string("streamk ") + (t.swapped ? "swap" : "") + std::to_string(t.blk_m) + "x" +
                  std::to_string(t.blk_n) + kernel + " mode " + mode;
  if (p.decomposition == Decomposition::kSplitK) s += " splits " + std::to_string(p.splits);
  s += std::string(" det ") + (p.deterministic ? "1" : "0") + " raster " + (p.raster == Raster::kAlongM ? "m" : "n") +
       " swizzle " + std::to_string(p.swizzle);
  if (p.pdl) s += " pdl";
  return s;
}

}  // namespace gemm_impl
}  // namespace tw
