// The GEMM tile order (src/ops/gemm/scheduler.hpp), the same constexpr code the kernel runs:
// every tile exactly once for many shapes/orders/rank counts/SM counts, the inverse mappings,
// the raster/swizzle pictures of the header, the rank rotation.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ops/gemm/scheduler.hpp"

namespace {
using tw::gemm_impl::make_schedule;
using tw::gemm_impl::Raster;
using tw::gemm_impl::TileCoord;
using tw::gemm_impl::TileSchedule;

std::string describe(int M, int N, int bm, int bn, int cm, Raster r, int sw, int rank, int nr, int sms, int res) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " tile=" + std::to_string(bm) + "x" +
         std::to_string(bn) + " cluster_m=" + std::to_string(cm) + " raster=" +
         (r == Raster::kAlongM ? "M" : "N") + " swizzle=" + std::to_string(sw) + " rank=" + std::to_string(rank) +
         "/" + std::to_string(nr) + " sms=" + std::to_string(sms) + " reserved=" + std::to_string(res);
}

// Walk the schedule as the kernel does (every cluster group c, every CTA of the cluster, work
// indices c, c + ctas, ...) and count how often each real tile is computed.
void expect_each_tile_once(const TileSchedule& s, int M, int N, int bm, int bn, const std::string& what) {
  const int tiles_m = (M + bm - 1) / bm, tiles_n = (N + bn - 1) / bn;
  ASSERT_EQ(s.tiles_m, tiles_m) << what;
  ASSERT_EQ(s.units_n, tiles_n) << what;
  std::vector<int> seen(size_t(tiles_m) * tiles_n, 0);
  int units_walked = 0;
  for (int c = 0; c < s.ctas; ++c) {
    int i = 0;
    for (int w = s.work_of_cta(c, 0); w >= 0; w = s.work_of_cta(c, ++i)) {
      ++units_walked;
      for (int x = 0; x < s.cluster_m; ++x) {
        const TileCoord t = s.tile_of_work(w, x);
        ASSERT_GE(t.m, 0) << what;
        ASSERT_LT(t.n, tiles_n) << what;
        ASSERT_LT(t.m, s.units_m * s.cluster_m) << what;
        if (t.m >= tiles_m) continue;  // the padding CTA of the last cluster: no tile
        ++seen[size_t(t.m) * tiles_n + t.n];
        ASSERT_EQ(s.work_of_tile(t), w) << what << " inverse at tile (" << t.m << "," << t.n << ")";
      }
    }
    ASSERT_EQ(i, s.units_of_cta(c)) << what << " cta " << c;
  }
  ASSERT_EQ(units_walked, s.units()) << what;
  for (int tm = 0; tm < tiles_m; ++tm)
    for (int tn = 0; tn < tiles_n; ++tn)
      ASSERT_EQ(seen[size_t(tm) * tiles_n + tn], 1) << what << " tile (" << tm << "," << tn << ")";
}

TEST(GemmScheduler, EveryTileExactlyOnce) {
  const int Ms[] = {1, 7, 128, 129, 256, 1000, 3000, 8192};
  const int Ns[] = {8, 256, 300, 5144, 8192};
  int combos = 0;
  for (int M : Ms)
    for (int N : Ns)
      for (int cm : {1, 2})
        for (Raster r : {Raster::kAlongM, Raster::kAlongN})
          for (int sw : {1, 2, 3, 4, 8})
            for (int nr : {1, 2, 3, 8})
              for (int sms : {2, 7, 132})
                for (int res : {0, 1, 20}) {
                  if (sms - res < cm) continue;
                  const int rank = nr - 1;
                  const TileSchedule s = make_schedule(M, N, 128, 256, cm, r, sw, rank, nr, sms, res);
                  expect_each_tile_once(s, M, N, 128, 256, describe(M, N, 128, 256, cm, r, sw, rank, nr, sms, res));
                  if (HasFatalFailure()) return;
                  ++combos;
                }
  EXPECT_GT(combos, 10000);
  // Other tile shapes, every rank.
  for (int bm : {64, 128})
    for (int bn : {64, 128, 256})
      for (int rank = 0; rank < 4; ++rank) {
        const TileSchedule s = make_schedule(777, 1234, bm, bn, 2, Raster::kAlongN, 2, rank, 4, 132, 4);
        expect_each_tile_once(s, 777, 1234, bm, bn, describe(777, 1234, bm, bn, 2, Raster::kAlongN, 2, rank, 4, 132, 4));
        if (HasFatalFailure()) return;
      }
}

TEST(GemmScheduler, OrderInverse) {
  for (int um : {1, 2, 5, 12})
    for (int un : {1, 3, 8, 13})
      for (Raster r : {Raster::kAlongM, Raster::kAlongN})
        for (int sw : {1, 2, 4, 5}) {
          TileSchedule s{};
          s.units_m = um, s.units_n = un, s.tiles_m = um, s.raster = r;
          s.swizzle = sw;
          std::set<std::pair<int, int>> units;
          for (int o = 0; o < s.units(); ++o) {
            const TileCoord u = s.unit_of_order(o);
            ASSERT_TRUE(u.m >= 0 && u.m < um && u.n >= 0 && u.n < un) << "o=" << o;
            ASSERT_EQ(s.order_of_unit(u), o) << "um=" << um << " un=" << un << " sw=" << sw;
            units.insert({u.m, u.n});
          }
          EXPECT_EQ((int)units.size(), s.units());
        }
}

// The pictures in scheduler.hpp: units_m = 3, units_n = 4.
TEST(GemmScheduler, RasterAndSwizzleAsDocumented) {
  TileSchedule s{};
  s.units_m = 3, s.units_n = 4, s.tiles_m = 3;
  auto order = [&](int m, int n) { return s.order_of_unit(TileCoord{m, n}); };
  s.raster = Raster::kAlongM, s.swizzle = 1;
  const int along_m[3][4] = {{0, 3, 6, 9}, {1, 4, 7, 10}, {2, 5, 8, 11}};
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 4; ++n) EXPECT_EQ(order(m, n), along_m[m][n]) << m << "," << n;
  s.swizzle = 2;
  const int sw2[3][4] = {{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}};
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 4; ++n) EXPECT_EQ(order(m, n), sw2[m][n]) << m << "," << n;
  s.swizzle = 3;  // last band one column wide
  const int sw3[3][4] = {{0, 1, 2, 9}, {3, 4, 5, 10}, {6, 7, 8, 11}};
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 4; ++n) EXPECT_EQ(order(m, n), sw3[m][n]) << m << "," << n;
  s.raster = Raster::kAlongN, s.swizzle = 1;  // the transpose: walk N first
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 4; ++n) EXPECT_EQ(order(m, n), m * 4 + n) << m << "," << n;
}

TEST(GemmScheduler, ClusterCtasShareN) {
  const TileSchedule s = make_schedule(1000, 5144, 128, 256, 2, Raster::kAlongM, 1, 0, 1, 132, 0);
  for (int w = 0; w < s.units(); ++w) {
    const TileCoord a = s.tile_of_work(w, 0), b = s.tile_of_work(w, 1);
    EXPECT_EQ(a.n, b.n) << "the two CTAs of a cluster multicast the same B tile";
    EXPECT_EQ(b.m, a.m + 1);
    EXPECT_EQ(a.m % 2, 0);
  }
}

TEST(GemmScheduler, RankRotation) {
  using tw::gemm_impl::rank_rotation;
  EXPECT_EQ(rank_rotation(100, 0, 1), 0);
  EXPECT_EQ(rank_rotation(100, 3, 4), 75);
  EXPECT_EQ(rank_rotation(10, 2, 3), 6);   // floor(10/3) = 3 per rank
  EXPECT_EQ(rank_rotation(3, 7, 8), 0);    // fewer units than ranks: floor = 0, no rotation
  EXPECT_EQ(rank_rotation(0, 1, 2), 0);

  // At every work index w the P ranks hold distinct units floor(units/P) apart (units >= P), and
  // unit o is reached by rank r at work index (o - r*floor(units/P)) mod units.
  for (int units_n : {1, 3, 16, 33})
    for (int nr : {2, 3, 4, 8}) {
      const int M = 128 * 2 * 5, N = 256 * units_n;  // 5 cluster units along M
      std::vector<TileSchedule> rs;
      for (int r = 0; r < nr; ++r) rs.push_back(make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 2, r, nr, 132, 0));
      const int units = rs[0].units();
      const int step = units / nr;
      for (int r = 0; r < nr; ++r) {
        ASSERT_EQ(rs[r].units(), units);
        EXPECT_EQ(rs[r].rotation, step * r);
        EXPECT_EQ(rs[r].ctas, rs[0].ctas) << "every rank runs the same persistent grid";
      }
      for (int w = 0; w < units; ++w) {
        std::set<int> held;
        for (int r = 0; r < nr; ++r) {
          const int o = rs[r].order_of_work(w);
          EXPECT_EQ(o, (w + r * step) % units);
          EXPECT_EQ(rs[r].work_of_order(o), w);
          held.insert(o);
        }
        if (units >= nr) {
          EXPECT_EQ((int)held.size(), nr) << "units=" << units << " w=" << w;
        }
      }
    }
}

TEST(GemmScheduler, PersistentCtas) {
  using tw::gemm_impl::persistent_ctas;
  EXPECT_EQ(persistent_ctas(132, 0, 2, 1000), 66);
  EXPECT_EQ(persistent_ctas(132, 16, 2, 1000), 58);
  EXPECT_EQ(persistent_ctas(132, 17, 2, 1000), 57);  // rounded down to whole clusters
  EXPECT_EQ(persistent_ctas(132, 0, 2, 10), 10);     // never more groups than units
  EXPECT_EQ(persistent_ctas(132, 131, 2, 10), 1);    // at least one
  const TileSchedule s = make_schedule(8192, 8192, 128, 256, 2, Raster::kAlongM, 1, 0, 1, 132, 0);
  EXPECT_EQ(s.units(), 32 * 32);
  int total = 0;
  for (int c = 0; c < s.ctas; ++c) {
    total += s.units_of_cta(c);
    EXPECT_LE(s.units_of_cta(c) - s.units_of_cta(s.ctas - 1), 1) << "balanced within one unit";
  }
  EXPECT_EQ(total, s.units());
}

TEST(GemmScheduler, IsConstexpr) {
  constexpr TileSchedule s = make_schedule(3000, 5144, 128, 256, 2, Raster::kAlongN, 4, 1, 2, 132, 8);
  static_assert(s.units_m == 12 && s.units_n == 21 && s.tiles_m == 24);
  static_assert(s.work_of_tile(s.tile_of_work(17, 1)) == 17);
  static_assert(s.rotation == (12 * 21) / 2);
  SUCCEED();
}

}  // namespace
