// src/ops/gemm_allreduce/plan.hpp — tile ownership, the workspace layout and its flags, shared
// by the host launcher, the device hook (hook.cuh) and the CPU tests
// (tests/cpu/gemm_allreduce_plan_test.cpp): __host__ __device__ constexpr, no GPU needed.
//
// Workspace of one rank (same layout and offset on every rank; byte offsets from its start):
//
//   [0, 256)              header, this rank only: u64 epoch (calls completed), u64 finished
//                         (CTAs past their final wait in the current call)
//   arrive_off            u64 arrive[owned_max][P]: arrive[j][q] = tag when rank q's partial of
//                         this rank's j-th owned tile (j = t / P) is in staging
//   done_off              u64 done[T]: done[t] = tag when the final tile t is in this rank's C
//   staging_off           slots[owned_max][P-1] of slot_bytes: partial of owned tile j from
//                         source q (q skips the owner: slot q < owner ? q : q - 1), in the wgmma
//                         fragment order (16-byte vector v of consumer thread i at (v*256+i)*16)
//
// "Signal indices": the op's flags live in its workspace, not in the communicator's signal array
// (ctx.signal_count = 1024 would cap the tiles); arrive_flag() / done_flag() are their indices.
//
// Why a slot per owned tile and not a ring: no slot is reused within a call, so a pusher never
// waits for a credit and the only waits are the owner's (for partials) and the final one (for
// done flags). Across calls, rank q's first push of call n+1 into staging[t] @ o happens after
// q's call n ended, i.e. after q saw done[t] of call n, which o set after reading staging[t]:
// no overwrite. A ring of R slots would bound the memory (R * 64 KiB instead of T/P * 64 KiB)
// at the price of a credit wait per tile; measure before adding it (docs/gemm_allreduce.md).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../gemm/scheduler.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace tw {
class Comm;
}

namespace tw::gemm_allreduce_impl {

using gemm_impl::Raster;

inline constexpr int kBlkM = 128, kBlkN = 256;          // the GEMM's tile (ops/gemm/launch.hpp)
inline constexpr int kConsumerThreads = 256;            // threads that call the hook
inline constexpr int kTileElems = kBlkM * kBlkN;        // accumulators per tile
// A padded relay staging slot's row: the hook's shared-memory row (kBlkN + 8 bf16, relay_hook.cuh
// kPitch), so that with RelayKnobs::padded_slots a batch of rows moves in one bulk copy. Only the
// measurement build makes its relay layouts with padded slots (relay_slots_padded); a packed slot
// is 64 KiB, and the padded one holds packed rows too.
inline constexpr int kRelaySlotPitch = (kBlkN + 8) * 2;
// Whether this build's relay layouts have padded slots (plan.cpp: the measurement build only, so
// that the workspace a user allocates does not grow for a knob under measurement).
bool relay_slots_padded();
// The decode tile (gemm_sm90.cuh HookTileT<64, 1>) of the owner kernel (gemm_allreduce and
// gemm_reducescatter) and of allgather_gemm's gated GEMM: at M <= kDecodeMaxM the 128 x 256
// tiles in 2x1 clusters leave most SMs idle (M = 128, N = 8192: 32 tiles, 16 clusters, for 132
// SMs); 128 x 64 tiles without clusters make 128 there, one wave, as cuBLASLt's 64 x 128 tiles do
// (its tile 18 on the decode sweep, docs/gemm.md). Same hook contract: 256 consumer threads,
// final accumulators, one call per tile.
inline constexpr int kDecodeBlkN = 64, kDecodeClusterM = 1, kDecodeMaxM = 256;
inline constexpr int kRelayMaxRanks = 32;  // the relay's comm warp stores one flag per peer from one lane each
inline constexpr size_t kHeaderBytes = 256;
inline constexpr size_t kSectionAlign = 4096;

TW_HD constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// The all-reduce owner's rotation of the aligned block b of P tiles (Layout::owner): a
// multiplicative hash, so that ownership is spread evenly over every persistent CTA group
// whatever the shape, swizzle and grid. With the plain t % P, a group whose work indices step
// by a multiple of P through tiles numbered along the raster meets the same owner at every
// step: at P = 4 on 16 cluster groups (8192 x 8192, a virtual rank's 33 SMs) each group owned
// either every tile it computed or none, so a quarter of the groups reduced the whole C while
// the rest finished early and polled their final flags. Any rotation per block keeps the
// owned slots (t / P) distinct per owner. tests/cpu/gemm_allreduce_plan_test.cpp,
// OwnerLoadIsBalancedPerGroup, checks the spread on the grids the launcher makes.
TW_HD constexpr int block_rotation(int b, int P) { return (int)((((uint32_t)b * 0x9E3779B1u) >> 16) % (uint32_t)P); }

struct Layout {
  // The algorithm whose protocol the layout serves (resolved: kOwner, hook.cuh; kExchange,
  // exchange_hook.cuh; kRelay, relay_hook.cuh).
  GemmAllReduceAlgo algo = GemmAllReduceAlgo::kOwner;
  int split = 0;          // relay: floor(units / P), the unit order indices of one walk segment
  int walk_shift = 0;     // relay: rank r walks from segment (r + walk_shift) % P (all-reduce 0,
                          // reduce-scatter 1: rank r's own shard last)
  int stag_q = 0;         // relay all-reduce on the staggered walk (scheduler.hpp): Q chunks of
  int stag_d = 0;         // stag_d order indices (0 chunks: the segments above)
  int ilv_d = 0;          // relay on the interleaved segments (scheduler.hpp; the reduce-scatter's
                          // shards): the chunk, the hops' distance in work indices (0: a segment)
  int P = 1;              // LSA team size (all ranks)
  int shard_tm = 0;       // reduce-scatter (gemm_reducescatter): tile rows per shard, tile t owned by
                          // the rank whose rows it holds; 0: the all-reduce's owner (owner())
  int blk_n = kBlkN;      // the tile's columns (rows: kBlkM): kBlkN, or kDecodeBlkN (owner kernel only)
  int cluster_m = 2;      // CTAs per cluster along M: gemm_impl::kClusterM, or kDecodeClusterM
  int tiles_m = 0, tiles_n = 0;
  int T = 0;              // tiles
  int owned_max = 0;      // ceil(T / P): the most tiles one rank owns
  Raster raster = Raster::kAlongM;
  int partial_bytes = 2;  // 2 (C's dtype: bf16 or fp16) or 4 (fp32)
  bool spread = true;     // all-reduce owners rotated per block (block_rotation); false: t % P,
                          // only in the measurement build (TILEWIRE_OWNER_PLAIN), to show the cost
  size_t slot_bytes = 0;  // kBlkM * blk_n * partial_bytes
  size_t arrive_off = 0, done_off = 0, staging_off = 0, total = 0;
  size_t peer_done_off = 0;  // exchange: u64 peer_done[P]: peer q finished reading call `tag`

  // Tile (tm, tn) -> its number along the raster (ownership numbering).
  TW_HD constexpr int tile_index(int tm, int tn) const {
    return raster == Raster::kAlongM ? tn * tiles_m + tm : tm * tiles_n + tn;
  }
  TW_HD constexpr int tile_m_of(int t) const { return raster == Raster::kAlongM ? t % tiles_m : t / tiles_n; }
  TW_HD constexpr int tile_n_of(int t) const { return raster == Raster::kAlongM ? t / tiles_m : t % tiles_n; }
  // All-reduce: tile t's place in its aligned block of P tiles, rotated by a hash of the block
  // (block_rotation). Reduce-scatter: the shard of its rows.
  TW_HD constexpr int owner(int t) const {
    return shard_tm ? tile_m_of(t) / shard_tm : (t % P + (spread ? block_rotation(t / P, P) : 0)) % P;
  }
  // j: the owner's j-th tile (all-reduce: j = t / P, distinct per owner because each aligned
  // block of P tiles has P distinct owners; reduce-scatter: row-major within the owner's shard
  // of tile rows).
  TW_HD constexpr int owned_slot(int t) const {
    return shard_tm ? (tile_m_of(t) - owner(t) * shard_tm) * tiles_n + tile_n_of(t) : t / P;
  }
  // Staging slot of source rank q for owned tile t (q != owner(t)).
  TW_HD constexpr size_t staging(int t, int q) const {
    const int o = owner(t);
    const int s = q < o ? q : q - 1;
    return staging_off + ((size_t)owned_slot(t) * (size_t)(P - 1) + (size_t)s) * slot_bytes;
  }
  TW_HD constexpr size_t arrive_flag(int t, int q) const {
    return algo == GemmAllReduceAlgo::kExchange ? arrive_off + 8 * ((size_t)t * (size_t)P + (size_t)q)
                    : arrive_off + 8 * ((size_t)owned_slot(t) * (size_t)P + (size_t)q);
  }
  // Exchange: slot of rank q's partial of tile t (row-major [BLK_M][BLK_N] bf16), q = 0 .. P-1.
  TW_HD constexpr size_t slot(int t, int q) const {
    return staging_off + ((size_t)t * (size_t)P + (size_t)q) * slot_bytes;
  }
  TW_HD constexpr size_t peer_done_flag(int q) const { return peer_done_off + 8 * (size_t)q; }
  // Relay: the unit order indices fall into P segments of `split` units (the last one takes the
  // remainder); rank r walks them from segment (r + walk_shift) % P on, so it reaches segment k
  // at position relay_position(o, r) = (k - r - walk_shift) mod P, and every unit is computed at
  // position 0, 1, .., P-1 by ranks r, r - 1, .., r + 1: each partial sum goes to rank r - 1,
  // and the rank at position P - 1 (the last to compute it) owns the unit.
  // On the staggered walk the unit's chunk takes the segment's place (gemm_impl::stagger_position).
  TW_HD constexpr int relay_segment(int o) const {
    const int k = split > 0 ? o / split : P - 1;
    return k < P - 1 ? k : P - 1;
  }
  TW_HD constexpr int relay_chunk(int o) const { return o / stag_d < stag_q - 1 ? o / stag_d : stag_q - 1; }
  TW_HD constexpr int relay_position(int o, int r) const {
    if (stag_q > 0) return gemm_impl::stagger_position(relay_chunk(o), r, P, stag_q);
    return ((relay_segment(o) - r - walk_shift) % P + 2 * P) % P;
  }
  TW_HD constexpr int relay_owner(int o) const {
    if (stag_q > 0) {  // the rank at position P - 1: nominal P - 1, or the last one before the wrap
      const int c = relay_chunk(o), first_wrapped = (stag_q - c + 1) / 2;
      return gemm_impl::stagger_mod(-c - (first_wrapped >= P ? P - 1 : first_wrapped - 1), P);
    }
    return ((relay_segment(o) + 1 - walk_shift) % P + P) % P;
  }
  // The fewest work indices between two hops of a unit's chain (what a partial sum's wait is
  // ahead of its tile by): a segment, or on the staggered walk two chunk times less the long last
  // chunk's remainder.
  TW_HD constexpr int relay_gap(int units) const {
    return ilv_d > 0 ? ilv_d : stag_q > 0 ? 2 * stag_d - (units - stag_q * stag_d) : split;
  }
  TW_HD constexpr size_t relay_slot(int t) const { return staging_off + (size_t)t * slot_bytes; }
  TW_HD constexpr size_t relay_arrive_flag(int t) const { return arrive_off + 8 * (size_t)t; }
  TW_HD constexpr size_t done_flag(int t) const { return done_off + 8 * (size_t)t; }
  static constexpr size_t kEpochOff = 0, kFinishedOff = 8;
};

// Exchange layout (exchange_hook.cuh), per rank:
//   [0, 256)          header (epoch, finished) as above
//   peer_done_off     u64 peer_done[P]
//   arrive_off        u64 arrive[T][P]: arrive[t][q] = tag when rank q's partial of t is in slot[t][q]
//   staging_off       slot[T][P] of slot_bytes (bf16 partials, row-major 128 x 256, rows packed)
// A slot per tile and source: no slot is reused within a call, so nobody waits for a credit.
TW_HD constexpr Layout make_exchange_layout(int M, int N, int P, Raster raster) {
  Layout l{};
  l.algo = GemmAllReduceAlgo::kExchange;
  l.P = P < 1 ? 1 : P;
  l.tiles_m = gemm_impl::ceil_div(M, kBlkM);
  l.tiles_n = gemm_impl::ceil_div(N, kBlkN);
  l.T = l.tiles_m * l.tiles_n;
  l.owned_max = l.T;
  l.raster = raster;
  l.partial_bytes = 2;
  l.slot_bytes = (size_t)kTileElems * 2;
  l.peer_done_off = kHeaderBytes;
  l.arrive_off = align_up(l.peer_done_off + 8 * (size_t)l.P, 256);
  l.done_off = l.arrive_off;  // no done flags
  l.staging_off = align_up(l.arrive_off + 8 * (size_t)l.T * (size_t)l.P, kSectionAlign);
  l.total = l.staging_off + (size_t)l.T * (size_t)l.P * l.slot_bytes;
  return l;
}

// Relay layout (relay_hook.cuh, P >= 2 ranks), per rank:
//   [0, 256)          header (epoch, finished) as above
//   arrive_off        u64 arrive[T]: arrive[t] = tag when rank me + 1's partial sum of tile t is in slot[t]
//   done_off          u64 done[T]: done[t] = tag when tile t, which this rank passed on, is done with:
//                     all-reduce: its final is in this rank's C (from its owner); reduce-scatter:
//                     rank me - 1 has read this rank's partial sum out of its slot
//   staging_off       slot[T] of 64 KiB (bf16 partial sum, row-major 128 x 256, rows packed), or with
//                     `padded` of 128 x kRelaySlotPitch bytes (rows at that pitch under the knob
//                     padded_slots, else packed); only the slots of the tiles this rank computes
//                     after position 0 are written
// `units` is the GEMM's cluster-unit count (TileSchedule::units()), which sets the split;
// shard_rows > 0: reduce-scatter (the owner keeps its final in its C shard; walk_shift 1).
// rounds >= 2 (all-reduce only): the staggered walk where gemm_impl::stagger_chunks allows it; the
// schedule must be made with the same rounds (make_schedule). chunk: the schedule's interleaved
// segments (TileSchedule::ilv_d, 0: none; it takes precedence over rounds, as there). A unit's
// chain, owner and positions are the same as on the segments: only the hops' distance differs.
TW_HD constexpr Layout make_relay_layout(int M, int N, Raster raster, int units, int P = 2, int shard_rows = 0,
                                         int rounds = 0, int chunk = 0, bool padded = false) {
  Layout l{};
  l.algo = GemmAllReduceAlgo::kRelay;
  l.P = P < 2 ? 2 : P;
  l.shard_tm = shard_rows / kBlkM;
  l.walk_shift = shard_rows > 0 ? 1 : 0;
  l.tiles_m = gemm_impl::ceil_div(M, kBlkM);
  l.tiles_n = gemm_impl::ceil_div(N, kBlkN);
  l.T = l.tiles_m * l.tiles_n;
  l.owned_max = l.T;
  l.raster = raster;
  l.split = units / l.P;
  l.ilv_d = chunk;
  l.stag_q = shard_rows > 0 || chunk > 0 ? 0 : gemm_impl::stagger_chunks(units, l.P, rounds);
  l.stag_d = l.stag_q > 0 ? units / l.stag_q : 0;
  l.partial_bytes = 2;
  l.slot_bytes = padded ? (size_t)kBlkM * kRelaySlotPitch : (size_t)kTileElems * 2;
  l.arrive_off = kHeaderBytes;
  l.done_off = align_up(l.arrive_off + 8 * (size_t)l.T, 256);
  l.staging_off = align_up(l.done_off + 8 * (size_t)l.T, kSectionAlign);
  l.total = l.staging_off + (size_t)l.T * l.slot_bytes;
  return l;
}

// Owner layout (hook.cuh); decode: the decode tile (owner_tile_is_decode).
TW_HD constexpr Layout make_layout(int M, int N, int P, Raster raster, int partial_bytes, bool decode = false) {
  Layout l{};
  l.P = P < 1 ? 1 : P;
  l.blk_n = decode ? kDecodeBlkN : kBlkN;
  l.cluster_m = decode ? kDecodeClusterM : 2;
  l.tiles_m = gemm_impl::ceil_div(M, kBlkM);
  l.tiles_n = gemm_impl::ceil_div(N, l.blk_n);
  l.T = l.tiles_m * l.tiles_n;
  l.owned_max = gemm_impl::ceil_div(l.T, l.P);
  l.raster = raster;
  l.partial_bytes = partial_bytes;
  l.slot_bytes = (size_t)kBlkM * (size_t)l.blk_n * (size_t)partial_bytes;
  l.arrive_off = kHeaderBytes;
  l.done_off = align_up(l.arrive_off + 8 * (size_t)l.owned_max * (size_t)l.P, 256);
  l.staging_off = align_up(l.done_off + 8 * (size_t)l.T, kSectionAlign);
  l.total = l.staging_off + (size_t)l.owned_max * (size_t)(l.P - 1) * l.slot_bytes;
  return l;
}

// Reduce-scatter (gemm_reducescatter's fused path, the owner algorithm of hook.cuh): the same
// sections, tiles owned by shard: rank o owns the tile rows [o shard_tm, (o + 1) shard_tm), which
// hold its rows of C (shard_rows = shard_tm x 128, ops/gemm_scatter_gather.hpp), and stores its
// finals into its own C shard only.
// decode: the decode tile (scatter_tile_is_decode).
TW_HD constexpr Layout make_scatter_layout(int M, int N, int P, Raster raster, int partial_bytes, int shard_rows,
                                           bool decode = false) {
  Layout l = make_layout(M, N, P, raster, partial_bytes, decode);
  l.shard_tm = shard_rows / kBlkM;
  l.owned_max = l.shard_tm * l.tiles_n;
  l.done_off = align_up(l.arrive_off + 8 * (size_t)l.owned_max * (size_t)l.P, 256);
  l.staging_off = align_up(l.done_off + 8 * (size_t)l.T, kSectionAlign);
  l.total = l.staging_off + (size_t)l.owned_max * (size_t)(l.P - 1) * l.slot_bytes;
  return l;
}

// Whether gemm_reducescatter's fused tile is the decode tile: M <= kDecodeMaxM (both B layouts
// and dtypes are built). Shards are whole 128-row tiles either way (shard_rows).
TW_HD constexpr bool scatter_tile_is_decode(int M) { return M <= kDecodeMaxM; }

// Whether gemm_reducescatter's fused walk is rank-rotated (gemm_allreduce.cpp): when every shard
// is whole cluster units (S a multiple of cluster_m x kBlkM: 256 rows in the 2x1 clusters, any
// shard on the decode tile) and M = P S, the units of shard q are one contiguous range of the
// kAlongN order in bands of scatter_swizzle unit rows, and rank_rotation(units, q, P) is its
// first unit. Rank r then starts at shard r + 1, so each of its CTAs reaches its own shard's
// tiles, the only ones it waits on (as their owner), after all its other work; those waits need
// only the peers' pushes, which wait for nothing. Otherwise every rank walks the same order (no
// rotation), the owner algorithm's own argument.
TW_HD constexpr bool scatter_rotates(int M, int P, int shard_rows, int cluster_m = 2) {
  return P > 1 && shard_rows % (cluster_m * kBlkM) == 0 && (long long)M == (long long)P * shard_rows;
}

// The band of gemm_reducescatter's rotated walk (kAlongN: `swizzle` unit rows walked together
// along N): the widest of 4, 2, 1 unit rows that divides a shard's unit rows (shard_rows /
// (cluster_m kBlkM)), so that every band lies inside one shard and each shard stays one
// contiguous range of the order (what scatter_rotates' argument needs). A band of w unit rows
// reads each B tile once per band instead of once per unit row: w times less of B from HBM (one
// unit row per band reads all of B again for every 256 rows of the output).
TW_HD constexpr int scatter_swizzle(int shard_rows, int cluster_m = 2) {
  const int unit_rows = cluster_m * kBlkM;
  if (shard_rows <= 0 || shard_rows % unit_rows != 0) return 1;
  const int units = shard_rows / unit_rows;
  return units % 4 == 0 ? 4 : units % 2 == 0 ? 2 : 1;
}

// Whether gemm_reducescatter's fused path runs the relay kernel (relay_hook.cuh with shard_rows):
// bf16 (the relay kernel's dtype), the 128 x 256 tile (not the decode tile), a rotated walk (each
// shard one segment of the walk: its owner reaches it last), and at most kRelayMaxRanks ranks.
// Otherwise the owner kernel (hook.cuh with make_scatter_layout).
TW_HD constexpr bool scatter_uses_relay(int M, int P, int shard_rows, DType dtype) {
  return dtype == DType::kBFloat16 && !scatter_tile_is_decode(M) && P <= kRelayMaxRanks &&
         scatter_rotates(M, P, shard_rows, 2);
}

// CTAs that run the final wait (hook.cuh): in every cluster group with work, the CTA at x = 0
// (its tile of the last work is always inside C) and the one at x = 1 when its tile of the group's
// last work is inside C too (not the padding CTA of an odd tiles_m). The last of them to finish
// advances the call counter.
TW_HD constexpr int final_wait_ctas(const gemm_impl::TileSchedule& s) {
  int n = 0;
  for (int g = 0; g < s.ctas; ++g) {
    const int k = s.units_of_cta(g);
    if (k == 0) continue;
    for (int x = 0; x < s.cluster_m; ++x)
      if (s.tile_of_work(s.work_of_cta(g, k - 1), x).m < s.tiles_m) ++n;
  }
  return n;
}

// ---------------------------------------------------------------- host only (plan.cpp)
// The plain GEMM's view of the call (K = K_local) and config. Exchange and owner: no rank
// rotation (every rank walks the tiles in the same order, which their deadlock arguments need;
// gemm_reducescatter's owner-by-shard walk is the exception, scatter_rotates);
// relay (pass its rank and P): rank r starts at segment r (scheduler.hpp rank_rotation).
GemmArgs as_gemm_args(const GemmAllReduceArgs& a);
GemmConfig as_gemm_config(const GemmAllReduceConfig& cfg, int rank = 0, int nranks = 1);
// The algorithm a call of M rows on P ranks with B in layout `b` and A, B, C in `dtype` runs:
// cfg.algo, kAuto resolved. M <= kDecodeMaxM: owner, at every P and in both dtypes (the one
// kernel with the decode tile: the relay's and exchange's shared-memory tiles are 128 x 256, which
// at decode M leave most SMs idle). Above: bf16: relay for 2 <= P <= kRelayMaxRanks with bf16 partials; for P == 1
// exchange with B [N, K], owner with B [K, N], the layout exchange is not built for; else owner.
// fp16: owner at every P (the relay and exchange kernels are built for bf16 only; check_args
// refuses them for fp16).
GemmAllReduceAlgo resolve_algo(int P, const GemmAllReduceConfig& cfg, BLayout b, DType dtype, int M);
// Whether the owner kernel of a call runs on the decode tile (kDecodeBlkN, kDecodeClusterM):
// `algo` (resolved) is kOwner and M <= kDecodeMaxM (built for both B layouts and dtypes). Every
// rank derives it from the same agreed arguments.
bool owner_tile_is_decode(const GemmAllReduceArgs& a, GemmAllReduceAlgo algo);
// The layout of a call on P ranks (raster resolved as the GEMM resolves it, on the call's tile).
Layout layout_for(const GemmAllReduceArgs& a, int P, const GemmAllReduceConfig& cfg);
// One call's plan, made once from arguments that check_args accepts: the algorithm (kAuto
// resolved), whether the owner kernel takes the decode tile, and the workspace's layout. The
// call's later steps (the checks against the communicator, the call record, the launch) read it
// instead of deciding again; every rank makes the same plan from the same agreed arguments.
struct CallPlan {
  GemmAllReduceAlgo algo = GemmAllReduceAlgo::kOwner;
  bool decode = false;
  Layout lay;
};
CallPlan plan_call(const GemmAllReduceArgs& a, int P, const GemmAllReduceConfig& cfg);
// The sequential path's all-reduce runs out of place, from the workspace's staging area, iff that
// area holds C (`c_bytes`) and the all-reduce is two-shot (c_bytes > oneshot_max_bytes): its exit
// barrier keeps a peer's next fused call from storing partials into the staging while this rank
// still reads it; the one-shot kernel re-reads its input after the peer may have finished.
TW_HD constexpr bool sequential_from_staging(const Layout& l, size_t c_bytes, size_t oneshot_max_bytes) {
  return l.total - l.staging_off >= c_bytes && c_bytes > oneshot_max_bytes;
}
// Checks that need no communicator and no GPU: everything tw::can_implement(GemmArgs) checks,
// the built kernels (bf16 with every algorithm, fp16 with the owner algorithm only; B [K, N] not
// with exchange), the workspace pointer and its overlaps, the partial precision. Accepted, the
// call's plan is left in *plan where one is given.
Status check_args(const GemmAllReduceArgs& a, int nranks, const GemmAllReduceConfig& cfg, CallPlan* plan = nullptr);

// gemm_reducescatter's fused path (ops/gemm_scatter_gather.hpp), in
// ../gemm_scatter_gather/reducescatter_fused.cpp: on the fused-GEMM engine (../fused_gemm/engine.hpp)
// with gemm_allreduce, it shares the relay and owner kernels (scatter_uses_relay picks), the
// workspace records and the residency rules. g: A, B, C = this rank's shard (M the full rows); the workspace >= the larger of
// make_scatter_layout(...).total and make_relay_layout(...).total bytes in a window.
// ring: the kernel's per-tile events (relay_hook.cuh, hook.cuh), null events: off.
void fused_reducescatter(Comm& comm, const GemmArgs& g, int shard_rows, int reserved_sms, void* workspace,
                         const trace::Ring& ring, cudaStream_t stream);
// Whether the fused kernel for B layout b, dtype (bf16 or fp16), M rows and shards of shard_rows
// (the relay or the owner kernel on its tile) can run here (sm_90, resident within the SM budget).
Status scatter_can_fuse(const Comm& comm, BLayout b, DType dtype, int M, int shard_rows);
// A sequential path wrote its data over this workspace: the next fused call re-initializes it.
void note_sequential_use(Comm& comm, void* workspace, size_t bytes, cudaStream_t stream);

}  // namespace tw::gemm_allreduce_impl
