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

struct TileSchedule {
  int units_m = 0;      // cluster units along M = ceil(tiles_m / cluster_m)
  int units_n = 0;      // units along N = tiles_n
  int cluster_m = 1;    // CTAs per cluster along M (1 or 2)
  int tiles_m = 0;      // real tiles along M (tm >= tiles_m are padding CTAs of the last cluster)
  int swizzle = 1;      // band width in units (>= 1)
  Raster raster = Raster::kAlongM;
  int rotation = 0;     // order index of work index 0 (rank rotation), 0 <= rotation < units
  int ctas = 1;         // persistent cluster groups (>= 1)

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
    const int o = w + rotation;
    return o >= units() ? o - units() : o;
  }
  TW_HD constexpr int work_of_order(int o) const {
    const int w = o - rotation;
    return w < 0 ? w + units() : w;
  }

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

// Persistent cluster groups for `num_sms` SMs of which `reserved_sms` are left to communication:
// floor((num_sms - reserved_sms) / cluster_m), at least 1, at most `units`.
TW_HD constexpr int persistent_ctas(int num_sms, int reserved_sms, int cluster_m, int units) {
  int c = (num_sms - reserved_sms) / cluster_m;
  if (c > units) c = units;
  return c < 1 ? 1 : c;
}

// The schedule for an (M, N) output with (blk_m, blk_n) tiles. `swizzle` < 1 is treated as 1 and
// capped at the banded extent; rank/nranks give the rotation.
TW_HD constexpr TileSchedule make_schedule(int M, int N, int blk_m, int blk_n, int cluster_m, Raster raster,
                                           int swizzle, int rank, int nranks, int num_sms, int reserved_sms) {
  TileSchedule s{};
  s.tiles_m = ceil_div(M, blk_m);
  s.cluster_m = cluster_m;
  s.units_m = ceil_div(s.tiles_m, cluster_m);
  s.units_n = ceil_div(N, blk_n);
  s.raster = raster;
  const int minor = raster == Raster::kAlongM ? s.units_n : s.units_m;
  s.swizzle = swizzle < 1 ? 1 : (swizzle > minor ? (minor < 1 ? 1 : minor) : swizzle);
  s.rotation = rank_rotation(s.units(), rank, nranks);
  s.ctas = persistent_ctas(num_sms, reserved_sms, cluster_m, s.units());
  return s;
}

}  // namespace tw::gemm_impl
