// Fused GEMM + all-reduce planning without a GPU (src/ops/gemm_allreduce/plan.hpp): tile
// ownership (every tile owned once, spread evenly over the ranks and over each CTA group's
// work), the workspace layout (sections disjoint, inside the total, sizes), the CTAs that run
// the final wait, and argument rejections with their reasons.
#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "cpu_util.hpp"
#include "ops/fused_gemm/cost_model.hpp"
#include "ops/gemm/scheduler.hpp"
#include "ops/gemm_allreduce/plan.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw::GemmAllReduceArgs;
using tw::GemmAllReduceConfig;
using tw::gemm_allreduce_impl::Layout;
using tw::gemm_allreduce_impl::make_layout;
using tw::gemm_impl::Raster;
using tw_test::contains;

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kA = 0x7f0000000000, kB = 0x7f1000000000, kC = 0x7f2000000000, kW = 0x7f3000000000;

GemmAllReduceArgs args(int M, int N, int K, DType t = DType::kBFloat16) {
  return GemmAllReduceArgs{at(kA), at(kB), at(kC), M, N, K, t, BLayout::kNK, at(kW)};
}

// Every rank's walk visits each of the U order indices once, and work_of_order inverts it.
void expect_walks_are_permutations(const std::vector<tw::gemm_impl::TileSchedule>& s, int U) {
  for (size_t q = 0; q < s.size(); ++q) {
    std::vector<int> seen(U, 0);
    for (int w = 0; w < U; ++w) {
      const int o = s[q].order_of_work(w);
      ASSERT_TRUE(o >= 0 && o < U && seen[o]++ == 0) << "rank " << q << " work " << w;
      ASSERT_EQ(s[q].work_of_order(o), w);
    }
  }
}

// Unit o's chain: the rank at each position 0 .. P - 1 of the layout (-1 where no rank is).
std::vector<int> chain_of(const Layout& l, int o) {
  std::vector<int> at(l.P, -1);
  for (int q = 0; q < l.P; ++q) {
    const int p = l.relay_position(o, q);
    EXPECT_TRUE(p >= 0 && p < l.P && at[p] == -1) << "unit " << o << " rank " << q;
    if (p >= 0 && p < l.P) at[p] = q;
  }
  return at;
}

// M above the decode tile's range (plan.hpp kDecodeMaxM): the algorithm rules of large GEMMs.
constexpr int kLargeM = 4096;

TEST(GemmAllReducePlan, EveryTileOwnedOnceAndEvenly) {
  for (int P : {1, 2, 3, 4, 8})
    for (Raster r : {Raster::kAlongM, Raster::kAlongN})
      for (int M : {1, 7, 128, 3000, 8192, 16384})
        for (int N : {8, 5144, 8192}) {
          const Layout l = make_layout(M, N, P, r, 2);
          SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " N=" << N << " raster " << int(r));
          std::vector<int> seen(l.T, 0), per_rank(P, 0);
          for (int tm = 0; tm < l.tiles_m; ++tm)
            for (int tn = 0; tn < l.tiles_n; ++tn) {
              const int t = l.tile_index(tm, tn);
              ASSERT_GE(t, 0);
              ASSERT_LT(t, l.T);
              ++seen[t];
              const int o = l.owner(t);
              ASSERT_GE(o, 0);
              ASSERT_LT(o, P);
              ++per_rank[o];
              ASSERT_LT(l.owned_slot(t), l.owned_max);
            }
          for (int t = 0; t < l.T; ++t) ASSERT_EQ(seen[t], 1) << "tile number " << t;
          const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
          EXPECT_LE(*hi - *lo, 1) << "ownership is uneven";
          EXPECT_EQ(*hi, l.owned_max);
        }
}

// The owner kernel's decode tile (plan.hpp owner_tile_is_decode): 128 x 64 tiles without clusters
// at M <= 256, both B layouts, dtypes and partial precisions; the 128 x 256 tile otherwise (M >
// 256, an explicit relay or exchange algorithm). The workspace is that layout's.
TEST(GemmAllReducePlan, OwnerDecodeTile) {
  using tw::GemmAllReduceAlgo;
  using tw::PartialPrecision;
  using tw::gemm_allreduce_impl::kDecodeBlkN;
  using tw::gemm_allreduce_impl::layout_for;
  for (DType t : {DType::kBFloat16, DType::kFloat16})
    for (PartialPrecision pp : {PartialPrecision::kBFloat16, PartialPrecision::kFloat32})
      for (int P : {1, 2, 4, 8})
        for (int M : {1, 100, 128, 256, 257, 3000})
          for (int N : {8, 5144, 8192}) {
            SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " N=" << N << " dtype " << int(t)
                                            << " partials " << int(pp));
            GemmAllReduceConfig c;
            c.algo = GemmAllReduceAlgo::kOwner;
            c.partials = pp;
            const GemmAllReduceArgs a = args(M, N, 520, t);
            const bool decode = M <= 256;
            EXPECT_EQ(tw::gemm_allreduce_impl::owner_tile_is_decode(a, GemmAllReduceAlgo::kOwner), decode);
            const Layout l = layout_for(a, P, c);
            const int pb = pp == PartialPrecision::kFloat32 ? 4 : 2;
            EXPECT_EQ(l.blk_n, decode ? kDecodeBlkN : 256);
            EXPECT_EQ(l.cluster_m, decode ? 1 : 2);
            EXPECT_EQ(l.tiles_n, (N + l.blk_n - 1) / l.blk_n);
            EXPECT_EQ(l.tiles_m, (M + 127) / 128);
            EXPECT_EQ(l.slot_bytes, size_t(128) * l.blk_n * pb);
            EXPECT_EQ(tw::workspace_size(a, P, c), make_layout(M, N, P, l.raster, pb, decode).total);
            GemmAllReduceArgs kn = a;
            kn.b_layout = BLayout::kKN;
            EXPECT_EQ(tw::gemm_allreduce_impl::owner_tile_is_decode(kn, GemmAllReduceAlgo::kOwner), decode);
            EXPECT_EQ(layout_for(kn, P, c).blk_n, l.blk_n);
            EXPECT_EQ(tw::workspace_size(kn, P, c), tw::workspace_size(a, P, c));
          }
  // The other algorithms keep the 128 x 256 tile at any M.
  GemmAllReduceConfig relay, exchange;
  relay.algo = GemmAllReduceAlgo::kRelay;
  exchange.algo = GemmAllReduceAlgo::kExchange;
  EXPECT_EQ(layout_for(args(128, 8192, 520), 2, relay).blk_n, 256);
  EXPECT_EQ(layout_for(args(128, 8192, 520), 4, exchange).blk_n, 256);
  EXPECT_FALSE(tw::gemm_allreduce_impl::owner_tile_is_decode(args(128, 8192, 520), GemmAllReduceAlgo::kRelay));
  // kAuto at M <= 256 is the owner algorithm on the decode tile at every rank count, both B
  // layouts and dtypes: M = 128, N = 8192 in 128 tiles (one wave on 132 SMs) where 128 x 256 makes
  // 32. Above it, 2 ranks run the relay on 128 x 256 tiles.
  using tw::gemm_allreduce_impl::resolve_algo;
  for (int P : {1, 2, 3, 4, 8})
    for (BLayout b : {BLayout::kNK, BLayout::kKN})
      for (DType t : {DType::kBFloat16, DType::kFloat16}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " B " << int(b) << " dtype " << int(t));
        GemmAllReduceArgs a = args(128, 8192, 520, t);
        a.b_layout = b;
        for (int M : {1, 128, 256}) EXPECT_EQ(resolve_algo(P, GemmAllReduceConfig{}, b, t, M), GemmAllReduceAlgo::kOwner);
        EXPECT_EQ(layout_for(a, P, GemmAllReduceConfig{}).T, 128);
        EXPECT_TRUE(tw::gemm_allreduce_impl::check_args(a, P, GemmAllReduceConfig{}).ok);
      }
  EXPECT_EQ(resolve_algo(2, GemmAllReduceConfig{}, BLayout::kNK, DType::kBFloat16, 257), GemmAllReduceAlgo::kRelay);
  EXPECT_EQ(layout_for(args(257, 8192, 520), 2, GemmAllReduceConfig{}).T, 3 * 32) << "kAuto on 2 ranks above 256: relay";
  EXPECT_EQ(resolve_algo(1, GemmAllReduceConfig{}, BLayout::kNK, DType::kBFloat16, 257), GemmAllReduceAlgo::kExchange);
}

// Every persistent cluster group owns about 1/P of the tiles it computes, on the grids the
// launcher makes (all SMs of an H200, or a virtual rank's share of them; the default swizzle;
// the raster kAuto resolves). With the owner t % P, 8192 x 8192 at P = 4 on a virtual rank's
// 16 groups gave each group all or none of its tiles: the owners of a quarter of the groups
// reduced the whole C, and the fused call took 150-200x the GEMM alone.
TEST(GemmAllReducePlan, OwnerLoadIsBalancedPerGroup) {
  using tw::gemm_impl::make_schedule;
  using tw::gemm_impl::TileSchedule;
  for (int P : {2, 3, 4, 8})
    for (int sms : {132, 132 / P})
      for (auto [M, N] : {std::pair{2048, 8192}, {4096, 8192}, {8192, 8192}, {16384, 8192}, {4096, 4096}, {8192, 28672}})
        for (Raster r : {Raster::kAlongM, Raster::kAlongN}) {
          SCOPED_TRACE(testing::Message() << "P=" << P << " SMs=" << sms << " " << M << "x" << N << " raster " << int(r));
          const Layout l = make_layout(M, N, P, r, 2);
          const TileSchedule s = make_schedule(M, N, 128, 256, 2, r, 4, 0, 1, sms, sms % 2);
          for (int c = 0; c < s.ctas; ++c) {
            std::vector<int> owned(P, 0);
            int tiles = 0;
            for (int k = 0; k < s.units_of_cta(c); ++k)
              for (int x = 0; x < s.cluster_m; ++x) {
                const auto t = s.tile_of_work(s.work_of_cta(c, k), x);
                if (t.m >= s.tiles_m) continue;
                ++owned[l.owner(l.tile_index(t.m, t.n))], ++tiles;
              }
            if (tiles < 8 * P) continue;  // too few tiles for a spread to mean anything
            const int most = *std::max_element(owned.begin(), owned.end());
            EXPECT_LE(most, 2 * tiles / P) << "group " << c << " owns " << most << " of its " << tiles << " tiles";
          }
        }
}

TEST(GemmAllReducePlan, WorkspaceSectionsAreDisjointAndSized) {
  for (int P : {1, 2, 4, 8})
    for (int pb : {2, 4})
      for (int M : {1, 3000, 8192}) {
        const Layout l = make_layout(M, 5144, P, Raster::kAlongM, pb);
        SCOPED_TRACE(testing::Message() << "P=" << P << " partial bytes " << pb << " M=" << M);
        EXPECT_EQ(l.slot_bytes, size_t(128) * 256 * pb);
        EXPECT_GE(l.arrive_off, tw::gemm_allreduce_impl::kHeaderBytes);
        EXPECT_GE(l.done_off, l.arrive_off + 8 * size_t(l.owned_max) * P);
        EXPECT_GE(l.staging_off, l.done_off + 8 * size_t(l.T));
        EXPECT_EQ(l.staging_off % 4096, 0u);
        EXPECT_EQ(l.total, l.staging_off + size_t(l.owned_max) * (P - 1) * l.slot_bytes);
        // Every (owned tile, source) staging slot and flag is distinct within its owner's
        // workspace and inside its section.
        std::set<std::pair<int, size_t>> slots, flags;
        for (int t = 0; t < l.T; ++t) {
          EXPECT_GE(l.done_flag(t), l.done_off);
          EXPECT_LT(l.done_flag(t) + 8, l.staging_off + 1);
          for (int q = 0; q < P; ++q) {
            if (q == l.owner(t)) continue;
            const size_t s = l.staging(t, q);
            EXPECT_GE(s, l.staging_off);
            EXPECT_LE(s + l.slot_bytes, l.total);
            EXPECT_EQ(s % 16, 0u);
            EXPECT_TRUE(slots.insert({l.owner(t), s}).second) << "slot reused: tile " << t << " source " << q;
            const size_t f = l.arrive_flag(t, q);
            EXPECT_GE(f, l.arrive_off);
            EXPECT_LE(f + 8, l.done_off);
            EXPECT_TRUE(flags.insert({l.owner(t), f}).second) << "flag reused: tile " << t << " source " << q;
          }
        }
      }
}

TEST(GemmAllReducePlan, WorkspaceSize) {
  // 8192 x 8192: 64 x 32 = 2048 tiles of 64 KiB (bf16). Owner algorithm on 2 ranks: 1024 owned,
  // one slot each. Exchange (the default on 2 ranks): a slot per tile and rank, 2048 x 2.
  const GemmAllReduceArgs a = args(8192, 8192, 4096);
  GemmAllReduceConfig owner;
  owner.algo = tw::GemmAllReduceAlgo::kOwner;
  const size_t bf16 = tw::workspace_size(a, 2, owner);
  EXPECT_GE(bf16, size_t(1024) * 65536);
  EXPECT_LE(bf16, size_t(1024) * 65536 + (size_t(1) << 20));
  GemmAllReduceConfig f32 = owner;
  f32.partials = tw::PartialPrecision::kFloat32;
  EXPECT_GE(tw::workspace_size(a, 2, f32), size_t(1024) * 131072);
  // Owner, one rank: flags only. Four ranks: 3 slots per owned tile, 512 owned.
  EXPECT_LT(tw::workspace_size(a, 1, owner), size_t(1) << 20);
  EXPECT_GE(tw::workspace_size(a, 4, owner), size_t(512) * 3 * 65536);
  // Exchange: 2048 tiles x 2 ranks x 64 KiB, plus flags. Relay (auto for 2 or more ranks and
  // bf16): a slot per tile, whatever P. The owner algorithm for fp32 partials.
  GemmAllReduceConfig exch;
  exch.algo = tw::GemmAllReduceAlgo::kExchange;
  const size_t x2 = tw::workspace_size(a, 2, exch);
  EXPECT_GE(x2, size_t(2048) * 2 * 65536);
  EXPECT_LE(x2, size_t(2048) * 2 * 65536 + (size_t(1) << 20));
  const size_t r2 = tw::workspace_size(a, 2);
  const size_t relay_slot = tw::gemm_allreduce_impl::relay_slots_padded() ? 128 * 528 : 65536;  // measurement build
  EXPECT_GE(r2, size_t(2048) * relay_slot);
  EXPECT_LE(r2, size_t(2048) * relay_slot + (size_t(1) << 20));
  EXPECT_EQ(tw::workspace_size(a, 4), r2);
  GemmAllReduceConfig auto_f32;
  auto_f32.partials = tw::PartialPrecision::kFloat32;
  EXPECT_EQ(tw::workspace_size(a, 2, auto_f32), tw::workspace_size(a, 2, f32));
  EXPECT_EQ(tw::workspace_size(args(0, 64, 64), 2), 0u);
}

TEST(GemmAllReducePlan, ExchangeLayoutSlotsAndFlagsAreDisjoint) {
  for (int P : {1, 2, 3}) {
    const auto l = tw::gemm_allreduce_impl::make_exchange_layout(1000, 1032, P, Raster::kAlongM);
    ASSERT_EQ(l.T, 8 * 5);
    EXPECT_GE(l.peer_done_off, tw::gemm_allreduce_impl::kHeaderBytes);
    EXPECT_GE(l.arrive_off, l.peer_done_off + 8 * size_t(P));
    EXPECT_GE(l.staging_off, l.arrive_off + 8 * size_t(l.T) * P);
    for (int t = 0; t < l.T; ++t)
      for (int q = 0; q < P; ++q) {
        EXPECT_EQ(l.slot(t, q), l.staging_off + (size_t(t) * P + q) * 65536);
        EXPECT_LT(l.arrive_flag(t, q), l.staging_off);
      }
    EXPECT_EQ(l.total, l.staging_off + size_t(l.T) * P * 65536);
  }
}

TEST(GemmAllReducePlan, AlgorithmChoiceAndRejections) {
  using tw::GemmAllReduceAlgo;
  using tw::gemm_allreduce_impl::resolve_algo;
  constexpr DType kBf16 = DType::kBFloat16;
  GemmAllReduceConfig c;
  EXPECT_EQ(resolve_algo(2, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kRelay);
  EXPECT_EQ(resolve_algo(1, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kExchange);
  for (int P : {3, 4, 8}) EXPECT_EQ(resolve_algo(P, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kRelay);
  EXPECT_EQ(resolve_algo(tw::gemm_allreduce_impl::kRelayMaxRanks + 1, c, BLayout::kNK, kBf16, kLargeM),
            GemmAllReduceAlgo::kOwner);
  // B [K, N]: exchange is not built for it, so one rank runs owner; 2 or more ranks relay.
  EXPECT_EQ(resolve_algo(1, c, BLayout::kKN, kBf16, kLargeM), GemmAllReduceAlgo::kOwner);
  EXPECT_EQ(resolve_algo(2, c, BLayout::kKN, kBf16, kLargeM), GemmAllReduceAlgo::kRelay);
  EXPECT_EQ(resolve_algo(4, c, BLayout::kKN, kBf16, kLargeM), GemmAllReduceAlgo::kRelay);
  {
    GemmAllReduceArgs kn = args(256, 256, 64);
    kn.b_layout = tw::BLayout::kKN;
    for (int P : {1, 2, 4}) EXPECT_TRUE(tw::gemm_allreduce_impl::check_args(kn, P, c).ok) << P << " ranks";
    GemmAllReduceConfig x = c;
    x.algo = GemmAllReduceAlgo::kExchange;
    const tw::Status r = tw::gemm_allreduce_impl::check_args(kn, 2, x);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.reason.find("exchange algorithm is built for B as [N, K_local]"), std::string::npos) << r.reason;
    EXPECT_TRUE(tw::gemm_allreduce_impl::check_args(args(256, 256, 64), 2, x).ok);
  }
  {
    GemmAllReduceConfig f = c;
    f.partials = tw::PartialPrecision::kFloat32;
    EXPECT_EQ(resolve_algo(2, f, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kOwner);
    f.algo = GemmAllReduceAlgo::kRelay;
    const tw::Status r = tw::gemm_allreduce_impl::check_args(args(256, 256, 64), 2, f);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.reason.find("relay"), std::string::npos) << r.reason;
    f.partials = tw::PartialPrecision::kBFloat16;
    EXPECT_TRUE(tw::gemm_allreduce_impl::check_args(args(256, 256, 64), 2, f).ok);
    for (int P : {3, 4, 8, tw::gemm_allreduce_impl::kRelayMaxRanks})
      EXPECT_TRUE(tw::gemm_allreduce_impl::check_args(args(256, 256, 64), P, f).ok) << "relay on " << P << " ranks";
    for (int P : {1, tw::gemm_allreduce_impl::kRelayMaxRanks + 1}) {
      const tw::Status rp = tw::gemm_allreduce_impl::check_args(args(256, 256, 64), P, f);
      EXPECT_FALSE(rp.ok) << P << " ranks";
      EXPECT_NE(rp.reason.find("2 to 32 ranks"), std::string::npos) << rp.reason;
    }
  }
  EXPECT_NE(resolve_algo(4, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kExchange);
  c.algo = GemmAllReduceAlgo::kExchange;
  EXPECT_EQ(resolve_algo(8, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kExchange);  // an explicit choice stands
  c.algo = GemmAllReduceAlgo::kOwner;
  EXPECT_EQ(resolve_algo(2, c, BLayout::kNK, kBf16, kLargeM), GemmAllReduceAlgo::kOwner);
  GemmAllReduceArgs a = args(256, 256, 64);
  c.algo = GemmAllReduceAlgo::kExchange;
  c.partials = tw::PartialPrecision::kFloat32;
  const tw::Status s = tw::gemm_allreduce_impl::check_args(a, 2, c);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("bf16 partials only"), std::string::npos) << s.reason;
}

// fp16 (A, B, C): the owner kernel is the one built, so kAuto resolves to it at every team size,
// both B layouts and both partial precisions, and an explicit relay or exchange is refused with
// the reason; fp32 is refused by the fused op's own check, naming the dtype.
TEST(GemmAllReducePlan, HalfPrecisionRunsTheOwnerAlgorithm) {
  using tw::GemmAllReduceAlgo;
  using tw::PartialPrecision;
  using tw::gemm_allreduce_impl::check_args;
  using tw::gemm_allreduce_impl::resolve_algo;
  for (BLayout b : {BLayout::kNK, BLayout::kKN})
    for (PartialPrecision pp : {PartialPrecision::kBFloat16, PartialPrecision::kFloat32})
      for (int P : {1, 2, 4}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << (b == BLayout::kKN ? " B[K,N]" : " B[N,K]")
                                        << (pp == PartialPrecision::kFloat32 ? " fp32" : " fp16") << " partials");
        GemmAllReduceConfig c;
        c.partials = pp;
        EXPECT_EQ(resolve_algo(P, c, b, DType::kFloat16, kLargeM), GemmAllReduceAlgo::kOwner);
        GemmAllReduceArgs a = args(1000, 1032, 520, DType::kFloat16);
        a.b_layout = b;
        for (GemmAllReduceAlgo algo : {GemmAllReduceAlgo::kAuto, GemmAllReduceAlgo::kOwner}) {
          c.algo = algo;
          const tw::Status s = check_args(a, P, c);
          EXPECT_TRUE(s.ok) << s.reason;
          // The layout and size are the owner algorithm's with 2- or 4-byte partials.
          const int pb = pp == PartialPrecision::kFloat32 ? 4 : 2;
          const Layout l = tw::gemm_allreduce_impl::layout_for(a, P, c);
          EXPECT_EQ(l.algo, GemmAllReduceAlgo::kOwner);
          EXPECT_EQ(l.partial_bytes, pb);
          EXPECT_EQ(tw::workspace_size(a, P, c), make_layout(1000, 1032, P, l.raster, pb).total);
          // The same bytes as the bf16 call with the owner algorithm: the layout is dtype-free.
          GemmAllReduceConfig owner = c;
          owner.algo = GemmAllReduceAlgo::kOwner;
          EXPECT_EQ(tw::workspace_size(a, P, c), tw::workspace_size(args(1000, 1032, 520), P, owner));
        }
        const struct {
          GemmAllReduceAlgo algo;
          const char* reason;
        } refused[] = {
            {GemmAllReduceAlgo::kRelay, "the relay algorithm is built for bf16 only; use kAuto or kOwner for fp16"},
            {GemmAllReduceAlgo::kExchange,
             "the exchange algorithm is built for bf16 only; use kAuto or kOwner for fp16"},
        };
        for (const auto& r : refused) {
          c.algo = r.algo;
          const tw::Status s = check_args(a, P, c);
          EXPECT_FALSE(s.ok);
          EXPECT_TRUE(contains(s.reason, r.reason)) << s.reason;
          EXPECT_TRUE(contains(s.reason, "gemm_allreduce: ")) << s.reason;
        }
      }
  // 8192 x 1024 x 512 on 2 ranks: kAuto is the owner algorithm (bf16 would run relay), and its
  // workspace the owner layout's.
  const GemmAllReduceArgs big = args(8192, 1024, 512, DType::kFloat16);
  GemmAllReduceConfig def, owner;
  owner.algo = GemmAllReduceAlgo::kOwner;
  EXPECT_TRUE(check_args(big, 2, def).ok);
  EXPECT_EQ(resolve_algo(2, def, BLayout::kNK, DType::kBFloat16, kLargeM), GemmAllReduceAlgo::kRelay);
  EXPECT_EQ(tw::workspace_size(big, 2, def), tw::workspace_size(args(8192, 1024, 512), 2, owner));
  // fp32 A, B, C: refused, naming the dtype, whatever the algorithm.
  for (GemmAllReduceAlgo algo : {GemmAllReduceAlgo::kAuto, GemmAllReduceAlgo::kOwner, GemmAllReduceAlgo::kRelay}) {
    GemmAllReduceConfig c;
    c.algo = algo;
    const tw::Status s = check_args(args(256, 256, 64, DType::kFloat32), 2, c);
    EXPECT_FALSE(s.ok);
    EXPECT_TRUE(contains(s.reason, "dtype float is not built for the fused op")) << s.reason;
  }
}

// Relay: with rank r's walk starting at r * floor(units / 2), every unit is reached second by
// the rank relay_owner names (so the owner's partial wait is for a tile the peer computed in the
// first half of its walk), and each rank owns the units of the second half of its own walk.
TEST(GemmAllReducePlan, RelayOwnership) {
  using tw::gemm_impl::make_schedule;
  for (auto [M, N] : {std::pair{8192, 8192}, std::pair{1000, 1032}, std::pair{128, 256}, std::pair{3000, 5144}}) {
    const auto s0 = make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 4, 0, 2, 132, 0);
    const auto s1 = make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 4, 1, 2, 132, 0);
    const int U = s0.units();
    const auto l = tw::gemm_allreduce_impl::make_relay_layout(M, N, Raster::kAlongM, U);
    ASSERT_EQ(l.split, U / 2);
    ASSERT_EQ(s1.rotation, l.split);
    int owned[2] = {0, 0};
    for (int o = 0; o < U; ++o) {
      const int w0 = s0.work_of_order(o), w1 = s1.work_of_order(o);
      const int owner = l.relay_owner(o);
      ++owned[owner];
      if (U > 1) {
        EXPECT_GT(owner == 0 ? w0 : w1, owner == 0 ? w1 : w0) << M << "x" << N << " unit " << o;
      }
      const int w_own = owner == 0 ? w0 : w1;
      EXPECT_GE(w_own, U - (owner == 0 ? U - l.split : l.split)) << "owned units are the end of the walk";
    }
    EXPECT_EQ(owned[1], l.split);
    EXPECT_EQ(owned[0], U - l.split);
    // Slots and flags never overlap.
    EXPECT_LT(l.relay_arrive_flag(l.T - 1), l.done_off);
    EXPECT_LT(l.done_flag(l.T - 1), l.staging_off);
    EXPECT_EQ(l.relay_slot(l.T - 1) + 65536, l.total);
  }
}

// The sequential path reads its partial from the workspace only where that is safe and fits.
// The relay on P ranks (all-reduce and reduce-scatter): every unit is computed at positions
// 0 .. P-1 by ranks r, r - 1, .., each a whole segment (split work indices, or more) after the one
// before (the partial sum it waits for was made at a smaller work index: no deadlock), and the
// rank at position P - 1 is relay_owner(o): for the reduce-scatter the shard of the unit's rows.
TEST(GemmAllReducePlan, RelayChainOnPRanks) {
  using tw::gemm_impl::make_schedule;
  for (int P : {2, 3, 4, 5, 8})
    for (bool rs : {false, true})
      for (auto [M, N] : {std::pair{8192, 8192}, std::pair{4096, 5144}, std::pair{16384, 1032}, std::pair{1024, 256}}) {
        const int S = M / P;  // reduce-scatter: whole 256-row shards only (scatter_uses_relay)
        if (rs && (M % P != 0 || !tw::gemm_allreduce_impl::scatter_rotates(M, P, S))) continue;
        SCOPED_TRACE(testing::Message() << "P=" << P << (rs ? " reduce-scatter " : " all-reduce ") << M << "x" << N);
        const Raster r = rs ? Raster::kAlongN : Raster::kAlongM;
        const int sw = rs ? tw::gemm_allreduce_impl::scatter_swizzle(S) : 4;
        std::vector<tw::gemm_impl::TileSchedule> s;
        for (int q = 0; q < P; ++q) s.push_back(make_schedule(M, N, 128, 256, 2, r, sw, rs ? (q + 1) % P : q, P, 66, 0));
        const int U = s[0].units();
        const auto l = tw::gemm_allreduce_impl::make_relay_layout(M, N, r, U, P, rs ? S : 0);
        ASSERT_EQ(l.split, U / P);
        std::vector<int> owned(P, 0);
        for (int o = 0; o < U; ++o) {
          std::vector<int> at(P, -1);  // the rank at each position
          for (int q = 0; q < P; ++q) {
            const int p = l.relay_position(o, q);
            ASSERT_GE(p, 0);
            ASSERT_LT(p, P);
            ASSERT_EQ(at[p], -1) << "two ranks at position " << p << " of unit " << o;
            at[p] = q;
          }
          for (int p = 1; p < P; ++p) {
            EXPECT_EQ(at[p], (at[p - 1] + P - 1) % P) << "the chain goes down the ring";
            EXPECT_GE(s[at[p]].work_of_order(o), s[at[p - 1]].work_of_order(o) + l.split) << "unit " << o;
          }
          EXPECT_EQ(at[P - 1], l.relay_owner(o));
          ++owned[l.relay_owner(o)];
          if (rs) {
            const int um = s[0].unit_of_order(o).m;
            EXPECT_EQ(l.relay_owner(o), um * 256 / S) << "the owner is the shard of the unit's rows";
          }
        }
        for (int q = 0; q < P; ++q) EXPECT_GE(owned[q], l.split);
        EXPECT_EQ(l.relay_slot(l.T - 1) + 65536, l.total);
      }
}

// The relay all-reduce's staggered walk (rounds >= 2; scheduler.hpp): each rank's walk is a
// permutation of the units, every unit's chain goes down the ring with at least relay_gap work
// indices (two chunk times less the remainder) between hops, relay_owner is the rank at position
// P - 1, ownership stays balanced, and the finals move forward: with 4 rounds or more at most 3/4
// of a rank's owned units come in the last 1/P of its walk, with 8 some come in its first half
// (on the segments all of them come in the last 1/P).
TEST(GemmAllReducePlan, RelayStaggeredWalk) {
  using tw::gemm_impl::make_schedule;
  int staggered = 0;
  for (int P : {2, 3, 4, 5, 8})
    for (int rounds : {2, 3, 4, 8})
      for (auto [M, N] : {std::pair{8192, 8192}, std::pair{4096, 5144}, std::pair{16384, 1032}, std::pair{1024, 256},
                          std::pair{4096, 8192}}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " rounds " << rounds << " " << M << "x" << N);
        std::vector<tw::gemm_impl::TileSchedule> s;
        for (int q = 0; q < P; ++q)
          s.push_back(make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 4, q, P, 66, 0, rounds));
        const int U = s[0].units();
        const auto l = tw::gemm_allreduce_impl::make_relay_layout(M, N, Raster::kAlongM, U, P, 0, rounds);
        ASSERT_EQ(l.stag_q, tw::gemm_impl::stagger_chunks(U, P, rounds));
        ASSERT_EQ(l.stag_q, s[0].stag_q);
        if (l.stag_q == 0) {  // too few units: the segments, as without rounds
          EXPECT_EQ(s[1].rotation, U / P);
          continue;
        }
        ++staggered;
        ASSERT_EQ(l.stag_d, s[0].stag_d);
        ASSERT_GE(l.relay_gap(U), l.stag_d);
        expect_walks_are_permutations(s, U);
        std::vector<int> owned(P, 0), early(P, 0), late(P, 0);
        for (int o = 0; o < U; ++o) {
          const std::vector<int> at = chain_of(l, o);
          ASSERT_TRUE(std::find(at.begin(), at.end(), -1) == at.end()) << "unit " << o << ": a position without a rank";
          for (int p = 1; p < P; ++p) {
            EXPECT_EQ(at[p], (at[p - 1] + P - 1) % P) << "the chain goes down the ring";
            EXPECT_GE(s[at[p]].work_of_order(o), s[at[p - 1]].work_of_order(o) + l.relay_gap(U)) << "unit " << o;
          }
          const int owner = l.relay_owner(o);
          EXPECT_EQ(at[P - 1], owner);
          ++owned[owner];
          if (2 * s[owner].work_of_order(o) < U) ++early[owner];
          if ((long long)s[owner].work_of_order(o) * P >= (long long)(P - 1) * U) ++late[owner];
        }
        for (int q = 0; q < P; ++q) {
          EXPECT_LE(std::abs(owned[q] - U / P), 2 * l.stag_d) << "rank " << q;
          if (rounds >= 4) {
            EXPECT_LE(4 * late[q], 3 * owned[q]) << "rank " << q << ": finals at the end of its walk";
          }
          if (rounds >= 8) {
            EXPECT_GT(early[q], 0) << "rank " << q << " owns nothing in the first half of its walk";
          }
        }
      }
  EXPECT_GT(staggered, 60);
}

// A padded relay staging slot (the measurement build's layouts) holds the hook's shared-memory
// rows with their padding (kRelaySlotPitch), so that with TILEWIRE_RELAY_PADDED_SLOTS a partial
// sum moves in one bulk copy each way: every slot and row 16-byte aligned (bulk copies), slots
// disjoint and inside the layout, a whole tile of padded rows within one slot and within the
// mbarrier's transaction count; a packed slot is 64 KiB; the workspace sizes cover this build's
// relay layouts.
TEST(GemmAllReducePlan, RelaySlotsHoldTheSharedMemoryRows) {
  namespace ai = tw::gemm_allreduce_impl;
  static_assert(ai::kRelaySlotPitch == (ai::kBlkN + 8) * 2 && ai::kRelaySlotPitch % 16 == 0);
  for (int P : {2, 3, 4, 8})
    for (auto [M, N] : {std::pair{8192, 8192}, std::pair{4096, 5144}, std::pair{1000, 264}}) {
      SCOPED_TRACE(testing::Message() << "P=" << P << " " << M << "x" << N);
      const int units = (M / 128 + 1) / 2 * ((N + 255) / 256);
      EXPECT_EQ(ai::make_relay_layout(M, N, Raster::kAlongN, units, P).slot_bytes, size_t(65536));
      const auto l = ai::make_relay_layout(M, N, Raster::kAlongN, units, P, 0, 0, 0, true);
      EXPECT_EQ(l.slot_bytes, size_t(128) * ai::kRelaySlotPitch);
      EXPECT_LT(l.slot_bytes, size_t(1) << 20) << "one copy's bytes on an mbarrier";
      EXPECT_GE(l.slot_bytes, size_t(128) * 256 * 2) << "packed rows fit too";
      EXPECT_EQ(l.staging_off % 16, 0u);
      for (int t : {0, 1, l.T - 1}) {
        EXPECT_EQ(l.relay_slot(t) % 16, 0u);
        EXPECT_LE(l.relay_slot(t) + l.slot_bytes, l.total);
        if (t > 0) {
          EXPECT_GE(l.relay_slot(t), l.relay_slot(t - 1) + l.slot_bytes);
        }
      }
      const int S = tw::shard_rows(M, P);
      if (tw::gemm_allreduce_impl::scatter_rotates(M, P, S)) {
        const int u = (tw::gemm_impl::ceil_div(M, 128) + 1) / 2 * ((N + 255) / 256);
        EXPECT_GE(tw::gemm_reducescatter_workspace_size(M, N, tw::DType::kBFloat16, P),
                  ai::make_relay_layout(M, N, Raster::kAlongN, u, P, S, 0, 0, ai::relay_slots_padded()).total);
      }
    }
}

// The relay all-reduce on the interleaved segments (scheduler.hpp, TILEWIRE_RELAY_WAVES): each
// rank's walk a permutation; every unit's chain the segments' (positions and owner of the layout
// unchanged), its hops exactly one chunk apart; and the finals spread over the walk: at most
// 1/P + one round of a rank's owned units in the last 1/P of its walk, where the segments put
// them all there.
TEST(GemmAllReducePlan, RelayInterleavedSegments) {
  using tw::gemm_impl::make_schedule;
  int interleaved = 0;
  for (int P : {2, 3, 4, 8})
    for (auto [M, N] : {std::pair{8192, 8192}, std::pair{4096, 8192}, std::pair{16384, 8192}, std::pair{2048, 4096}})
      for (int sms : {33, 66, 132}) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " " << M << "x" << N << " sms " << sms);
        const tw::gemm_impl::TileSchedule probe = make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 4, 0, P, sms, 0);
        const int U = probe.units(), d = tw::gemm_impl::interleave_chunk(U, P, probe.ctas, 1);
        if (d == 0) continue;
        ++interleaved;
        std::vector<tw::gemm_impl::TileSchedule> s;
        for (int q = 0; q < P; ++q) s.push_back(make_schedule(M, N, 128, 256, 2, Raster::kAlongM, 4, q, P, sms, 0, 4, d));
        ASSERT_EQ(s[0].ilv_d, d);
        ASSERT_EQ(s[0].stag_q, 0) << "the chunk takes precedence over rounds";
        const auto l = tw::gemm_allreduce_impl::make_relay_layout(M, N, Raster::kAlongM, U, P, 0, 4, d);
        ASSERT_EQ(l.stag_q, 0);
        ASSERT_EQ(l.relay_gap(U), d);
        expect_walks_are_permutations(s, U);
        std::vector<int> owned(P, 0), late(P, 0);
        for (int o = 0; o < U; ++o) {
          const std::vector<int> at = chain_of(l, o);
          ASSERT_TRUE(std::find(at.begin(), at.end(), -1) == at.end()) << "unit " << o << ": a position without a rank";
          for (int p = 1; p < P; ++p) {
            ASSERT_EQ(at[p], (at[p - 1] + P - 1) % P) << "the chain goes down the ring";
            ASSERT_EQ(s[at[p]].work_of_order(o), s[at[p - 1]].work_of_order(o) + d) << "unit " << o;
          }
          const int owner = l.relay_owner(o);
          ASSERT_EQ(at[P - 1], owner);
          ++owned[owner];
          if ((long long)s[owner].work_of_order(o) * P >= (long long)(P - 1) * U) ++late[owner];
        }
        for (int q = 0; q < P; ++q) {
          EXPECT_EQ(owned[q], U / P) << "rank " << q;
          EXPECT_LE(late[q], U / P / P + d) << "rank " << q << ": finals at the end of its walk";
        }
      }
  EXPECT_GT(interleaved, 20);
}

// kAuto's path (gemm_allreduce_prefers_fused): the cost model's call on 2 to 8 ranks; one rank
// fuses (the GEMM straight into C); more than 8 ranks (outside the model) stay sequential.
TEST(GemmAllReducePlan, AutoPathFollowsTheCostModel) {
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(8192, 8192, 4096, 1));
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(8192, 8192, 4096, 2)) << "the 2 x H200 acceptance shape";
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(16384, 8192, 4096, 2));
  EXPECT_FALSE(tw::gemm_allreduce_prefers_fused(128, 8192, 4096, 2)) << "a one-wave grid: measured slower";
  EXPECT_FALSE(tw::gemm_allreduce_prefers_fused(512, 4096, 4096, 2)) << "measured slower on 2 x H200";
  EXPECT_FALSE(tw::gemm_allreduce_prefers_fused(8192, 8192, 4096, 16)) << "outside the model: sequential";
  for (int P : {2, 4, 8}) {  // decided by the model, whatever it says: it is the same call
    namespace fg = tw::fused_gemm;
    const fg::Shape s{4096, 8192, 4096, 2};
    const bool model = fg::prefers_fused(fg::predict(fg::FusedOp::kGemmAllReduce, s, P, fg::estimate_gemm_us(4096, 8192, 4096, 2),
                                                     fg::default_overhead(fg::FusedOp::kGemmAllReduce, s, P)));
    EXPECT_EQ(tw::gemm_allreduce_prefers_fused(4096, 8192, 4096, P), model) << P << " ranks";
  }
}

TEST(GemmAllReducePlan, SequentialFromStaging) {
  using tw::gemm_allreduce_impl::sequential_from_staging;
  const auto relay = tw::gemm_allreduce_impl::make_relay_layout(8192, 8192, Raster::kAlongM, 1024);
  const size_t c = size_t(8192) * 8192 * 2, oneshot = 256 << 10;
  EXPECT_TRUE(sequential_from_staging(relay, c, oneshot)) << "the relay staging holds C; two-shot";
  const auto small = tw::gemm_allreduce_impl::make_relay_layout(128, 512, Raster::kAlongM, 2);
  EXPECT_FALSE(sequential_from_staging(small, size_t(128) * 512 * 2, oneshot)) << "128 KiB: one-shot, in place";
  EXPECT_TRUE(sequential_from_staging(small, size_t(128) * 512 * 2, 64 << 10)) << "two-shot when one-shot stops lower";
  const auto owner = tw::gemm_allreduce_impl::make_layout(8192, 8192, 2, Raster::kAlongM, 2);
  EXPECT_FALSE(sequential_from_staging(owner, c, oneshot)) << "the owner staging holds half of C";
}

TEST(GemmAllReducePlan, FinalWaitCtas) {
  using tw::gemm_impl::make_schedule;
  // 23 M-tiles (12 units, the last one with a padding CTA), 3 N-tiles, 8 groups: 36 units.
  const auto s = make_schedule(2900, 640, 128, 256, 2, Raster::kAlongM, 1, 0, 1, 16, 0);
  ASSERT_EQ(s.ctas, 8);
  int brute = 0;
  for (int g = 0; g < s.ctas; ++g)
    for (int x = 0; x < 2; ++x) {
      int last = -1;
      for (int i = 0; s.work_of_cta(g, i) >= 0; ++i) last = s.work_of_cta(g, i);
      if (last >= 0 && s.tile_of_work(last, x).m < s.tiles_m) ++brute;
    }
  EXPECT_EQ(tw::gemm_allreduce_impl::final_wait_ctas(s), brute);
  EXPECT_LT(brute, 16);  // some group ends on the padding unit
  // More groups than units: only groups with work count.
  const auto small = make_schedule(1, 300, 128, 256, 2, Raster::kAlongM, 1, 0, 1, 132, 0);
  EXPECT_EQ(tw::gemm_allreduce_impl::final_wait_ctas(small), 2);  // 2 units, x = 1 is padding
}

TEST(GemmAllReducePlan, AcceptsValidArgs) {
  for (int M : {1, 7, 3000})
    for (int P : {1, 2, 8}) {
      for (DType t : {DType::kBFloat16, DType::kFloat16}) {
        const tw::Status s = tw::gemm_allreduce_impl::check_args(args(M, 5144, 3584, t), P, {});
        EXPECT_TRUE(s.ok) << s.reason;
      }
    }
}

TEST(GemmAllReducePlan, RejectsWithAReason) {
  struct Case {
    const char* what;
    GemmAllReduceArgs a;
    int P;
    GemmAllReduceConfig cfg;
    const char* reason;
  };
  GemmAllReduceArgs null_ws = args(64, 64, 64), mis_ws = null_ws, half = null_ws, kn = null_ws, ov_c = null_ws,
                    ov_a = null_ws, bad_k = null_ws, null_c = null_ws;
  null_ws.workspace = nullptr;
  mis_ws.workspace = at(kW + 16);
  half.dtype = DType::kFloat16;
  kn.b_layout = BLayout::kKN;
  ov_c.workspace = at(kC + 4096);
  ov_a.workspace = at(kA);
  bad_k.K_local = 3583;
  null_c.C = nullptr;
  GemmAllReduceConfig sw, prec, exch, relay, ring_no_count, ring_no_events;
  exch.algo = tw::GemmAllReduceAlgo::kExchange;
  relay.algo = tw::GemmAllReduceAlgo::kRelay;
  static tw::trace::Event events[4];
  static unsigned long long counter = 0;
  ring_no_count.trace.events = events;  // events, but no counter: emits would write through null
  ring_no_count.trace.capacity = 4;
  ring_no_events.trace.count = &counter;  // a counter and a capacity, but no events
  ring_no_events.trace.capacity = 4;
  sw.swizzle = 3;
  prec.partials = static_cast<tw::PartialPrecision>(7);
  const Case cases[] = {
      {"no ranks", args(64, 64, 64), 0, {}, "no ranks"},
      {"null workspace", null_ws, 2, {}, "workspace is null"},
      {"misaligned workspace", mis_ws, 2, {}, "256-byte aligned"},
      {"half with the relay algorithm", half, 2, relay, "relay algorithm is built for bf16 only"},
      {"float", args(64, 64, 64, DType::kFloat32), 2, {}, "dtype float is not built for the fused op"},
      {"kKN with the exchange algorithm", kn, 2, exch, "exchange algorithm is built for B as [N, K_local]"},
      {"workspace overlaps C", ov_c, 2, {}, "workspace overlaps C"},
      {"workspace overlaps A", ov_a, 2, {}, "workspace overlaps A"},
      {"K_local odd", bad_k, 2, {}, "K % 8 == 0"},
      {"null C", null_c, 2, {}, "C is null"},
      {"swizzle 3", args(64, 64, 64), 2, sw, "swizzle 3"},
      {"unknown partials", args(64, 64, 64), 2, prec, "partial precision"},
      {"trace ring without a counter", args(64, 64, 64), 2, ring_no_count, "trace ring has events but no counter"},
      {"trace ring without events", args(64, 64, 64), 2, ring_no_events, "trace ring has a counter"},
  };
  for (const Case& c : cases) {
    const tw::Status s = tw::gemm_allreduce_impl::check_args(c.a, c.P, c.cfg);
    EXPECT_FALSE(s.ok) << c.what;
    EXPECT_TRUE(contains(s.reason, c.reason)) << c.what;
    EXPECT_TRUE(contains(s.reason, "gemm_allreduce: ")) << c.what;
  }
}

}  // namespace
