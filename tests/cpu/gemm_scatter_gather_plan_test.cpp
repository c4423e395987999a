// The sequence-parallel ops' host logic (tilewire/ops/gemm_scatter_gather.hpp): the shard rule
// and every refusal of check_*_args, with their reasons. No GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <algorithm>
#include <vector>

#include "ops/gemm_allreduce/plan.hpp"
#include "ops/gemm_scatter_gather/fused.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace {

using tw::AllGatherGemmArgs;
using tw::DType;
using tw::GemmReduceScatterArgs;
using tw::TpConfig;
using tw::TpPath;

// Fake, 256-byte aligned and far apart: the checks only look at the addresses.
void* addr(uintptr_t gib) { return reinterpret_cast<void*>(gib << 30); }

TEST(TpShards, WholeTilesEveryRowOnce) {
  EXPECT_EQ(tw::shard_rows(8192, 8), 1024);
  EXPECT_EQ(tw::shard_rows(4096, 2), 2048);
  EXPECT_EQ(tw::shard_rows(1000, 8), 128);  // ceil(125) -> 128: ranks 0..6 hold 128, rank 7 104
  EXPECT_EQ(tw::shard_rows_of(1000, 8, 7), 1000 - 7 * 128);
  EXPECT_EQ(tw::shard_rows(100, 4), 128);   // one tile: rank 0 holds every row, the others none
  EXPECT_EQ(tw::shard_rows_of(100, 4, 0), 100);
  EXPECT_EQ(tw::shard_rows_of(100, 4, 1), 0);
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int M : {1, 127, 128, 129, 1000, 3000, 4096, 8191, 16384}) {
      const int S = tw::shard_rows(M, P);
      EXPECT_EQ(S % 128, 0);
      EXPECT_GE((long long)S * P, M) << "M " << M << " P " << P;
      EXPECT_LT((long long)(S - 128) * P, M) << "M " << M << " P " << P << ": a smaller S would do";
      int sum = 0;
      for (int r = 0; r < P; ++r) sum += tw::shard_rows_of(M, P, r);
      EXPECT_EQ(sum, M) << "M " << M << " P " << P;
      if (M % (128 * P) == 0) {
        EXPECT_EQ(S, M / P);
      }
    }
}

TEST(TpShards, WorkspaceHoldsThePaddedPartialOrGatheredA) {
  const size_t S = 1024;
  EXPECT_GE(tw::gemm_reducescatter_workspace_size(8192, 4096, DType::kBFloat16, 8), 8 * S * 4096 * 2 + S * 4096 * 2);
  // ... and the fused path's flags and staging: (P - 1) partial tiles of every owned tile.
  for (int P : {2, 4, 8})
    for (int M : {1000, 4096, 8192}) {
      const int Sm = tw::shard_rows(M, P);
      const auto lay = tw::gemm_allreduce_impl::make_scatter_layout(M, 4096, P, tw::gemm_impl::Raster::kAlongM, 2, Sm);
      EXPECT_GE(tw::gemm_reducescatter_workspace_size(M, 4096, DType::kBFloat16, P), lay.total);
      EXPECT_EQ(lay.owned_max, Sm / 128 * 16);
      // Every tile has one owner, the rank whose rows it holds, and a slot of its own there.
      std::vector<std::vector<int>> seen(P);
      for (int t = 0; t < lay.T; ++t) {
        const int o = lay.owner(t), tm = lay.tile_m_of(t);
        EXPECT_EQ(o, tm * 128 / Sm) << "tile " << t;
        EXPECT_LT(lay.owned_slot(t), lay.owned_max);
        seen[o].push_back(lay.owned_slot(t));
      }
      for (auto& v : seen) {
        std::sort(v.begin(), v.end());
        EXPECT_TRUE(std::adjacent_find(v.begin(), v.end()) == v.end()) << "two tiles share a slot";
      }
    }
  EXPECT_GE(tw::allgather_gemm_workspace_size(8192, 4096, DType::kFloat16, 8), 8 * S * 4096 * 2);
}

GemmReduceScatterArgs good_rs() {
  GemmReduceScatterArgs a;
  a.A = addr(1), a.B = addr(2), a.C_shard = addr(3), a.workspace = addr(4);
  a.M = 4096, a.N = 4096, a.K_local = 1024;
  return a;
}

AllGatherGemmArgs good_ag() {
  AllGatherGemmArgs a;
  a.A_shard = addr(1), a.B = addr(2), a.C = addr(3), a.workspace = addr(4);
  a.M = 4096, a.N_local = 2048, a.K = 4096;
  return a;
}

void refused(const tw::Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok) << "expected a refusal naming '" << needle << "'";
  EXPECT_NE(s.reason.find(needle), std::string::npos) << s.reason;
}

TEST(TpArgs, ReduceScatterRefusals) {
  EXPECT_TRUE(tw::check_gemm_reducescatter_args(good_rs(), 0, 4, {}).ok);
  GemmReduceScatterArgs a = good_rs();
  a.dtype = DType::kFloat32;
  refused(tw::check_gemm_reducescatter_args(a, 0, 4, {}), "dtype float");
  a = good_rs(), a.M = 0;
  refused(tw::check_gemm_reducescatter_args(a, 0, 4, {}), "M = 0");
  a = good_rs(), a.K_local = 1001;  // rows of A not 16-byte multiples
  EXPECT_FALSE(tw::check_gemm_reducescatter_args(a, 0, 4, {}).ok);
  a = good_rs(), a.workspace = nullptr;
  refused(tw::check_gemm_reducescatter_args(a, 0, 4, {}), "workspace is null");
  a = good_rs(), a.C_shard = nullptr;
  refused(tw::check_gemm_reducescatter_args(a, 1, 4, {}), "C_shard is null");
  a = good_rs(), a.M = 100, a.C_shard = nullptr;  // rank 1 holds no rows of M = 100 on 4 ranks
  EXPECT_TRUE(tw::check_gemm_reducescatter_args(a, 1, 4, {}).ok);
  a = good_rs(), a.C_shard = static_cast<char*>(a.workspace) + 4096;
  refused(tw::check_gemm_reducescatter_args(a, 0, 4, {}), "overlaps the workspace");
  a = good_rs();
  TpConfig fused;
  fused.path = TpPath::kFused;
  EXPECT_TRUE(tw::check_gemm_reducescatter_args(a, 0, 4, fused).ok);  // bf16 and fp16: the owner kernel
  a.dtype = DType::kFloat16;
  EXPECT_TRUE(tw::check_gemm_reducescatter_args(a, 0, 4, fused).ok);
  a = good_rs();
  refused(tw::check_gemm_reducescatter_args(a, 4, 4, {}), "rank 4 of 4");
}

TEST(TpArgs, AllGatherGemmRefusals) {
  EXPECT_TRUE(tw::check_allgather_gemm_args(good_ag(), 0, 4, {}).ok);
  AllGatherGemmArgs a = good_ag();
  a.b_layout = tw::BLayout::kKN;
  EXPECT_TRUE(tw::check_allgather_gemm_args(a, 3, 4, {}).ok);
  a = good_ag(), a.A_shard = nullptr;
  refused(tw::check_allgather_gemm_args(a, 0, 4, {}), "A_shard is null");
  a = good_ag(), a.A_gathered = static_cast<char*>(a.C) + 256;
  refused(tw::check_allgather_gemm_args(a, 0, 4, {}), "C overlaps A_gathered");
  a = good_ag(), a.A_gathered = static_cast<char*>(addr(5)) + 8;
  refused(tw::check_allgather_gemm_args(a, 0, 4, {}), "A_gathered is not 16-byte aligned");
  a = good_ag(), a.C = static_cast<char*>(a.workspace) + 512;
  EXPECT_FALSE(tw::check_allgather_gemm_args(a, 0, 4, {}).ok);
  a = good_ag(), a.dtype = DType::kFloat32;
  EXPECT_FALSE(tw::check_allgather_gemm_args(a, 0, 4, {}).ok);
  TpConfig fused;
  fused.path = TpPath::kFused;
  EXPECT_TRUE(tw::check_allgather_gemm_args(good_ag(), 0, 4, fused).ok);  // bf16 and fp16: the gated GEMM
  a = good_ag(), a.dtype = DType::kFloat16;
  EXPECT_TRUE(tw::check_allgather_gemm_args(a, 0, 4, fused).ok);
}

// The rotated reduce-scatter walk: rank r's work list is shard r + 1's tiles, ..., its own last,
// so every CTA's owner waits come after all its pushes (the deadlock argument of scatter_rotates).
TEST(TpFusedReduceScatter, RotatedWalkPutsTheOwnShardLast) {
  namespace gi = tw::gemm_impl;
  namespace ai = tw::gemm_allreduce_impl;
  EXPECT_FALSE(ai::scatter_rotates(1000, 4, tw::shard_rows(1000, 4)));  // ragged: the same order for all
  EXPECT_FALSE(ai::scatter_rotates(1024, 8, 128));                        // a unit would straddle two shards
  EXPECT_FALSE(ai::scatter_rotates(4096, 1, 4096));
  for (int P : {2, 3, 4, 8})
    for (int M : {1024, 4096, 8192, 3 * 2048})
      for (int N : {256, 4096, 7168}) {
        const int S = tw::shard_rows(M, P);
        if (!ai::scatter_rotates(M, P, S)) continue;
        for (int r = 0; r < P; ++r)
          for (int sms : {16, 132}) {
            const gi::TileSchedule s = gi::make_schedule(M, N, 128, 256, 2, gi::Raster::kAlongN, ai::scatter_swizzle(S),
                                                         (r + 1) % P, P, sms, 0);
            const int own = S / 256 * s.units_n;
            for (int w = 0; w < s.units(); ++w) {
              const int shard = s.tile_of_work(w, 0).m * 128 / S;
              ASSERT_EQ(shard == r, w >= s.units() - own) << "P " << P << " M " << M << " N " << N << " r " << r << " w " << w;
              // and the walk starts at shard r + 1
              if (w == 0) {
                ASSERT_EQ(shard, (r + 1) % P);
              }
            }
          }
      }
}

// The rotated walk's band (scatter_swizzle): as wide as 4 unit rows where the shard allows, never
// across two shards; every band's units are consecutive in the order and inside one shard.
TEST(TpFusedReduceScatter, WalkBandsStayInsideAShard) {
  namespace gi = tw::gemm_impl;
  namespace ai = tw::gemm_allreduce_impl;
  EXPECT_EQ(ai::scatter_swizzle(2048), 4) << "8192 rows on 4 ranks: 8 unit rows a shard";
  EXPECT_EQ(ai::scatter_swizzle(512), 2);
  EXPECT_EQ(ai::scatter_swizzle(256), 1);
  EXPECT_EQ(ai::scatter_swizzle(768), 1) << "3 unit rows";
  EXPECT_EQ(ai::scatter_swizzle(1000), 1) << "not whole units: no rotation, no band";
  EXPECT_EQ(ai::scatter_swizzle(512, 1), 4) << "the decode tile: 128-row units";
  for (int P : {2, 3, 4, 8})
    for (int M : {1024, 2048, 4096, 8192, 16384, 3 * 2048})
      for (int N : {256, 4096, 7168}) {
        const int S = tw::shard_rows(M, P);
        if (!ai::scatter_rotates(M, P, S)) continue;
        const int w = ai::scatter_swizzle(S);
        ASSERT_EQ(S / 256 % w, 0);
        const gi::TileSchedule s = gi::make_schedule(M, N, 128, 256, 2, gi::Raster::kAlongN, w, 1, P, 66, 0);
        ASSERT_EQ(s.swizzle, std::min(w, s.units_m));
        // Order index o's unit lies in shard o / (units / P): each shard one contiguous range.
        for (int o = 0; o < s.units(); ++o)
          ASSERT_EQ(s.unit_of_order(o).m * 256 / S, o / (s.units() / P)) << "P " << P << " M " << M << " N " << N << " o " << o;
      }
}

// The interleaved shards (scheduler.hpp, the relay reduce-scatter with TILEWIRE_RELAY_RS_WAVES):
// every rank's walk is a permutation of the units; each unit's chain is the rotation walk's (the
// same ranks in the same order down the ring, its shard's owner last: the layout's positions and
// owner hold unchanged), its hops exactly one chunk apart, at least `waves` waves of CTA groups;
// the chunk divides a shard and is below it, else the rotation walk.
TEST(TpFusedReduceScatter, InterleavedShardsKeepTheChainsAndShortenTheHops) {
  namespace gi = tw::gemm_impl;
  namespace ai = tw::gemm_allreduce_impl;
  EXPECT_EQ(gi::interleave_chunk(1024, 4, 16, 1), 16) << "70B attention output, M 8192, 33 SMs";
  EXPECT_EQ(gi::interleave_chunk(1024, 4, 16, 3), 64) << "the shortest divisor of 256 above 48";
  EXPECT_EQ(gi::interleave_chunk(128, 4, 16, 2), 0) << "M 1024: a chunk of two waves is the shard";
  EXPECT_EQ(gi::interleave_chunk(4 * 14 * 4, 4, 16, 1), 28) << "N 3584: 14 units a row, no divisor 16";
  EXPECT_EQ(gi::interleave_chunk(1000, 3, 16, 1), 0) << "units not P shards";
  EXPECT_EQ(gi::interleave_chunk(1024, 1, 16, 1), 0);
  EXPECT_EQ(gi::interleave_chunk(1024, 4, 16, 0), 0);
  int interleaved = 0;
  for (int P : {2, 3, 4, 8})
    for (int M : {1024, 2048, 4096, 8192, 3 * 2048})
      for (int N : {256, 3584, 8192})
        for (int sms : {33, 66, 132})
          for (int waves : {1, 2}) {
            const int S = tw::shard_rows(M, P);
            if (!ai::scatter_rotates(M, P, S)) continue;
            SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " N=" << N << " sms " << sms << " waves " << waves);
            const int z = ai::scatter_swizzle(S);
            const gi::TileSchedule probe = gi::make_schedule(M, N, 128, 256, 2, gi::Raster::kAlongN, z, 1, P, sms, 0);
            const int U = probe.units(), d = gi::interleave_chunk(U, P, probe.ctas, waves);
            std::vector<gi::TileSchedule> s, rot;
            for (int r = 0; r < P; ++r) {
              s.push_back(gi::make_schedule(M, N, 128, 256, 2, gi::Raster::kAlongN, z, (r + 1) % P, P, sms, 0, 0, d));
              rot.push_back(gi::make_schedule(M, N, 128, 256, 2, gi::Raster::kAlongN, z, (r + 1) % P, P, sms, 0));
            }
            ASSERT_EQ(s[0].ilv_d, d);
            if (d == 0) continue;
            ++interleaved;
            ASSERT_EQ(U / P % d, 0);
            ASSERT_LT(d, U / P);
            ASSERT_GE(d, waves * s[0].ctas);
            const auto lay = ai::make_relay_layout(M, N, gi::Raster::kAlongN, U, P, S, 0, d);
            EXPECT_EQ(lay.relay_gap(U), d);
            for (int r = 0; r < P; ++r) {
              std::vector<int> seen(U, 0);
              for (int w = 0; w < U; ++w) {
                const int o = s[r].order_of_work(w);
                ASSERT_TRUE(o >= 0 && o < U && seen[o]++ == 0) << "rank " << r << " work " << w;
                ASSERT_EQ(s[r].work_of_order(o), w);
              }
            }
            for (int o = 0; o < U; ++o) {
              const int shard = s[0].unit_of_order(o).m * 256 / S;
              ASSERT_EQ(lay.relay_owner(o), shard);
              std::vector<int> at(P, -1);
              for (int r = 0; r < P; ++r) {
                const int p = lay.relay_position(o, r);
                ASSERT_TRUE(p >= 0 && p < P && at[p] == -1) << "unit " << o;
                at[p] = r;
              }
              ASSERT_EQ(at[P - 1], shard);
              for (int p = 1; p < P; ++p) {
                ASSERT_EQ(at[p], (at[p - 1] + P - 1) % P) << "the chain goes down the ring";
                ASSERT_EQ(s[at[p]].work_of_order(o), s[at[p - 1]].work_of_order(o) + d) << "unit " << o;
                // the rotation walk's chain: the same order, a shard apart
                ASSERT_GT(rot[at[p]].work_of_order(o), rot[at[p - 1]].work_of_order(o)) << "unit " << o;
              }
            }
          }
  EXPECT_GT(interleaved, 40);
}

// At M <= 256 the fused reduce-scatter runs the decode tile (128 x 64, no cluster): its layout
// owns each tile by the shard of its rows, every owned tile has its own slot, the workspace holds
// it, and the walk rotates for every whole-shard M = P S (a shard is whole units of one tile row),
// with the own shard last as on the 128 x 256 tile.
TEST(TpFusedReduceScatter, DecodeTileAtSmallM) {
  namespace gi = tw::gemm_impl;
  namespace ai = tw::gemm_allreduce_impl;
  for (int M : {1, 100, 128, 200, 256, 257, 1000}) EXPECT_EQ(ai::scatter_tile_is_decode(M), M <= 256) << M;
  for (int P : {1, 2, 3, 4, 8})
    for (int M : {1, 100, 200, 256})
      for (int N : {64, 1032, 5144}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " N=" << N);
        const int S = tw::shard_rows(M, P);
        const auto lay = ai::make_scatter_layout(M, N, P, gi::Raster::kAlongN, 2, S, true);
        EXPECT_EQ(lay.blk_n, 64);
        EXPECT_EQ(lay.cluster_m, 1);
        EXPECT_EQ(lay.tiles_n, (N + 63) / 64);
        EXPECT_EQ(lay.slot_bytes, size_t(128) * 64 * 2);
        EXPECT_GE(tw::gemm_reducescatter_workspace_size(M, N, DType::kBFloat16, P), lay.total);
        std::vector<std::vector<int>> seen(P);
        for (int t = 0; t < lay.T; ++t) {
          const int o = lay.owner(t);
          ASSERT_EQ(o, lay.tile_m_of(t) * 128 / S) << "tile " << t;
          ASSERT_LT(lay.owned_slot(t), lay.owned_max);
          seen[o].push_back(lay.owned_slot(t));
        }
        for (auto& v : seen) {
          std::sort(v.begin(), v.end());
          EXPECT_TRUE(std::adjacent_find(v.begin(), v.end()) == v.end()) << "two tiles share a slot";
        }
        const bool rot = ai::scatter_rotates(M, P, S, 1);
        EXPECT_EQ(rot, P > 1 && M == P * S);
        EXPECT_FALSE(ai::scatter_rotates(M, P, S, 2) && S % 256 != 0);
        if (!rot) continue;
        for (int r = 0; r < P; ++r) {
          const gi::TileSchedule s =
              gi::make_schedule(M, N, 128, 64, 1, gi::Raster::kAlongN, ai::scatter_swizzle(S, 1), (r + 1) % P, P, 33, 0);
          const int own = S / 128 * s.units_n;
          for (int w = 0; w < s.units(); ++w) {
            const int shard = s.tile_of_work(w, 0).m * 128 / S;
            ASSERT_EQ(shard == r, w >= s.units() - own) << "r " << r << " w " << w;
            if (w == 0) {
              ASSERT_EQ(shard, (r + 1) % P);
            }
          }
        }
      }
  // 256 rows on 2 ranks: one tile row per shard, rotated on the decode tile, not in 2x1 clusters.
  EXPECT_TRUE(ai::scatter_rotates(256, 2, 128, 1));
  EXPECT_FALSE(ai::scatter_rotates(256, 2, 128, 2));
}

// The fused all-gather's flags sit after the gathered A, inside the sequential path's workspace,
// one per chunk of every shard; the chunks are whole GEMM tile rows.
TEST(TpFusedAllGather, FlagsFitTheWorkspace) {
  for (int P : {1, 2, 3, 8, 32})
    for (int M : {1, 100, 1000, 4096, 8191, 65536})
      for (int K : {8, 64, 4096})
        for (DType d : {DType::kBFloat16, DType::kFloat16}) {
          const auto l = tw::tp_impl::ag_fused_layout(M, K, d, P);
          const size_t S = tw::shard_rows(M, P);
          EXPECT_GE(l.chunks, 1);
          EXPECT_LE(l.chunks, tw::tp_impl::kMaxChunks);
          EXPECT_EQ(S % ((size_t)l.chunks * 128), 0u) << P << " " << M << " " << K;
          EXPECT_GE(l.flags_off, (size_t)P * S * K * 2) << P << " " << M << " " << K;
          EXPECT_EQ(l.flags_off % 256, 0u);
          EXPECT_GE(l.total, l.flags_off + 8 * (size_t)P * l.chunks);
          EXPECT_LE(l.total, tw::allgather_gemm_workspace_size(M, K, d, P)) << P << " " << M << " " << K;
        }
}

// Chunks of at least 1 MiB where the shard has them, at most kMaxChunks, dividing the shard's
// tile rows: the GEMM's first tile waits for one chunk, not the shard.
TEST(TpFusedAllGather, ChunksFromTheShardSize) {
  using tw::tp_impl::ag_fused_layout;
  EXPECT_EQ(ag_fused_layout(256, 64, DType::kBFloat16, 2).chunks, 1);       // S 128: one tile row
  EXPECT_EQ(ag_fused_layout(2048, 4096, DType::kBFloat16, 2).chunks, 8);    // S 1024, 8 MiB: 8 x 1 MiB
  EXPECT_EQ(ag_fused_layout(8192, 7168, DType::kBFloat16, 2).chunks, 32);   // 56 MiB: 32 x 1.75 MiB
  EXPECT_EQ(ag_fused_layout(65536, 8192, DType::kBFloat16, 2).chunks, 32);  // 512 MiB: capped at 32
  EXPECT_EQ(ag_fused_layout(3 * 1024, 8192, DType::kFloat16, 2).chunks, 12);  // 12 tile rows of 2 MiB
  EXPECT_EQ(ag_fused_layout(1024, 512, DType::kBFloat16, 1).chunks, 1);      // 1 MiB in all: one chunk
}

// One push CTA per MiB of a shard, 1 to 16, the same on every rank (from S); at most 2 on a
// virtual team; at most the communicator's barrier count.
TEST(TpFusedAllGather, PushCtasFromTheShardSize) {
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(128, 64, DType::kBFloat16, false, 64), 1);    // 16 KiB
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(1024, 4096, DType::kBFloat16, false, 64), 8);  // 8 MiB
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(4096, 8192, DType::kFloat16, false, 64), 16);  // 64 MiB: capped
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(4096, 8192, DType::kFloat16, true, 64), 2);
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(128, 64, DType::kBFloat16, true, 64), 1);
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(4096, 8192, DType::kFloat16, false, 4), 4);    // the barriers there are
  EXPECT_EQ(tw::tp_impl::ag_push_ctas(4096, 8192, DType::kFloat16, false, 0), 1);
}

}  // namespace
