// GEMM argument checks without a GPU (ops/gemm.hpp can_implement, src/ops/gemm/plan.hpp): each
// rejection with its reason, valid shapes accepted, raster choice, SM reservation; gemm() throws
// kInvalidArgument before touching the device.
#include <cstdint>

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
  for (BLayout l : {BLayout::kNK, BLayout::kKN}) {
    for (int M : {1, 7, 128, 3000, 8192})
      for (int N : {8, 5144, 8192})
        for (int K : {8, 16, 3584, 8192}) {
          const tw::Status s = tw::can_implement(args(M, N, K, l));
          EXPECT_TRUE(s.ok) << M << "x" << N << "x" << K << " " << tw::blayout_name(l) << ": " << s.reason;
        }
  }
  GemmConfig cfg;
  cfg.reserved_sms = 16, cfg.swizzle = 8, cfg.raster = tw::GemmRaster::kAlongN, cfg.rank = 3, cfg.nranks = 4;
  EXPECT_TRUE(tw::can_implement(args(256, 256, 64), cfg).ok);
  EXPECT_EQ(tw::workspace_size(args(256, 256, 64)), 0u);
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
  GemmConfig neg = ok, sw = ok, rk = ok, nr = ok;
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
      {"half not built", args(64, 64, 64, BLayout::kNK, DType::kFloat16), ok, "half is not built"},
      {"unknown layout", args(64, 64, 64, static_cast<BLayout>(5)), ok, "unknown B layout"},
      {"negative reserved_sms", args(64, 64, 64), neg, "reserved_sms is negative"},
      {"swizzle 3", args(64, 64, 64), sw, "swizzle 3"},
      {"rank >= nranks", args(64, 64, 64), rk, "rank 2 of 2"},
      {"no ranks", args(64, 64, 64), nr, "0 <= rank < nranks"},
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

TEST(GemmPlan, LayoutNames) {
  EXPECT_STREQ(tw::blayout_name(BLayout::kNK), "nk");
  EXPECT_STREQ(tw::blayout_name(BLayout::kKN), "kn");
}

}  // namespace
