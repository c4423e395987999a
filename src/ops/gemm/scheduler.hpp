// src/ops/gemm/scheduler.hpp — which output tile a persistent GEMM CTA computes, and in what order.
//
// Pure integer math, __host__ __device__ constexpr: the CPU tests (tests/cpu/gemm_scheduler_test.cpp)
// check exactly the code the kernel runs.
//
// Terms (all counts in tiles; M, N are the GEMM's output extents):
//
//   tile (tm, tn)     the (BLK_M, BLK_N) block of C at rows [tm*BLK_M, ...), cols [tn*BLK_N, ...);
//                     tiles_m = ceil(M / BLK_M), tiles_n = ceil(N / BLK_N) (edge tiles are partial).
//   cluster unit      cluster_m consecutive M-tiles with the same tn: the CTAs of one 2x1 cluster
//                     compute them together (they share B's tile through TMA multicast).
//                     units_m = ceil(tiles_m / cluster_m); a unit's CTA whose tm >= tiles_m has no
//                     tile (it still runs the mainloop on zeros: see gemm_sm90.cuh).
//   order index o     0 .. units-1: the position of a unit in the chosen raster/swizzle order.
//   work index w      0 .. units-1: what the persistent CTAs enumerate; unit work w is order index
//                     o = (w + rotation) mod units.
//
// Raster and swizzle. Along M (kAlongM): consecutive order indices walk down M first, in bands of
// `swizzle` units of N: with swizzle 2 and units_m = 3, units_n = 4 the order is
//
//        tn:  0  1  2  3
//   tm 0:     0  3  6  9         order index of each (tm, tn) unit; a band is `swizzle` columns,
//   tm 1:     1  4  7 10         walked row-major inside the band when swizzle > 1:
//   tm 2:     2  5  8 11           swizzle 2 ->   0  1 | 6  7
//                                                 2  3 | 8  9
//                                                 4  5 |10 11
// kAlongN is the transpose. The last band is narrower when `swizzle` does not divide the extent.
// A band of `swizzle` N-tiles walked down M keeps `swizzle` B tiles hot in L2 while A streams.
//
// Rank rotation (the fused ops): rank r of P starts at order index rotation = r * floor(units / P)
// and walks the same order from there, wrapping. What is guaranteed, exactly: for every work index
// w, rank r's unit is order index (w + r*floor(units/P)) mod units, so the P ranks at step w hold P
// distinct units whenever units >= P, spaced floor(units/P) apart; and unit o is reached by rank r
// at work index (o - r*floor(units/P)) mod units. Since every rank runs the same persistent
// schedule (same grid, same CTA -> w assignment), unit o is computed on rank r in wave
// ((o - rotation_r) mod units) / ctas: a tile that rank r needs from rank s after rank s computed it
// (reduce-scatter ownership "tile o belongs to rank o*P/units") is produced at the start of s's
// pass and consumed in the same wave index on every rank. "About the same time" is only this
// wave-index statement: nothing in the kernel synchronises ranks.
//
// Staggered walk (the relay all-reduce on P ranks, `rounds` >= 2; docs/gemm_allreduce.md): the
// order is cut into Q = P * rounds chunks of d = floor(units / Q) order indices (the last chunk
// takes the remainder rem, which must be < d). Chunk c is computed first by rank r0 = -c mod P at
// chunk time c, then at nominal position p = 1, 2, .. by rank r0 - p at chunk time (c + 2p) mod Q:
// rank r at chunk time t computes chunk (t - 2p) mod Q with p = (t + r) mod P. Every rank visits
// every chunk once, the hops of a chunk go down the ring two chunk times apart, and at any chunk
// time the P ranks are at P different nominal positions, so the owners' finals (the position
// P - 1) are spread over the call instead of all falling in its last segment. The chunks whose
// visits run past chunk time Q - 1 wrap to its start: their chain starts at the first wrapped
// position (stagger_position). A rank's work indices follow its chunk times, the long last chunk
// taking d + rem of them. 0 chunks: the rotation walk above.
//
// Interleaved shards (the relay's TILEWIRE_RELAY_WAVES, `chunk` = d >= 1): the order is P shards
// of SU = units / P contiguous order indices (shard s: [s SU, (s + 1) SU); the reduce-scatter's
// shards of M, the all-reduce's segments), each cut into SU / d chunks of d. Rank r (the `rank`
// passed: the first shard it visits) walks them in rounds: round c is chunk c of shards r, r + 1,
// .., r + P - 1 (mod P), so work index w = (c P + j) d + x computes order index s SU + c d + x with
// s = (r + j) mod P. Each unit is then computed by the P ranks d work indices apart, in the ring
// order the rotation walk has (the reduce-scatter's shard owner last, its `rank` being the owner's
// rank + 1), where the rotation walk puts them a whole shard apart: a partial sum waits d work
// indices instead of SU (meant to be read while still in L2; on one GPU it measured no faster,
// docs/gemm_allreduce.md). Needs units = P SU and d dividing SU, d < SU (interleave_chunk picks
// one); otherwise (0) the rotation walk.
// Persistent distribution: `ctas` cluster-groups (num_sms - reserved_sms, rounded down to a
// cluster multiple, divided by cluster_m) take work indices w = cta, cta + ctas, cta + 2*ctas, ...
// Every unit is taken by exactly one CTA group; CTA group c does ceil((units - c) / ctas) units.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TW_HD __host__ __device__
#else
#define TW_HD
#endif

namespace tw::gemm_impl {

enum class Raster : int { kAlongM = 0, kAlongN = 1 };

struct TileCoord {
  int m = 0;  // tile index along M (rows tm*BLK_M ..)
  int n = 0;  // tile index along N
  TW_HD constexpr bool operator==(const TileCoord& o) const { return m == o.m && n == o.n; }
};

TW_HD constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

TW_HD constexpr int stagger_mod(int a, int m) { return (a % m + m) % m; }
// Q when the staggered walk applies to `units` order indices on `nranks` ranks in `rounds` rounds,
// else 0: rounds >= 2 (so Q >= 2 P and a chain's wrap leaves at least two chunk times), nranks >= 2,
// and chunks of d >= 1 with a remainder below d (so consecutive hops stay d work indices apart).
TW_HD constexpr int stagger_chunks(int units, int nranks, int rounds) {
  if (rounds < 2 || nranks < 2 || units <= 0) return 0;
  const long long q = (long long)nranks * rounds;
  if (q > units) return 0;
  const int d = units / (int)q;
  return units - d * (int)q < d ? (int)q : 0;
}
// Rank r's nominal position in chunk c and its chunk time there.
TW_HD constexpr int stagger_nominal(int c, int r, int P) { return stagger_mod(-c - r, P); }
TW_HD constexpr int stagger_time(int c, int r, int P, int Q) { return (c + 2 * stagger_nominal(c, r, P)) % Q; }
// Rank r's position in chunk c's chain (0 computes it first, P - 1 last): the wrapped visits come
// first, from the first nominal position p* = ceil((Q - c) / 2) whose chunk time passes Q - 1.
TW_HD constexpr int stagger_position(int c, int r, int P, int Q) {
  const int p = stagger_nominal(c, r, P), first_wrapped = (Q - c + 1) / 2;
  if (first_wrapped >= P) return p;
  return p >= first_wrapped ? p - first_wrapped : p + P - first_wrapped;
}

struct TileSchedule {
  int units_m = 0;      // cluster units along M = ceil(tiles_m / cluster_m)
  int units_n = 0;      // units along N = tiles_n
  int cluster_m = 1;    // CTAs per cluster along M (1 or 2)
  int tiles_m = 0;      // real tiles along M (tm >= tiles_m are padding CTAs of the last cluster)
  int swizzle = 1;      // band width in units (>= 1)
  Raster raster = Raster::kAlongM;
  int rotation = 0;     // order index of work index 0 (rank rotation), 0 <= rotation < units
  int ctas = 1;         // persistent cluster groups (>= 1)
  int stag_q = 0;       // staggered walk (above): Q chunks, 0: the rotation walk
  int stag_d = 0;       // its chunk length d (the last chunk: units - (Q - 1) d)
  int stag_rank = 0, stag_p = 1;  // this rank of P (the staggered walk and the interleaved shards)
  int ilv_d = 0;        // interleaved shards (above): chunk length d, 0: off

  TW_HD constexpr int units() const { return units_m * units_n; }

  // Order index -> unit (um, un). Bands of `swizzle` along the minor-inner direction.
  TW_HD constexpr TileCoord unit_of_order(int o) const {
    // "major" is the direction walked first (M for kAlongM), "minor" the banded one.
    const int major = raster == Raster::kAlongM ? units_m : units_n;
    const int minor = raster == Raster::kAlongM ? units_n : units_m;
    const int band_units = major * swizzle;  // units in a full band
    const int band = o / band_units;
    const int in_band = o - band * band_units;
    const int first_minor = band * swizzle;
    const int width = (minor - first_minor) < swizzle ? (minor - first_minor) : swizzle;
    const int maj = in_band / width;
    const int mnr = first_minor + in_band % width;
    return raster == Raster::kAlongM ? TileCoord{maj, mnr} : TileCoord{mnr, maj};
  }

  // Inverse of unit_of_order.
  TW_HD constexpr int order_of_unit(TileCoord u) const {
    const int major = raster == Raster::kAlongM ? units_m : units_n;
    const int minor = raster == Raster::kAlongM ? units_n : units_m;
    const int maj = raster == Raster::kAlongM ? u.m : u.n;
    const int mnr = raster == Raster::kAlongM ? u.n : u.m;
    const int band = mnr / swizzle;
    const int first_minor = band * swizzle;
    const int width = (minor - first_minor) < swizzle ? (minor - first_minor) : swizzle;
    return band * major * swizzle + maj * width + (mnr - first_minor);
  }

  TW_HD constexpr int order_of_work(int w) const {
    if (ilv_d > 0) {
      const int P = stag_p, d = ilv_d, su = units() / P;
      const int c = w / (P * d), rem = w - c * P * d, j = rem / d;
      return ((stag_rank + j) % P) * su + c * d + (rem - j * d);
    }
    if (stag_q > 0) {
      const int d = stag_d, rem = units() - stag_q * d, t_last = stag_time(stag_q - 1);
      int t = 0, i = 0;
      if (w < t_last * d) t = w / d, i = w - t * d;
      else if (w < t_last * d + d + rem) t = t_last, i = w - t_last * d;
      else t = (w - rem) / d, i = w - rem - t * d;
      const int c = stagger_mod(t - 2 * stagger_mod(t + stag_rank, stag_p), stag_q);
      return c * d + i;
    }
    const int o = w + rotation;
    return o >= units() ? o - units() : o;
  }
  TW_HD constexpr int work_of_order(int o) const {
    if (ilv_d > 0) {
      const int P = stag_p, d = ilv_d, su = units() / P;
      const int sh = o / su, in = o - sh * su, c = in / d;
      return (c * P + stagger_mod(sh - stag_rank, P)) * d + (in - c * d);
    }
    if (stag_q > 0) {
      const int d = stag_d, rem = units() - stag_q * d;
      const int c = o / d < stag_q - 1 ? o / d : stag_q - 1;
      const int t = stag_time(c);
      return t * d + (t > stag_time(stag_q - 1) ? rem : 0) + (o - c * d);
    }
    const int w = o - rotation;
    return w < 0 ? w + units() : w;
  }
  // Staggered walk: the chunk time at which this rank computes chunk c.
  TW_HD constexpr int stag_time(int c) const { return stagger_time(c, stag_rank, stag_p, stag_q); }

  // Work index w -> the tile computed by the CTA at position `cta_in_cluster` (0..cluster_m-1).
  TW_HD constexpr TileCoord tile_of_work(int w, int cta_in_cluster) const {
    const TileCoord u = unit_of_order(order_of_work(w));
    return TileCoord{u.m * cluster_m + cta_in_cluster, u.n};
  }
  // Inverse: the work index that computes tile t (t.m < tiles_m).
  TW_HD constexpr int work_of_tile(TileCoord t) const {
    return work_of_order(order_of_unit(TileCoord{t.m / cluster_m, t.n}));
  }

  // Persistent distribution: cluster group c's i-th work index, or -1 past its last.
  TW_HD constexpr int work_of_cta(int c, int i) const {
    const long long w = (long long)c + (long long)i * ctas;
    return w < units() ? (int)w : -1;
  }
  TW_HD constexpr int units_of_cta(int c) const { return c < units() ? ceil_div(units() - c, ctas) : 0; }
};

// First order index of rank `rank` of `nranks`: rank * floor(units / nranks). 0 when nranks <= 1.
TW_HD constexpr int rank_rotation(int units, int rank, int nranks) {
  return (nranks <= 1 || units <= 0) ? 0 : (int)(((long long)(units / nranks) * rank) % units);
}

// The interleaved shards' chunk (above) for `units` order indices on `nranks` ranks and `ctas`
// cluster groups: the shortest divisor d of a shard's SU = units / nranks with d >= waves * ctas
// (hops at least that many waves apart: a rank seldom waits for a tile computed at the same
// step), if it is below SU; else 0 (the rotation walk, whose hops are SU apart already).
TW_HD constexpr int interleave_chunk(int units, int nranks, int ctas, int waves) {
  if (nranks < 2 || units <= 0 || units % nranks != 0 || waves < 1 || ctas < 1) return 0;
  const int su = units / nranks;
  for (long long d = (long long)waves * ctas; d < su; ++d)
    if (su % d == 0) return (int)d;
  return 0;
}

// Persistent cluster groups for `num_sms` SMs of which `reserved_sms` are left to communication:
// floor((num_sms - reserved_sms) / cluster_m), at least 1, at most `units`.
TW_HD constexpr int persistent_ctas(int num_sms, int reserved_sms, int cluster_m, int units) {
  int c = (num_sms - reserved_sms) / cluster_m;
  if (c > units) c = units;
  return c < 1 ? 1 : c;
}

// The schedule for an (M, N) output with (blk_m, blk_n) tiles. `swizzle` < 1 is treated as 1 and
// capped at the banded extent; rank/nranks give the rotation, or with `rounds` >= 2 the staggered
// walk where stagger_chunks allows it, or with `chunk` >= 1 the interleaved shards where chunk
// divides a shard (and below it), which takes precedence.
TW_HD constexpr TileSchedule make_schedule(int M, int N, int blk_m, int blk_n, int cluster_m, Raster raster,
                                           int swizzle, int rank, int nranks, int num_sms, int reserved_sms,
                                           int rounds = 0, int chunk = 0) {
  TileSchedule s{};
  s.tiles_m = ceil_div(M, blk_m);
  s.cluster_m = cluster_m;
  s.units_m = ceil_div(s.tiles_m, cluster_m);
  s.units_n = ceil_div(N, blk_n);
  s.raster = raster;
  const int minor = raster == Raster::kAlongM ? s.units_n : s.units_m;
  s.swizzle = swizzle < 1 ? 1 : (swizzle > minor ? (minor < 1 ? 1 : minor) : swizzle);
  s.rotation = rank_rotation(s.units(), rank, nranks);
  s.stag_q = stagger_chunks(s.units(), nranks, rounds);
  if (s.stag_q > 0) {
    s.rotation = 0;
    s.stag_d = s.units() / s.stag_q;
    s.stag_rank = rank, s.stag_p = nranks;
  }
  if (chunk > 0 && nranks >= 2 && s.units() % nranks == 0 && (s.units() / nranks) % chunk == 0 &&
      chunk < s.units() / nranks) {
    s.stag_q = 0, s.stag_d = 0, s.rotation = 0;
    s.ilv_d = chunk;
    s.stag_rank = rank, s.stag_p = nranks;
  }
  s.ctas = persistent_ctas(num_sms, reserved_sms, cluster_m, s.units());
  return s;
}

}  // namespace tw::gemm_impl
