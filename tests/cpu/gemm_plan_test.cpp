// GEMM argument checks without a GPU (ops/gemm.hpp can_implement, src/ops/gemm/plan.hpp): each
// rejection with its reason, valid shapes accepted, raster choice, SM reservation, the choice
// between the hook and the stream-K kernel and the stream-K plan; gemm() throws kInvalidArgument
// before touching the device.
#include <cstdint>
#include <tuple>

#include "cpu_util.hpp"
#include "ops/gemm/plan.hpp"
#include "tilewire/ops/gemm.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw::GemmArgs;
using tw::GemmConfig;
using tw_test::contains;

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kA = 0x7f0000000000, kB = 0x7f1000000000, kC = 0x7f2000000000;  // 64 GiB apart

GemmArgs args(int M, int N, int K, BLayout l = BLayout::kNK, DType t = DType::kBFloat16) {
  return GemmArgs{at(kA), at(kB), at(kC), M, N, K, t, l};
}

TEST(GemmPlan, AcceptsValidShapes) {
  for (DType t : {DType::kBFloat16, DType::kFloat16})  // both built, both B layouts
    for (BLayout l : {BLayout::kNK, BLayout::kKN}) {
      for (int M : {1, 7, 128, 3000, 8192})
        for (int N : {8, 5144, 8192})
          for (int K : {8, 16, 3584, 8192}) {
            const tw::Status s = tw::can_implement(args(M, N, K, l, t));
            EXPECT_TRUE(s.ok) << M << "x" << N << "x" << K << " " << tw::blayout_name(l) << " " << tw::dtype_name(t) << ": "
                              << s.reason;
          }
    }
  GemmConfig cfg;
  cfg.reserved_sms = 16, cfg.swizzle = 8, cfg.raster = tw::GemmRaster::kAlongN, cfg.rank = 3, cfg.nranks = 4;
  EXPECT_TRUE(tw::can_implement(args(256, 256, 64), cfg).ok);
  // The caller provides no workspace: the stream-K kernel's scratch is cached by the library.
  EXPECT_EQ(tw::workspace_size(args(256, 256, 64)), 0u);
  EXPECT_EQ(tw::workspace_size(args(128, 4096, 4096)), 0u);
}

struct Reject {
  const char* what;
  GemmArgs a;
  GemmConfig cfg;
  const char* reason;  // a substring of Status::reason
};

GemmArgs with_ptrs(GemmArgs a, uintptr_t A, uintptr_t B, uintptr_t C) {
  a.A = at(A), a.B = at(B), a.C = at(C);
  return a;
}

TEST(GemmPlan, RejectsWithAReason) {
  GemmConfig ok;
  GemmConfig neg = ok, sw = ok, rk = ok, nr = ok, wr = ok;
  wr.walk_rounds = -1;
  neg.reserved_sms = -1;
  sw.swizzle = 3;
  rk.rank = 2, rk.nranks = 2;
  nr.nranks = 0;
  const Reject cases[] = {
      {"null A", with_ptrs(args(64, 64, 64), 0, kB, kC), ok, "A is null"},
      {"null B", with_ptrs(args(64, 64, 64), kA, 0, kC), ok, "B is null"},
      {"null C", with_ptrs(args(64, 64, 64), kA, kB, 0), ok, "C is null"},
      {"M = 0", args(0, 64, 64), ok, "M, N and K must be positive"},
      {"N < 0", args(64, -8, 64), ok, "M, N and K must be positive"},
      {"K = 0", args(64, 64, 0), ok, "K=0"},
      {"K odd", args(64, 64, 3583), ok, "K % 8 == 0"},
      {"K = 12 (24-byte rows)", args(64, 64, 12), ok, "multiple of 16"},
      {"N = 5140, kNK (C rows)", args(64, 5140, 64), ok, "rows of C are"},
      {"N = 5140, kKN (B and C rows)", args(64, 5140, 64, BLayout::kKN), ok, "rows of C and B"},
      {"A misaligned", with_ptrs(args(64, 64, 64), kA + 8, kB, kC), ok, "A is not 16-byte aligned"},
      {"B misaligned", with_ptrs(args(64, 64, 64), kA, kB + 2, kC), ok, "B is not 16-byte aligned"},
      {"C misaligned", with_ptrs(args(64, 64, 64), kA, kB, kC + 4), ok, "C is not 16-byte aligned"},
      {"C overlaps A", with_ptrs(args(64, 64, 64), kA, kB, kA + 4096), ok, "C overlaps A"},
      {"C overlaps B", with_ptrs(args(64, 64, 64), kA, kB, kB), ok, "C overlaps B"},
      {"float", args(64, 64, 64, BLayout::kNK, DType::kFloat32), ok, "unsupported dtype float"},
      {"unknown dtype", args(64, 64, 64, BLayout::kNK, static_cast<DType>(9)), ok, "unsupported dtype"},
      {"unknown layout", args(64, 64, 64, static_cast<BLayout>(5)), ok, "unknown B layout"},
      {"negative reserved_sms", args(64, 64, 64), neg, "reserved_sms is negative"},
      {"swizzle 3", args(64, 64, 64), sw, "swizzle 3"},
      {"rank >= nranks", args(64, 64, 64), rk, "rank 2 of 2"},
      {"no ranks", args(64, 64, 64), nr, "0 <= rank < nranks"},
      {"walk_rounds < 0", args(64, 64, 64), wr, "walk_rounds -1 (0 .. 64)"},
  };
  for (const Reject& c : cases) {
    const tw::Status s = tw::can_implement(c.a, c.cfg);
    EXPECT_FALSE(s.ok) << c.what;
    EXPECT_TRUE(contains(s.reason, c.reason)) << c.what;
    EXPECT_TRUE(contains(s.reason, "gemm: ")) << c.what;
    // gemm() refuses the same input with the same reason before it asks for a device.
    const tw::Error e = tw_test::catch_tw([&] { tw::gemm(c.a, c.cfg, nullptr); });
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument) << c.what;
    EXPECT_TRUE(contains(e.what(), c.reason)) << c.what;
  }
}

TEST(GemmPlan, AdjacentBuffersDoNotOverlap) {
  const size_t a_bytes = size_t(64) * 64 * 2;
  EXPECT_TRUE(tw::can_implement(with_ptrs(args(64, 64, 64), kA, kB, kA + a_bytes)).ok);
  EXPECT_FALSE(tw::can_implement(with_ptrs(args(64, 64, 64), kA, kB, kA + a_bytes - 16)).ok);
}

TEST(GemmPlan, RasterChoice) {
  using tw::gemm_impl::Raster;
  using tw::gemm_impl::resolve_raster;
  GemmConfig cfg;
  EXPECT_EQ(resolve_raster(args(128, 8192, 64), cfg, 128, 256), Raster::kAlongM) << "more tile columns than rows";
  EXPECT_EQ(resolve_raster(args(8192, 256, 64), cfg, 128, 256), Raster::kAlongN);
  EXPECT_EQ(resolve_raster(args(8192, 8192, 64), cfg, 128, 256), Raster::kAlongN) << "64 tile rows, 32 columns";
  cfg.raster = tw::GemmRaster::kAlongM;
  EXPECT_EQ(resolve_raster(args(8192, 256, 64), cfg, 128, 256), Raster::kAlongM) << "forced";
  cfg.raster = tw::GemmRaster::kAlongN;
  EXPECT_EQ(resolve_raster(args(128, 8192, 64), cfg, 128, 256), Raster::kAlongN) << "forced";
}

TEST(GemmPlan, ReservedSmsLeaveACluster) {
  using tw::gemm_impl::check_sms;
  GemmConfig cfg;
  EXPECT_TRUE(check_sms(cfg, 132, 2).ok);
  cfg.reserved_sms = 130;
  EXPECT_TRUE(check_sms(cfg, 132, 2).ok);
  cfg.reserved_sms = 131;
  const tw::Status s = check_sms(cfg, 132, 2);
  EXPECT_FALSE(s.ok);
  EXPECT_TRUE(contains(s.reason, "reserved_sms=131 leaves 1 of 132 SMs"));
}

// ------------------------------------------------------------------------------ kernel choice
// H200: 132 SMs, so the hook kernel runs 66 cluster groups of 2 CTAs.
constexpr int kSms = 132;

TEST(GemmPlan, KernelPrefParses) {
  using tw::gemm_impl::KernelPref;
  using tw::gemm_impl::parse_kernel_pref;
  EXPECT_EQ(parse_kernel_pref("auto"), KernelPref::kAuto);
  EXPECT_EQ(parse_kernel_pref("hook"), KernelPref::kHook);
  EXPECT_EQ(parse_kernel_pref("streamk"), KernelPref::kStreamK);
  for (const char* bad : {"", "Hook", "stream-k", "cutlass", "auto "})
    EXPECT_FALSE(parse_kernel_pref(bad).has_value()) << "'" << bad << "'";
  EXPECT_STREQ(tw::gemm_impl::kernel_name(tw::gemm_impl::GemmKernel::kHook), "hook");
  EXPECT_STREQ(tw::gemm_impl::kernel_name(tw::gemm_impl::GemmKernel::kStreamK), "streamk");
}

TEST(GemmPlan, HookWaves) {
  using tw::gemm_impl::hook_waves;
  GemmConfig cfg;
  // 4096x8192: 32 x 32 tiles = 16 x 32 cluster units = 512 over 66 groups.
  auto w = hook_waves(args(4096, 8192, 8192), cfg, kSms);
  EXPECT_EQ(w.units, 512);
  EXPECT_EQ(w.groups, 66);
  EXPECT_NEAR(w.waves(), 7.76, 0.01);
  EXPECT_NEAR(w.tail_fill(), 50.0 / 66, 1e-9);
  // M = 128: one tile row, still one cluster unit per tile column (the padding CTA).
  w = hook_waves(args(128, 4096, 4096), cfg, kSms);
  EXPECT_EQ(w.units, 16);
  EXPECT_NEAR(w.tail_fill(), 16.0 / 66, 1e-9);
  // Waves that come out even: a full last wave.
  w = hook_waves(args(2048, 4096, 64), cfg, 128);  // 8 x 16 = 128 units over 64 groups
  EXPECT_EQ(w.tail_fill(), 1.0);
  // Reserved SMs shrink the groups; odd leftovers round down; never below one group.
  cfg.reserved_sms = 11;
  EXPECT_EQ(hook_waves(args(4096, 8192, 64), cfg, kSms).groups, 60);
  cfg.reserved_sms = 131;
  EXPECT_EQ(hook_waves(args(4096, 8192, 64), cfg, kSms).groups, 1);
}

// The bench's GEMM grid, acceptance and ragged shapes on 132 SMs (plan.hpp, use_streamk): M <= 128
// and grids whose last wave is mostly empty go to the stream-K kernel (1.023 w + 0.15 < 0.99
// ceil(w) at w >= 1 waves); at M > 256 the 256x160 tile wherever its full waves cost less than the
// hook tile's (kHookTileCost, rows not whole lines) or the 128x128 ping-pong tile's
// (kPingpongTileCost, whole lines).
TEST(GemmPlan, StreamKRuleOnTheMeasuredShapes) {
  using tw::gemm_impl::plan_streamk;
  using tw::gemm_impl::StreamKTile;
  using tw::gemm_impl::use_streamk;
  struct Case {
    int M, N;
    bool streamk;  // the hook tile's tail rule
    bool wide;     // k256x160c2 where rows are not whole lines
    bool wide_lines;  // k256x160c2 where they are
    const char* why;
  };
  const Case cases[] = {
      {128, 4096, true, false, false, "0.24 waves"},
      {128, 8192, true, false, false, "0.48 waves"},
      {512, 4096, true, false, false, "0.48 waves; 2 x 26 256x160 tiles are under a wave"},
      {512, 8192, false, false, false, "0.97 waves: last wave 97% full; 256x160: 52 units < 66"},
      {2048, 4096, false, false, false, "1.94 waves; 256x160: 4 x 26 = 104 units, 2 waves of 40960 > 0.975 * 2 * 32768"},
      {2048, 8192, false, false, false, "3.88 waves: 4.12 > 3.96; 256x160: 4 waves"},
      {4096, 8192, false, false, false, "7.76 waves: 8 * 0.975 * 32768 < 7 * 40960"},
      {8192, 4096, false, false, false, "7.76 waves; 256x160: 16 x 26 = 416 units, 7 waves"},
      {8192, 8192, false, false, false, "15.5 waves; 256x160: 832 units, 13 waves"},
      {16384, 8192, false, false, false, "31.0 waves; 256x160: 26 waves"},
      {3000, 5144, false, true, true, "3.82 waves (4 * 0.975 * 32768) against 256x160's 3.0 (3 * 40960)"},
      {3000, 10248, true, true, false, "7.45 waves: 7.77 * 0.975 * 32768 > 6 * 40960; 128x128: 15 waves"},
      {5000, 5144, true, true, true, "6.36 waves: 6.66 hook waves against 5; 128x128: 13 waves"},
      {5000, 10248, true, true, false, "12.42 waves: 12.86 hook waves against 10"},
      {6143, 5144, false, true, false, "7.64 waves: 8 hook waves against 6; 128x128: 15 waves"},
      {6143, 10248, false, false, false, "14.91 waves: 15 * 0.975 * 32768 < 12 * 40960"},
  };
  // Rows not whole 128-byte lines (K % 64 != 0 in 2-byte types): the hook tile or 256x160.
  for (const Case& c : cases)
    for (int K : {4000, 8200}) {
      const GemmArgs a = args(c.M, c.N, K);
      EXPECT_EQ(use_streamk(a, {}, kSms), c.streamk || c.wide) << c.M << "x" << c.N << "x" << K << ": " << c.why;
      EXPECT_EQ(plan_streamk(a, {}, kSms).tile == StreamKTile::k256x160c2, c.wide) << c.M << "x" << c.N << "x" << K;
    }
  // Whole lines: the 128x128 ping-pong tile wherever its grid has a tile per SM and 256x160's full
  // waves do not cost less; below a tile per SM, the rows-not-whole-lines rule.
  for (const Case& c : cases)
    for (int K : {3584, 4096, 8192}) {
      const GemmArgs a = args(c.M, c.N, K);
      const bool grid_fills = ((c.M + 127) / 128) * ((c.N + 127) / 128) >= kSms;
      const StreamKTile t = plan_streamk(a, {}, kSms).tile;
      EXPECT_EQ(use_streamk(a, {}, kSms), grid_fills || c.streamk || c.wide) << c.M << "x" << c.N << "x" << K;
      EXPECT_EQ(t == StreamKTile::k128x128pp, grid_fills && c.M > 256 && !c.wide_lines) << c.M << "x" << c.N << "x" << K;
      EXPECT_EQ(t == StreamKTile::k256x160c2, c.wide_lines) << c.M << "x" << c.N << "x" << K;
    }
  // The 256x160 tile's plan: CUTLASS's heuristic (data-parallel in whole waves), its own order.
  const auto p = plan_streamk(args(5000, 5144, 4000), {}, kSms);
  EXPECT_EQ(p.decomposition, tw::gemm_impl::Decomposition::kHeuristic);
  EXPECT_EQ(p.swizzle, 1) << "10 cluster rows x 33 columns: a swizzle of 2 would pad a column";
  EXPECT_EQ(p.splits, 1);
  EXPECT_TRUE(p.deterministic);
  EXPECT_EQ(plan_streamk(args(5000, 5144, 4000, BLayout::kNK, DType::kFloat16), {}, kSms).tile, StreamKTile::k256x160c2);
}

// The cost model's bounds: 256x160 needs a full wave of its clusters; reserved SMs shrink both
// tiles' groups.
TEST(GemmPlan, WideTileEdges) {
  using tw::gemm_impl::plan_streamk;
  using tw::gemm_impl::StreamKTile;
  // 3000 x 5144: 6 x 33 = 198 units, 3 waves on 66 groups. On 64 groups (4 reserved SMs): 3.09,
  // 4 waves of 256x160 (163840) against 3.92 hook waves (min(4, 4.16) * 0.975 * 32768 = 127795).
  GemmConfig cfg;
  EXPECT_EQ(plan_streamk(args(3000, 5144, 4000), cfg, kSms).tile, StreamKTile::k256x160c2);
  cfg.reserved_sms = 4;
  EXPECT_NE(plan_streamk(args(3000, 5144, 4000), cfg, kSms).tile, StreamKTile::k256x160c2);
  EXPECT_FALSE(tw::gemm_impl::use_streamk(args(3000, 5144, 4000), cfg, kSms)) << "the hook kernel: 3.94 waves";
  // Under a wave of 256x160 clusters: never that tile (M = 768, N = 4096: 2 x 26 = 52 < 66 units).
  cfg.reserved_sms = 0;
  EXPECT_NE(plan_streamk(args(768, 4096, 4000), cfg, kSms).tile, StreamKTile::k256x160c2);
  EXPECT_NE(plan_streamk(args(768, 4096, 4096), cfg, kSms).tile, StreamKTile::k256x160c2);
  // M <= 256 never takes it (the decode rows).
  for (int N : {5144, 10248, 57344})
    EXPECT_NE(plan_streamk(args(256, N, 4000), cfg, kSms).tile, StreamKTile::k256x160c2) << N;
}

TEST(GemmPlan, StreamKRuleEdges) {
  using tw::gemm_impl::use_streamk;
  GemmConfig cfg;
  // bf16 and fp16 with B [N, K] have a stream-K kernel; B [K, N] has not.
  EXPECT_TRUE(use_streamk(args(128, 4096, 4096), cfg, kSms));
  EXPECT_FALSE(use_streamk(args(128, 4096, 4096, BLayout::kKN), cfg, kSms));
  EXPECT_TRUE(use_streamk(args(128, 4096, 4096, BLayout::kNK, DType::kFloat16), cfg, kSms));
  EXPECT_FALSE(use_streamk(args(128, 4096, 4096, BLayout::kKN, DType::kFloat16), cfg, kSms));
  // Tiny and odd shapes: under a wave.
  EXPECT_TRUE(use_streamk(args(1, 8, 16), cfg, kSms));
  EXPECT_TRUE(use_streamk(args(3000, 5144, 4000), cfg, kSms)) << "3.82 hook waves; 256x160: 3 full waves";
  EXPECT_FALSE(use_streamk(args(6143, 10248, 4000), cfg, kSms)) << "14.91 hook waves; 256x160: 12 waves";
  EXPECT_TRUE(use_streamk(args(3000, 5144, 3584), cfg, kSms)) << "whole lines, 984 128x128 tiles";
  EXPECT_TRUE(use_streamk(args(256 * 36, 256 * 2, 72), cfg, kSms)) << "72 units: 1.09 waves";
  EXPECT_TRUE(use_streamk(args(256 * 29, 256 * 2, 72), cfg, kSms)) << "58 units: 0.88 waves";
  EXPECT_FALSE(use_streamk(args(256 * 31, 256 * 2, 72), cfg, kSms)) << "62 units: 0.94 waves";
  EXPECT_TRUE(use_streamk(args(256 * 31, 256 * 2, 64), cfg, kSms)) << "whole lines: 248 128x128 tiles";
  // Reserved SMs move the waves: 2048x4096 is 128 units; 66 groups leave the last wave 94% full,
  // 64 groups make exactly 2 waves, 61 groups a 10% last wave.
  cfg.reserved_sms = 0;
  EXPECT_FALSE(use_streamk(args(2048, 4096, 4000), cfg, kSms));
  cfg.reserved_sms = 4;
  EXPECT_FALSE(use_streamk(args(2048, 4096, 4000), cfg, kSms));
  cfg.reserved_sms = 10;
  EXPECT_TRUE(use_streamk(args(2048, 4096, 4000), cfg, kSms));
  // ... and the ping-pong tile's bound: M = 1024, N = 2048 has 8 x 16 = 128 tiles.
  cfg.reserved_sms = 0;
  EXPECT_EQ(tw::gemm_impl::plan_streamk(args(1024, 2048, 4096), cfg, kSms).tile, tw::gemm_impl::StreamKTile::k128x128c1)
      << "128 tiles < 132 SMs: under a hook wave";
  cfg.reserved_sms = 4;
  EXPECT_EQ(tw::gemm_impl::plan_streamk(args(1024, 2048, 4096), cfg, kSms).tile, tw::gemm_impl::StreamKTile::k128x128pp)
      << "128 tiles on 128 SMs";
  // Full waves stay on the hook kernel; a last wave under a quarter full after 14-15 leaves it.
  cfg.reserved_sms = 0;
  EXPECT_FALSE(use_streamk(args(128 * 2 * 15, 256 * 66, 72), cfg, kSms)) << "15 full waves";
  EXPECT_TRUE(use_streamk(args(128 * 2 * 15, 256 * 66 + 8, 72), cfg, kSms)) << "15.23 waves: 15.73 < 15.84";
  EXPECT_TRUE(use_streamk(args(128 * 2 * 14, 256 * 66 + 8, 72), cfg, kSms)) << "14.21 waves: 14.69 < 14.85";
  EXPECT_FALSE(use_streamk(args(128 * 2 * 14, 256 * 69, 72), cfg, kSms)) << "14.64 waves: 15.12 > 14.85";
  // M <= 256 on a grid that plan_streamk's decode rows take: the CUTLASS kernels.
  EXPECT_TRUE(use_streamk(args(256, 14336, 4096), cfg, kSms)) << "0.85 hook waves, 224 128x128 tiles";
  EXPECT_TRUE(use_streamk(args(257, 14336, 4096), cfg, kSms)) << "2 x 56 units: 1.70 waves: 1.89 < 1.98";
  EXPECT_FALSE(use_streamk(args(257, 16384, 4000), cfg, kSms)) << "2 x 64 units: 1.94 waves: 2.13 > 1.98";
  EXPECT_TRUE(use_streamk(args(257, 16384, 4096), cfg, kSms)) << "whole lines: 3 x 128 128x128 tiles";
}

// The SM budget is an input of the rule: the 128x128 ping-pong tile only where the GEMM has at
// least 3/4 of the GPU (plan.cpp kPingpongMinSmShare). A virtual team's rank (132 / P SMs, the
// rest reserved) takes the hook tile or 256x160 instead: at 33 SMs with 4 GEMMs at once the
// ping-pong tile ran 1.37-1.87x slower than those (bench/results/2026-12-03-engine-h200).
TEST(GemmPlan, PingpongTileOnlyOnMostOfTheGpu) {
  using tw::gemm_impl::plan_streamk;
  using tw::gemm_impl::StreamKTile;
  GemmConfig cfg;
  for (auto [M, N, K] : {std::tuple{8192, 8192, 4096}, {16384, 7168, 8192}, {4096, 8192, 8192}, {16384, 8192, 7168}}) {
    SCOPED_TRACE(testing::Message() << M << "x" << N << "x" << K);
    cfg.reserved_sms = 0;
    EXPECT_EQ(plan_streamk(args(M, N, K), cfg, kSms).tile, StreamKTile::k128x128pp) << "the whole GPU";
    for (int P : {2, 3, 4, 8}) {
      cfg.reserved_sms = kSms - kSms / P;  // what team_gemm reserves on a virtual rank
      const bool streamk = tw::gemm_impl::use_streamk(args(M, N, K), cfg, kSms);
      EXPECT_TRUE(!streamk || plan_streamk(args(M, N, K), cfg, kSms).tile != StreamKTile::k128x128pp)
          << kSms / P << " of " << kSms << " SMs";
    }
  }
  // The edge: 99 of 132 SMs (3/4) keep the ping-pong tile, 98 do not.
  cfg.reserved_sms = kSms - 99;
  EXPECT_EQ(plan_streamk(args(8192, 8192, 4096), cfg, kSms).tile, StreamKTile::k128x128pp);
  cfg.reserved_sms = kSms - 98;
  EXPECT_NE(plan_streamk(args(8192, 8192, 4096), cfg, kSms).tile, StreamKTile::k128x128pp);
}

TEST(GemmPlan, KernelPreferenceOverridesTheRule) {
  using tw::gemm_impl::GemmKernel;
  using tw::gemm_impl::kernel_for;
  using tw::gemm_impl::KernelPref;
  const GemmArgs small = args(128, 4096, 4096), big = args(8192, 8192, 8200);  // big: rows not whole lines
  EXPECT_EQ(kernel_for(small, {}, kSms, KernelPref::kAuto), GemmKernel::kStreamK);
  EXPECT_EQ(kernel_for(big, {}, kSms, KernelPref::kAuto), GemmKernel::kHook);
  EXPECT_EQ(kernel_for(small, {}, kSms, KernelPref::kHook), GemmKernel::kHook);
  EXPECT_EQ(kernel_for(big, {}, kSms, KernelPref::kStreamK), GemmKernel::kStreamK);
  // Not built: the hook kernel whatever the preference.
  EXPECT_EQ(kernel_for(args(128, 4096, 4096, BLayout::kKN), {}, kSms, KernelPref::kStreamK), GemmKernel::kHook);
  EXPECT_EQ(kernel_for(args(128, 4096, 4096, BLayout::kKN, DType::kFloat16), {}, kSms, KernelPref::kStreamK),
            GemmKernel::kHook);
  EXPECT_EQ(kernel_for(args(128, 4096, 4096, BLayout::kNK, DType::kFloat16), {}, kSms, KernelPref::kAuto),
            GemmKernel::kStreamK);
}

TEST(GemmPlan, StreamKPlan) {
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::plan_streamk;
  using tw::gemm_impl::Raster;
  using tw::gemm_impl::StreamKTile;
  GemmConfig cfg;  // swizzle 4
  // A ragged tail over several waves: the hook kernel's tile, stream-K over the last waves.
  // (Rows of 8200 or 4000 elements are not whole 128-byte lines: no ping-pong tile.)
  auto p = plan_streamk(args(4096, 8192, 8200), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x256c2);
  EXPECT_EQ(p.decomposition, Decomposition::kStreamK);
  EXPECT_EQ(p.swizzle, 4);
  EXPECT_EQ(p.raster, Raster::kAlongN) << "32 tile rows, 32 tile columns";
  EXPECT_TRUE(p.deterministic);
  p = plan_streamk(args(2048, 8192, 4000), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x256c2);
  EXPECT_EQ(p.raster, Raster::kAlongM) << "16 tile rows, 32 tile columns";
  // Whole lines: the 128x128 ping-pong tile, data-parallel, on its own grid's order.
  p = plan_streamk(args(4096, 8192, 8192), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x128pp);
  EXPECT_EQ(p.decomposition, Decomposition::kDataParallel);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.raster, Raster::kAlongM) << "32 tile rows, 64 tile columns";
  EXPECT_EQ(p.swizzle, 4);
  EXPECT_TRUE(p.deterministic);
  EXPECT_EQ(plan_streamk(args(4096, 8192, 8192, BLayout::kNK, DType::kFloat16), cfg, kSms).tile, StreamKTile::k128x128pp);
  // M = 128: the first tile whose grid makes at most a wave, data-parallel.
  p = plan_streamk(args(128, 4096, 4096), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k64x64swap) << "64 x 2 = 128 ping-pong tiles on 132 SMs";
  EXPECT_EQ(p.decomposition, Decomposition::kDataParallel);
  EXPECT_EQ(p.splits, 1);
  p = plan_streamk(args(128, 8192, 4096), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap) << "128 x 2 = 256 64-row tiles; 64 x 2 = 128 128-row ones";
  EXPECT_EQ(p.decomposition, Decomposition::kDataParallel);
  p = plan_streamk(args(7, 256, 512), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap) << "4 ping-pong tiles are under sms / 16";
  EXPECT_EQ(p.decomposition, Decomposition::kHeuristic) << "8 K tiles: too short to split";
  GemmConfig reserved = cfg;
  reserved.reserved_sms = 8;
  EXPECT_EQ(plan_streamk(args(128, 4096, 4096), reserved, kSms).tile, StreamKTile::k128x64swap)
      << "128 ping-pong tiles do not fit on 124 SMs";
  p = plan_streamk(args(512, 4096, 4096), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x128c1);
  EXPECT_EQ(p.swizzle, 4) << "4 x 32 tiles";
  // The caller's raster and swizzle reach the plan.
  cfg.raster = tw::GemmRaster::kAlongN, cfg.swizzle = 1;
  p = plan_streamk(args(4096, 8192, 8192), cfg, kSms);
  EXPECT_EQ(p.raster, Raster::kAlongN);
  EXPECT_EQ(p.swizzle, 1);
}

// M <= 256, the decode rows (plan.hpp): the swapped ping-pong tile whose narrow side covers M,
// halved on narrow grids, data-parallel; under sms / 16 of its tiles the split-K swapped 128-row
// tile, so that tiles * splits fill the SMs with >= 8 K tiles per split; at 64 < M <= 256 the
// first tile whose grid fits, else the 128-row ping-pong tile, at M > 128 112 columns wide where
// its full waves give each SM fewer columns than 128 (cooperative 128x128 where rows are not
// whole 128-byte lines).
TEST(GemmPlan, StreamKDecodePlan) {
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::plan_streamk;
  using tw::gemm_impl::StreamKTile;
  GemmConfig cfg;
  struct Case {
    int M, N;
    StreamKTile tile;
    Decomposition d;
  };
  const Case cases[] = {
      {1, 4096, StreamKTile::k64x16swap, Decomposition::kDataParallel},
      {16, 57344, StreamKTile::k64x16swap, Decomposition::kDataParallel},
      {17, 4096, StreamKTile::k64x32swap, Decomposition::kDataParallel},
      {32, 14336, StreamKTile::k64x32swap, Decomposition::kDataParallel},
      {33, 4096, StreamKTile::k64x64swap, Decomposition::kDataParallel},
      {64, 57344, StreamKTile::k64x64swap, Decomposition::kDataParallel},
      {65, 4096, StreamKTile::k64x64swap, Decomposition::kDataParallel},    // 64 x 2 tiles
      {128, 8192, StreamKTile::k128x64swap, Decomposition::kDataParallel},  // 64 x 2
      {128, 14336, StreamKTile::k128x128pp, Decomposition::kDataParallel},  // 1 x 112: M <= 128 keeps 128 columns
      {128, 57344, StreamKTile::k128x128c1, Decomposition::kHeuristic},     // 1 x 448
      {129, 4096, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 32 x 3, ping-pong at M > 128
      {256, 4096, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 32 x 4
      {256, 8192, StreamKTile::k128x128pp, Decomposition::kDataParallel},   // 2 x 64
      {256, 14336, StreamKTile::k128x112pp, Decomposition::kDataParallel},  // 2 x 128: 2 waves of 112 columns
      {256, 57344, StreamKTile::k128x128pp, Decomposition::kDataParallel},  // 2 x 448
      // Rows 1a, between the ping-pong tile's steps on wide grids (narrow ones keep the rows above):
      {40, 14336, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 112 tiles >= 0.75 * 132
      {40, 8192, StreamKTile::k64x64swap, Decomposition::kDataParallel},      // 64 < 99
      {48, 57344, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 448
      {96, 8192, StreamKTile::k128x128swappp, Decomposition::kDataParallel},  // 64 tiles: one across M
      {112, 14336, StreamKTile::k128x128swappp, Decomposition::kDataParallel},  // 112
      {96, 4096, StreamKTile::k64x64swap, Decomposition::kDataParallel},      // 32 < 59.4: 64 x 2
      {96, 57344, StreamKTile::k128x128c1, Decomposition::kHeuristic},        // 448 > 132
      {113, 8192, StreamKTile::k128x64swap, Decomposition::kDataParallel},    // above 112: 64 x 2
      {129, 8192, StreamKTile::k128x256c2, Decomposition::kHeuristic},        // 2 x 32 in 2x1 clusters
      {168, 14336, StreamKTile::k128x256c2, Decomposition::kHeuristic},       // 2 x 56
      {160, 57344, StreamKTile::k128x256c2, Decomposition::kHeuristic},       // 2 x 224
      {169, 8192, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 64 x 3
      {192, 14336, StreamKTile::k128x64swappp, Decomposition::kDataParallel},  // 112 x 3
      {200, 8192, StreamKTile::k128x128pp, Decomposition::kDataParallel},     // above 192: row 4
      // Narrow grids: the narrow side halved while the grid is under 0.45 * 132 = 59.4 tiles.
      {128, 1024, StreamKTile::k64x32swap, Decomposition::kDataParallel},   // 16 x 2 < 59.4; 16 x 4
      {128, 2048, StreamKTile::k64x64swap, Decomposition::kDataParallel},   // 32 x 2
      {256, 1024, StreamKTile::k64x64swap, Decomposition::kDataParallel},   // 16 x 4
      {256, 2048, StreamKTile::k64x64swap, Decomposition::kDataParallel},   // 32 x 4 = 128 <= 132
      {64, 1024, StreamKTile::k64x16swap, Decomposition::kDataParallel},    // 16, 32, then 16 x 4
      {64, 2048, StreamKTile::k64x32swap, Decomposition::kDataParallel},    // 32, then 32 x 2
      {32, 2048, StreamKTile::k64x16swap, Decomposition::kDataParallel},    // 32, then 32 x 2
      {1, 1024, StreamKTile::k64x16swap, Decomposition::kDataParallel},     // 16 tiles >= 132 / 16
  };
  for (const Case& c : cases)
    for (DType t : {DType::kBFloat16, DType::kFloat16})
      for (int K : {4096, 8192}) {
        const GemmArgs a = args(c.M, c.N, K, BLayout::kNK, t);
        const auto p = plan_streamk(a, cfg, kSms);
        EXPECT_EQ(p.tile, c.tile) << c.M << "x" << c.N << "x" << K;
        EXPECT_EQ(p.decomposition, c.d) << c.M << "x" << c.N << "x" << K;
        EXPECT_TRUE(p.deterministic);
        EXPECT_FALSE(p.pdl) << "measured only";
        EXPECT_EQ(tw::gemm_impl::kernel_for(a, cfg, kSms, tw::gemm_impl::KernelPref::kAuto),
                  tw::gemm_impl::GemmKernel::kStreamK)
            << c.M << "x" << c.N << "x" << K;
      }
  EXPECT_EQ(plan_streamk(args(128, 1024, 4096), cfg, kSms).splits, 1) << "ping-pong: no split";
  EXPECT_EQ(plan_streamk(args(257, 4096, 4096), cfg, kSms).tile, StreamKTile::k128x128c1) << "M > 256: the general rule";

  // Under 132 / 16 = 8.25 ping-pong tiles: M = 1, N = 512, K = 4096: 8 tiles; 4 swapped 128-row
  // tiles, 64 K tiles: min(132 / 4, 64 / 8) = 8 splits, 32 units.
  auto p = plan_streamk(args(1, 512, 4096), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap);
  EXPECT_EQ(p.decomposition, Decomposition::kSplitK);
  EXPECT_EQ(p.splits, 8);
  EXPECT_EQ(plan_streamk(args(1, 576, 4096), cfg, kSms).tile, StreamKTile::k64x16swap) << "9 tiles";
  EXPECT_EQ(plan_streamk(args(100, 512, 4096), cfg, kSms).tile, StreamKTile::k64x16swap) << "8 x 7 tiles";
  // Few tiles, long K: the K-tile bound wins (N = 256: 2 tiles; K = 2048: 32 K tiles -> 4 splits).
  p = plan_streamk(args(32, 256, 2048), cfg, kSms);
  EXPECT_EQ(p.decomposition, Decomposition::kSplitK);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(plan_streamk(args(32, 256, 1024), cfg, kSms).splits, 2) << "16 K tiles";
  EXPECT_EQ(plan_streamk(args(32, 256, 1016), cfg, kSms).splits, 2) << "16 K tiles, the last one short";
  EXPECT_EQ(plan_streamk(args(32, 256, 960), cfg, kSms).decomposition, Decomposition::kHeuristic)
      << "15 K tiles: one split of >= 8";
  // Reserved SMs move both bounds: on 62 SMs 4 ping-pong tiles are >= 62 / 16, 2 are not; at
  // M = 128, N = 4096 the 128 64-row tiles no longer fit on 124 SMs.
  GemmConfig reserved = cfg;
  reserved.reserved_sms = 70;
  EXPECT_EQ(plan_streamk(args(1, 256, 4096), reserved, kSms).tile, StreamKTile::k64x16swap) << "4 tiles";
  p = plan_streamk(args(1, 128, 4096), reserved, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap);
  EXPECT_EQ(p.splits, 8) << "1 tile: min(62 / 1, 64 / 8)";
  reserved.reserved_sms = 8;
  EXPECT_EQ(plan_streamk(args(128, 4096, 4096), reserved, kSms).tile, StreamKTile::k128x64swap);
  // The last row: rows not whole 128-byte lines (K = 4000) keep the cooperative 128x128 tile.
  p = plan_streamk(args(256, 14336, 4000), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k128x128c1);
  EXPECT_EQ(p.decomposition, Decomposition::kHeuristic);
  EXPECT_EQ(plan_streamk(args(200, 14336, 4096), cfg, kSms).tile, StreamKTile::k128x112pp) << "2 x 128: 224 columns";
  EXPECT_EQ(plan_streamk(args(200, 16384, 4096), cfg, kSms).tile, StreamKTile::k128x128pp)
      << "2 x 147 112-column tiles: 3 waves, 336 columns against 2 x 128 = 256";
}

// The swapped grid is (ceil(N / 128), ceil(M / 64)): one tile column at M <= 64, no swizzle,
// and the caller's raster (along C's M or N) exchanged onto it.
TEST(GemmPlan, StreamKSwappedGridAndOrder) {
  using tw::gemm_impl::Raster;
  using tw::gemm_impl::streamk_grid;
  using tw::gemm_impl::streamk_order;
  using tw::gemm_impl::StreamKPlan;
  using tw::gemm_impl::StreamKTile;
  auto g = streamk_grid(args(1, 4096, 4096), StreamKTile::k128x64swap);
  EXPECT_EQ(g.tiles_m, 32);
  EXPECT_EQ(g.tiles_n, 1);
  g = streamk_grid(args(64, 57344, 8192), StreamKTile::k128x64swap);
  EXPECT_EQ(g.tiles_m, 448);
  EXPECT_EQ(g.tiles_n, 1);
  g = streamk_grid(args(65, 5144, 64), StreamKTile::k128x64swap);
  EXPECT_EQ(g.tiles_m, 41);
  EXPECT_EQ(g.tiles_n, 2);
  g = streamk_grid(args(65, 5144, 64), StreamKTile::k128x64c1);  // unswapped: C's axes
  EXPECT_EQ(g.tiles_m, 1);
  EXPECT_EQ(g.tiles_n, 81);
  EXPECT_TRUE(tw::gemm_impl::tile_shape(StreamKTile::k128x64swap).swapped);
  EXPECT_FALSE(tw::gemm_impl::tile_shape(StreamKTile::k128x64c1).swapped);

  GemmConfig cfg;  // swizzle 4, raster auto
  auto p = tw::gemm_impl::plan_streamk(args(16, 4096, 4096), cfg, kSms);
  EXPECT_EQ(p.tile, StreamKTile::k64x16swap);
  EXPECT_EQ(p.swizzle, 1) << "one tile column";
  EXPECT_EQ(p.raster, Raster::kAlongN) << "64 tile rows, 1 column: resolve_raster's tie rule";
  StreamKPlan q;
  q.tile = StreamKTile::k128x64swap;
  cfg.raster = tw::GemmRaster::kAlongM;  // down C's M = along the kernel's N
  streamk_order(args(16, 4096, 4096), cfg, &q);
  EXPECT_EQ(q.raster, Raster::kAlongN);
  cfg.raster = tw::GemmRaster::kAlongN;
  streamk_order(args(16, 4096, 4096), cfg, &q);
  EXPECT_EQ(q.raster, Raster::kAlongM);
  // A forced swapped tile on a tall problem: 2048 x 4096 is a 32 x 32 grid, the swizzle survives.
  cfg.raster = tw::GemmRaster::kAuto;
  streamk_order(args(2048, 4096, 64), cfg, &q);
  EXPECT_EQ(q.swizzle, 4);
  EXPECT_EQ(q.raster, Raster::kAlongN);
  streamk_order(args(4096, 1024, 64), cfg, &q);  // 8 x 64 swapped tiles: more columns than rows
  EXPECT_EQ(q.raster, Raster::kAlongM);
}

TEST(GemmPlan, StreamKSwizzleAddsNoPadding) {
  using tw::gemm_impl::streamk_swizzle;
  EXPECT_EQ(streamk_swizzle(32, 32, 2, 4), 4);
  EXPECT_EQ(streamk_swizzle(32, 32, 2, 8), 8);
  EXPECT_EQ(streamk_swizzle(1, 32, 1, 4), 1) << "one tile row";
  EXPECT_EQ(streamk_swizzle(24, 21, 2, 4), 1) << "21 tile columns: odd";
  EXPECT_EQ(streamk_swizzle(23, 40, 2, 8), 4) << "23 rows pad to 24 clusters' worth, 24 % 16 != 0";
  EXPECT_EQ(streamk_swizzle(32, 32, 2, 1), 1);
  EXPECT_EQ(streamk_swizzle(32, 32, 2, 3), 2) << "rounded down to a power of two";
  // Whatever it returns, CUTLASS's round-up (to swizzle * cluster along M, swizzle along N) is a no-op.
  for (int tm : {1, 2, 3, 5, 8, 23, 24, 64})
    for (int tn : {1, 3, 4, 6, 21, 32})
      for (int c : {1, 2})
        for (int want : {1, 2, 4, 8}) {
          const int s = streamk_swizzle(tm, tn, c, want);
          const int bm = (tm + c - 1) / c * c;
          EXPECT_EQ(bm % (s * c), 0) << tm << " " << tn << " " << c << " " << want;
          EXPECT_EQ(tn % s, 0) << tm << " " << tn << " " << c << " " << want;
          EXPECT_LE(s, want);
        }
}

TEST(GemmPlan, LayoutNames) {
  EXPECT_STREQ(tw::blayout_name(BLayout::kNK), "nk");
  EXPECT_STREQ(tw::blayout_name(BLayout::kKN), "kn");
}

}  // namespace

TEST(GemmPlan, StreamKPlanOverride) {
  using tw::gemm_impl::apply_streamk_plan_override;
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::StreamKPlan;
  using tw::gemm_impl::StreamKTile;
  StreamKPlan p;
  p.tile = StreamKTile::k128x256c2;
  p.swizzle = 4;
  const StreamKPlan before = p;
  EXPECT_TRUE(apply_streamk_plan_override("", &p).ok);
  EXPECT_EQ(p.tile, before.tile);
  ASSERT_TRUE(apply_streamk_plan_override("tile=128x64,mode=splitk,splits=4,det=0,swizzle=1,raster=n", &p).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x64c1);
  EXPECT_EQ(p.decomposition, Decomposition::kSplitK);
  EXPECT_EQ(p.splits, 4);
  EXPECT_FALSE(p.deterministic);
  EXPECT_EQ(p.swizzle, 1);
  EXPECT_EQ(p.raster, tw::gemm_impl::Raster::kAlongN);
  EXPECT_EQ(tw::gemm_impl::describe(p), "streamk 128x64c1 mode splitk splits 4 det 0 raster n swizzle 1");
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x64,det=1", &p).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap);
  EXPECT_EQ(tw::gemm_impl::describe(p), "streamk swap128x64c1 mode splitk splits 4 det 1 raster n swizzle 1");
  p.decomposition = Decomposition::kHeuristic;
  EXPECT_EQ(tw::gemm_impl::describe(p), "streamk swap128x64c1 mode heuristic det 1 raster n swizzle 1");
  ASSERT_TRUE(apply_streamk_plan_override("tile=256x64n2,mode=dp", &p).ok);  // 1 x 2 clusters along N
  EXPECT_EQ(p.tile, StreamKTile::k256x64n2);
  EXPECT_EQ(tw::gemm_impl::tile_shape(p.tile).cluster_n, 2);
  EXPECT_EQ(tw::gemm_impl::describe(p), "streamk 256x64n2 mode dp det 1 raster n swizzle 1");
  p.tile = StreamKTile::k128x64c1, p.decomposition = Decomposition::kSplitK, p.deterministic = false;
  // A bad entry leaves the plan untouched and names the entry.
  const StreamKPlan good = p;
  for (const char* bad : {"tile=64x64", "tile=swap128x128", "tile=swap", "mode=fast", "splits=0", "splits=65",
                          "det=2", "swizzle=3", "raster=k", "depth=2", "tile", "tile=128x128,splits=x"}) {
    StreamKPlan q = good;
    const tw::Status st = apply_streamk_plan_override(bad, &q);
    EXPECT_FALSE(st.ok) << bad;
    EXPECT_NE(st.reason.find("TILEWIRE_GEMM_STREAMK_PLAN"), std::string::npos) << st.reason;
    EXPECT_EQ(q.tile, good.tile) << bad;
    EXPECT_EQ(q.splits, good.splits) << bad;
  }
}

// Given the call, another tile gets its own grid's order (raster, swizzle) unless the spec names it.
TEST(GemmPlan, StreamKPlanOverrideReordersAnotherTile) {
  using tw::gemm_impl::apply_streamk_plan_override;
  using tw::gemm_impl::StreamKPlan;
  using tw::gemm_impl::StreamKTile;
  const GemmArgs a = args(768, 4096, 4000);  // rows not whole lines: the general rule
  const tw::GemmConfig cfg;  // swizzle 4
  const StreamKPlan base = tw::gemm_impl::plan_streamk(a, cfg, 132);
  ASSERT_EQ(base.tile, StreamKTile::k128x128c1);  // under one hook wave: grid 6 x 32
  EXPECT_EQ(base.swizzle, 2);                     // 4 would pad the 6 tile rows
  StreamKPlan want = base;
  want.tile = StreamKTile::k128x64swap;
  tw::gemm_impl::streamk_order(a, cfg, &want);    // grid 32 x 12: swizzle 4 fits
  EXPECT_EQ(want.swizzle, 4);

  StreamKPlan p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x64", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swap);
  EXPECT_EQ(p.swizzle, want.swizzle);
  EXPECT_EQ(p.raster, want.raster);
  p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x64,swizzle=1,raster=m", &p, &a, &cfg).ok);
  EXPECT_EQ(p.swizzle, 1);
  EXPECT_EQ(p.raster, tw::gemm_impl::Raster::kAlongM);
  p = base;  // the same tile: the plan's order stays
  ASSERT_TRUE(apply_streamk_plan_override("tile=128x128,mode=streamk", &p, &a, &cfg).ok);
  EXPECT_EQ(p.swizzle, base.swizzle);
  p = base;  // without the call (the old form): nothing reordered
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x64", &p).ok);
  EXPECT_EQ(p.swizzle, base.swizzle);
}

// The ping-pong tiles: data-parallel only (a split of the plan does not carry over); all swapped
// but the 128x128 and 128x112 ones.
TEST(GemmPlan, PingpongTilesAreSwappedAndDataParallel) {
  using tw::gemm_impl::apply_streamk_plan_override;
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::StreamKPlan;
  using tw::gemm_impl::StreamKTile;
  using tw::gemm_impl::tile_shape;
  for (StreamKTile t : {StreamKTile::k64x16swap, StreamKTile::k64x32swap, StreamKTile::k64x64swap}) {
    EXPECT_TRUE(tile_shape(t).swapped);
    EXPECT_TRUE(tile_shape(t).pingpong);
    EXPECT_EQ(tile_shape(t).blk_m, 64);
  }
  EXPECT_TRUE(tile_shape(StreamKTile::k128x128swappp).swapped);
  EXPECT_TRUE(tile_shape(StreamKTile::k128x128swappp).pingpong);
  EXPECT_EQ(tile_shape(StreamKTile::k128x128swappp).blk_n, 128);
  EXPECT_TRUE(tile_shape(StreamKTile::k128x64swappp).swapped);
  EXPECT_TRUE(tile_shape(StreamKTile::k128x64swappp).pingpong);
  EXPECT_EQ(tile_shape(StreamKTile::k128x64swappp).blk_m, 128);
  for (StreamKTile t : {StreamKTile::k128x128pp, StreamKTile::k128x112pp}) {
    EXPECT_FALSE(tile_shape(t).swapped);
    EXPECT_TRUE(tile_shape(t).pingpong);
    EXPECT_EQ(tile_shape(t).blk_m, 128);
  }
  EXPECT_EQ(tile_shape(StreamKTile::k128x112pp).blk_n, 112);
  for (StreamKTile t : {StreamKTile::k128x256c2, StreamKTile::k128x128c1, StreamKTile::k128x64c1,
                        StreamKTile::k128x64swap})
    EXPECT_FALSE(tile_shape(t).pingpong);
  EXPECT_EQ(tile_shape(StreamKTile::k64x16swap).blk_n, 16);
  EXPECT_EQ(tile_shape(StreamKTile::k64x32swap).blk_n, 32);
  const auto g = tw::gemm_impl::streamk_grid(args(1, 4096, 4096), StreamKTile::k64x16swap);
  EXPECT_EQ(g.tiles_m, 64);  // N / 64: twice the 128-row tile's
  EXPECT_EQ(g.tiles_n, 1);

  const GemmArgs a = args(1, 256, 4096);
  const tw::GemmConfig cfg;
  const StreamKPlan base = tw::gemm_impl::plan_streamk(a, cfg, 132);
  ASSERT_EQ(base.decomposition, Decomposition::kSplitK);  // 4 ping-pong tiles: the swapped 128-row tile, split 8
  StreamKPlan p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap64x16", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k64x16swap);
  EXPECT_EQ(p.decomposition, Decomposition::kDataParallel);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(tw::gemm_impl::describe(p).rfind("streamk swap64x16pp mode dp", 0), 0u) << tw::gemm_impl::describe(p);
  p = base;
  EXPECT_TRUE(apply_streamk_plan_override("tile=swap64x32,mode=heuristic", &p, &a, &cfg).ok);
  p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x64pp", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x64swappp);
  EXPECT_EQ(tw::gemm_impl::describe(p).rfind("streamk swap128x64pp mode dp", 0), 0u) << tw::gemm_impl::describe(p);
  p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=128x128pp", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x128pp);
  EXPECT_EQ(tw::gemm_impl::describe(p).rfind("streamk 128x128pp mode dp", 0), 0u) << tw::gemm_impl::describe(p);
  p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=128x112pp", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x112pp);
  EXPECT_EQ(tw::gemm_impl::describe(p).rfind("streamk 128x112pp mode dp", 0), 0u) << tw::gemm_impl::describe(p);
  // The swapped ping-pong tile whose narrow side covers M up to 128 (data-parallel).
  p = base;
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap128x128pp", &p, &a, &cfg).ok);
  EXPECT_EQ(p.tile, StreamKTile::k128x128swappp);
  EXPECT_EQ(tw::gemm_impl::describe(p).rfind("streamk swap128x128pp mode dp", 0), 0u) << tw::gemm_impl::describe(p);
  // The rule takes 112 columns only at 128 < M <= 256 (decode rule 4), where whole 112-column
  // waves give each SM fewer columns than 128-column ones (of these, N = 14336 only).
  for (int M : {1, 64, 128, 200, 256, 1024, 8192})
    for (int N : {1024, 4096, 14336, 57344}) {
      const bool t112 = N == 14336 && M > 128 && M <= 256;
      EXPECT_EQ(tw::gemm_impl::plan_streamk(args(M, N, 4096), cfg, 132).tile == StreamKTile::k128x112pp, t112)
          << M << "x" << N;
    }
  p = base;  // programmatic dependent launch: a launch option of any tile, named last in describe()
  EXPECT_FALSE(p.pdl);
  ASSERT_TRUE(apply_streamk_plan_override("tile=swap64x16,pdl=1", &p, &a, &cfg).ok);
  EXPECT_TRUE(p.pdl);
  const std::string d = tw::gemm_impl::describe(p);
  EXPECT_EQ(d.substr(d.size() - 4), " pdl") << d;
  ASSERT_TRUE(apply_streamk_plan_override("pdl=0", &p, &a, &cfg).ok);
  EXPECT_FALSE(p.pdl);
  EXPECT_FALSE(apply_streamk_plan_override("pdl=2", &p, &a, &cfg).ok);
  p = base;  // the stream-K tiles are built without grid dependency control
  EXPECT_FALSE(apply_streamk_plan_override("pdl=1", &p, &a, &cfg).ok);
  EXPECT_FALSE(apply_streamk_plan_override("tile=swap128x64,pdl=1", &p, &a, &cfg).ok);
  for (const char* bad : {"tile=swap64x64,mode=splitk,splits=2", "tile=swap64x16,mode=streamk",
                          "tile=128x128pp,mode=splitk,splits=2", "tile=128x112pp,mode=streamk",
                          "tile=swap128x128pp,mode=splitk,splits=2"}) {
    p = base;
    const tw::Status st = apply_streamk_plan_override(bad, &p, &a, &cfg);
    EXPECT_FALSE(st.ok) << bad;
    EXPECT_NE(st.reason.find("data-parallel only"), std::string::npos) << st.reason;
    EXPECT_EQ(p.tile, base.tile) << bad;
  }
}
