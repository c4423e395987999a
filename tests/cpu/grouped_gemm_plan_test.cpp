// Grouped GEMM argument checks and tile rule without a GPU (ops/grouped_gemm.hpp): each refusal
// names what was wrong; valid layouts (padded, packed, no rows) pass; grouped_gemm() throws
// kInvalidArgument before touching the device; the SwiGLU epilogue takes B [N, K] with N % 16 == 0
// and a C of [rows, N / 2]; tile names round-trip; the row gate waits for exactly the sources
// whose rows a tile holds.
#include <cstdint>
#include <string>
#include <vector>

#include "cpu_util.hpp"
#include "ops/grouped_gemm/gate.hpp"
#include "tilewire/ops/grouped_gemm.hpp"

namespace {
using tw::BLayout;
using tw::GroupedEpilogue;
using tw::GroupedGemmArgs;
using tw::GroupedGemmConfig;
using tw::GroupedTile;
using tw_test::contains;

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kA = 0x7f0000000000, kB = 0x7f1000000000, kC = 0x7f2000000000, kCounts = 0x7f3000000000;

// 8 experts, N 4096, K 7168, padded blocks of 256 rows.
GroupedGemmArgs padded() {
  GroupedGemmArgs a;
  a.A = at(kA), a.B = at(kB), a.C = at(kC);
  a.counts = static_cast<const int*>(at(kCounts));
  a.groups = 8, a.N = 4096, a.K = 7168, a.group_rows = 256, a.rows = 8 * 256;
  return a;
}

GroupedGemmArgs packed() {
  GroupedGemmArgs a = padded();
  a.offsets = static_cast<const int*>(at(kCounts + 4096));
  a.group_rows = 0, a.rows = 3000;
  return a;
}

TEST(GroupedGemmPlan, AcceptsBothLayoutsAndNoRows) {
  for (BLayout l : {BLayout::kNK, BLayout::kKN}) {
    GroupedGemmArgs a = padded();
    a.b_layout = l;
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a = packed();
    a.b_layout = l;
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
  }
  GroupedGemmArgs none = packed();  // a rank that received nothing: empty tensors, null pointers
  none.A = nullptr, none.C = nullptr, none.rows = 0;
  EXPECT_TRUE(tw::can_implement(none).ok) << tw::can_implement(none).reason;
  none = padded();
  none.A = nullptr, none.C = nullptr, none.rows = 0, none.group_rows = 0;
  EXPECT_TRUE(tw::can_implement(none).ok) << tw::can_implement(none).reason;
}

// kSwiGlu: both layouts with B [N, K]; C is [rows, N / 2], so a C that ends where B begins, which
// the full [rows, N] of kStore would overlap, does not.
TEST(GroupedGemmPlan, SwiGluAcceptsHalfWidthC) {
  for (GroupedGemmArgs a : {padded(), packed()}) {
    a.epilogue = GroupedEpilogue::kSwiGlu;
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a.N = 16;
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a.N = 4096;
    a.C = at(kB - size_t(a.rows) * (a.N / 2) * 2);
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a.epilogue = GroupedEpilogue::kStore;
    EXPECT_FALSE(tw::can_implement(a).ok);
    EXPECT_TRUE(contains(tw::can_implement(a).reason, "C overlaps B")) << tw::can_implement(a).reason;
  }
}

// kRowTargets: C is a table of 8-byte row addresses, so 8-byte alignment is enough and C spans
// rows x 8 bytes (a table that ends where B begins does not overlap it, as a [rows, N] C would).
TEST(GroupedGemmPlan, RowTargetsTakesATableOfRows) {
  for (GroupedGemmArgs a : {padded(), packed()}) {
    a.epilogue = GroupedEpilogue::kRowTargets;
    a.C = at(kC + 8);
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a.C = at(kB - size_t(a.rows) * 8);
    EXPECT_TRUE(tw::can_implement(a).ok) << tw::can_implement(a).reason;
    a.epilogue = GroupedEpilogue::kStore;
    EXPECT_FALSE(tw::can_implement(a).ok);
  }
}

TEST(GroupedGemmPlan, RefusesWithTheReason) {
  struct Case {
    std::string want;
    GroupedGemmArgs a;
    GroupedGemmConfig cfg = {};
  };
  std::vector<Case> cases;
  auto with = [&](const std::string& want, auto edit, GroupedGemmArgs base = padded()) {
    edit(base);
    cases.push_back({want, base});
  };
  with("groups=0", [](GroupedGemmArgs& a) { a.groups = 0; });
  with("N=0", [](GroupedGemmArgs& a) { a.N = 0; });
  with("K=-8", [](GroupedGemmArgs& a) { a.K = -8; });
  with("rows=-1", [](GroupedGemmArgs& a) { a.rows = -1; });
  with("dtype half is not built", [](GroupedGemmArgs& a) { a.dtype = tw::DType::kFloat16; });
  with("B is null", [](GroupedGemmArgs& a) { a.B = nullptr; });
  with("counts is null", [](GroupedGemmArgs& a) { a.counts = nullptr; });
  with("A is null", [](GroupedGemmArgs& a) { a.A = nullptr; });
  with("C is null", [](GroupedGemmArgs& a) { a.C = nullptr; });
  with("K=7170", [](GroupedGemmArgs& a) { a.K = 7170; });
  with("N=4100", [](GroupedGemmArgs& a) { a.N = 4100; });
  with("need 2056 rows", [](GroupedGemmArgs& a) { a.group_rows = 257; });
  with("group_rows=-1", [](GroupedGemmArgs& a) { a.group_rows = -1; });
  with("group_rows=4 with offsets", [](GroupedGemmArgs& a) { a.group_rows = 4; }, packed());
  with("A is not 16-byte aligned", [](GroupedGemmArgs& a) { a.A = at(kA + 8); });
  with("B is not 16-byte aligned", [](GroupedGemmArgs& a) { a.B = at(kB + 2); });
  with("C is not 16-byte aligned", [](GroupedGemmArgs& a) { a.C = at(kC + 4); });
  with("C overlaps A", [](GroupedGemmArgs& a) { a.C = at(kA + 4096); });
  with("C overlaps B", [](GroupedGemmArgs& a) { a.C = at(kB + 16); });
  // kSwiGlu: N in whole gate-up blocks of 16 (24 passes the N % 8 check), B [N, K] only.
  with("N=24 with the swiglu epilogue", [](GroupedGemmArgs& a) { a.N = 24, a.epilogue = GroupedEpilogue::kSwiGlu; });
  with("N=24 with the swiglu epilogue", [](GroupedGemmArgs& a) { a.N = 24, a.epilogue = GroupedEpilogue::kSwiGlu; },
       packed());
  with("swiglu epilogue is built for B [N, K] only, not B kn",
       [](GroupedGemmArgs& a) { a.b_layout = BLayout::kKN, a.epilogue = GroupedEpilogue::kSwiGlu; });
  with("row_targets epilogue is built for B [N, K] only, not B kn",
       [](GroupedGemmArgs& a) { a.b_layout = BLayout::kKN, a.epilogue = GroupedEpilogue::kRowTargets; });
  with("row_targets epilogue's table of row addresses) is not 8-byte aligned",
       [](GroupedGemmArgs& a) { a.C = at(kC + 4), a.epilogue = GroupedEpilogue::kRowTargets; });
  Case pp256{"row_targets epilogue is built for the 64x128pp and 128x256coop tiles, not 64x256pp", padded()};
  pp256.a.epilogue = GroupedEpilogue::kRowTargets;
  pp256.cfg.tile = tw::GroupedTile::k64x256pp;
  cases.push_back(pp256);
  Case neg{"rows_hint=-1", padded()};
  neg.cfg.rows_hint = -1;
  cases.push_back(neg);
  Case res{"reserved_sms=-2", padded()};
  res.cfg.reserved_sms = -2;
  cases.push_back(res);
  for (const Case& c : cases) {
    const tw::Status s = tw::can_implement(c.a, c.cfg);
    EXPECT_FALSE(s.ok) << c.want;
    EXPECT_TRUE(contains(s.reason, "grouped_gemm: ")) << s.reason;
    EXPECT_TRUE(contains(s.reason, c.want)) << "want '" << c.want << "' in: " << s.reason;
    // Refused before any device call: kInvalidArgument, also on a machine without a GPU.
    try {
      tw::grouped_gemm(c.a, c.cfg, nullptr);
      ADD_FAILURE() << c.want << ": grouped_gemm did not throw";
    } catch (const tw::Error& e) {
      EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument) << e.what();
    }
  }
}

TEST(GroupedGemmPlan, TileRule) {
  GroupedGemmArgs a = padded();  // 256 rows per group by the layout
  EXPECT_EQ(tw::grouped_tile_for(a), GroupedTile::k128x256coop);
  GroupedGemmConfig cfg;
  cfg.rows_hint = 4;  // a decode step: a few rows per expert in a large padded block
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k64x128pp);
  cfg.rows_hint = 64;
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k64x128pp);
  cfg.rows_hint = 65;  // from here on the cooperative tile (64x256pp only when asked for)
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k128x256coop);
  cfg.rows_hint = 1024;
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k128x256coop);
  cfg.tile = GroupedTile::k64x256pp;
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k64x256pp);
  cfg.tile = GroupedTile::k64x128pp;  // an explicit tile wins
  EXPECT_EQ(tw::grouped_tile_for(a, cfg), GroupedTile::k64x128pp);
  a.rows = 0, a.group_rows = 0;
  EXPECT_EQ(tw::grouped_tile_for(a), GroupedTile::k64x128pp);
}

TEST(GroupedGemmPlan, TileNamesRoundTrip) {
  for (GroupedTile t : {GroupedTile::kAuto, GroupedTile::k64x128pp, GroupedTile::k64x256pp, GroupedTile::k128x256coop})
    EXPECT_EQ(tw::parse_grouped_tile(tw::grouped_tile_name(t)), t);
  EXPECT_FALSE(tw::parse_grouped_tile("128x256").has_value());
}

// The gate's rule against a brute force over rows: a tile waits for source s exactly when one of
// its rows is one of s's; the load warp's walk (stop at the first source starting past the tile)
// finds the same set.
TEST(GroupedGemmGate, TilesWaitForTheSourcesOfTheirRows) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 0, 0}, {0, 5, 5, 9}, {0, 0, 130, 300}, {0, 64, 128, 192}, {0, 1, 1, 1, 1, 257}, {0, 0, 0, 64}};
  for (const std::vector<int>& b : layouts) {
    const int S = int(b.size()) - 1;
    for (int tile : {64, 128})
      for (int r0 = 0; r0 < b[S] + tile; r0 += tile) {
        std::vector<bool> walk(S, false);
        for (int s = 0; s < S && b[s] < r0 + tile; ++s) walk[s] = tw::grouped_impl::source_meets_rows(b.data(), s, r0, r0 + tile);
        for (int s = 0; s < S; ++s) {
          bool holds = false;
          for (int r = r0; r < r0 + tile; ++r) holds = holds || (r >= b[s] && r < b[s + 1]);
          EXPECT_EQ(walk[s], holds) << "bounds of " << S << " sources ending " << b[S] << ", tile at row " << r0
                                    << " of " << tile << ", source " << s;
        }
      }
  }
}

}  // namespace
