// GEMM on one Hopper GPU (ops/gemm.hpp) against an fp64 host reference: small and odd shapes,
// both B layouts, bf16 and fp16, poisoned outputs (an unwritten element stays NaN and fails), bad
// inputs write nothing, both kernels of the plain GEMM forced on the same inputs (the hook kernel
// and every stream-K tile and decomposition, deterministic repeats, scratch reuse across shapes),
// decode shapes on the swapped (C^T = B A^T) stream-K tile, and a custom epilogue hook that
// records every tile it is called for (exactly once each, with the right extents) under rank
// rotation and reserved SMs.
//
// This file instantiates one more kernel (bf16, kNK, RecordHook): the third of the build.
#include <cuda_bf16.h>

#include <cmath>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/gemm/gemm_sm90.cuh"
#include "ops/gemm/launch.hpp"
#include "ops/gemm/plan.hpp"
#include "testing/measurement.hpp"  // testing::set_gemm_plan
#include "tilewire/ops/gemm.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw_test::Bytes;
using tw_test::DeviceBuffer;
using tw_test::Fill;
using tw_test::Stream;

constexpr DType kBf16 = DType::kBFloat16;
constexpr uint64_t kSeedA = 11, kSeedB = 23;


struct Problem {
  int M, N, K;
  BLayout layout;
  Fill fill;
  DType dtype = kBf16;
  std::string name() const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " B=" + tw::blayout_name(layout) +
           (fill == Fill::kSmallInt ? " small-int " : " random ") + tw::dtype_name(dtype);
  }
};

// Device inputs of a problem, filled from seeds; C poisoned (0xFFFF: NaN in bf16 and fp16).
struct Buffers {
  Problem p;
  DeviceBuffer A, B, C;
  explicit Buffers(const Problem& pr)
      : p(pr), A(size_t(pr.M) * pr.K * 2), B(size_t(pr.N) * pr.K * 2), C(size_t(pr.M) * pr.N * 2) {}
  void fill_and_poison(cudaStream_t s) {
    tw_test::fill(A.data(), p.dtype, size_t(p.M) * p.K, p.fill, kSeedA, 0, s);
    tw_test::fill(B.data(), p.dtype, size_t(p.N) * p.K, p.fill, kSeedB, 0, s);
    tw_test::poison(C.data(), C.bytes, s);
  }
  tw::GemmArgs args() const { return tw::GemmArgs{A.data(), B.data(), C.data(), p.M, p.N, p.K, p.dtype, p.layout}; }
};

// Rows the reference checks: all of them for small M, else the edges, the tile boundaries and a
// seeded sample (fp64 on the host is ~1 ns per multiply-add; 3000 full rows would take minutes).
std::vector<int> rows_to_check(int M) {
  std::vector<int> r;
  if (M <= 300) {
    for (int i = 0; i < M; ++i) r.push_back(i);
    return r;
  }
  for (int i : {0, 1, 127, 128, 255, 256, M / 2, M - 129, M - 128, M - 2, M - 1}) r.push_back(i);
  for (int k = 0; k < 8; ++k) r.push_back((int)(tw_test::mix(99, 0, k) % (uint64_t)M));
  return r;
}

// fp64 reference of the checked rows (rows_to_check), with the bound per element: C =
// round(fp32 sum) may differ from it by half an ulp of the result (2^-8 |ref| in bf16, 2^-11 in
// fp16), plus the worst-case fp32 accumulation error K * 2^-24 * sum_k |a_k b_k|.
struct Reference {
  std::vector<int> rows;
  std::vector<double> ref, tol;  // [rows.size()][N]
};

Reference reference(const Problem& p) {
  const DType kT = p.dtype;
  Reference r;
  r.rows = rows_to_check(p.M);
  const Bytes a_bits = tw_test::host_inputs(p.fill, kT, size_t(p.M) * p.K, kSeedA, 0);
  const Bytes b_bits = tw_test::host_inputs(p.fill, kT, size_t(p.N) * p.K, kSeedB, 0);
  // B as [N][K] floats (exact: bf16 -> fp32), whatever its device layout.
  std::vector<float> bt(size_t(p.N) * p.K);
  for (int n = 0; n < p.N; ++n)
    for (int k = 0; k < p.K; ++k) {
      const size_t i = p.layout == BLayout::kNK ? size_t(n) * p.K + k : size_t(k) * p.N + n;
      bt[size_t(n) * p.K + k] = (float)tw_test::from_bits(kT, tw_test::elem(b_bits, kT, i));
    }
  std::vector<double> arow(p.K);
  for (int m : r.rows) {
    for (int k = 0; k < p.K; ++k) arow[k] = tw_test::from_bits(kT, tw_test::elem(a_bits, kT, size_t(m) * p.K + k));
    for (int n = 0; n < p.N; ++n) {
      const float* br = &bt[size_t(n) * p.K];
      double ref = 0, mag = 0;
      for (int k = 0; k < p.K; ++k) {
        ref += arow[k] * br[k];
        mag += std::fabs(arow[k] * br[k]);
      }
      r.ref.push_back(ref);
      r.tol.push_back(std::ldexp(std::fabs(ref), -1 - tw_test::mantissa_bits(kT)) + p.K * std::ldexp(mag, -24));
    }
  }
  return r;
}

// "" when C (copied back) holds no poison anywhere and matches the reference on the checked rows,
// else the first problem.
std::string compare(const Problem& p, const Reference& r, const Bytes& c) {
  const DType kT = p.dtype;
  for (size_t i = 0; i < size_t(p.M) * p.N; ++i)
    if (std::isnan(tw_test::from_bits(kT, tw_test::elem(c, kT, i))))
      return "C[" + std::to_string(i / p.N) + "," + std::to_string(i % p.N) + "] is NaN (never written?)";
  for (size_t j = 0; j < r.rows.size(); ++j) {
    const int m = r.rows[j];
    for (int n = 0; n < p.N; ++n) {
      const double ref = r.ref[j * p.N + n], tol = r.tol[j * p.N + n];
      const double got = tw_test::from_bits(kT, tw_test::elem(c, kT, size_t(m) * p.N + n));
      if (!(std::fabs(got - ref) <= tol))
        return "C[" + std::to_string(m) + "," + std::to_string(n) + "] = " + std::to_string(got) + ", reference " +
               std::to_string(ref) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

std::string check(const Buffers& b, cudaStream_t s) {
  return compare(b.p, reference(b.p), tw_test::to_host(b.C.data(), b.C.bytes, s));
}

void run_and_check(const Problem& p, const tw::GemmConfig& cfg = {}) {
  SCOPED_TRACE(p.name());
  Stream s;
  Buffers b(p);
  b.fill_and_poison(s);
  const tw::Status st = tw::can_implement(b.args(), cfg);
  ASSERT_TRUE(st.ok) << st.reason;
  tw::gemm(b.args(), cfg, s);
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(check(b, s), "");
}

TEST(Gemm, SmallShapes) {
  TW_SKIP_UNLESS_SM90();
  for (BLayout l : {BLayout::kNK, BLayout::kKN})
    for (Fill f : {Fill::kSmallInt, Fill::kRandom}) {
      run_and_check({128, 256, 64, l, f});
      run_and_check({256, 512, 128, l, f});
      run_and_check({512, 1024, 1024, l, f});
    }
}

TEST(Gemm, OddShapes) {
  TW_SKIP_UNLESS_SM90();
  for (BLayout l : {BLayout::kNK, BLayout::kKN})
    for (int M : {1, 7, 3000})
      for (int N : {8, 5144})
        for (int K : {16, 3584}) run_and_check({M, N, K, l, Fill::kRandom});
}

// fp16 through tw::gemm's choice (the hook kernel, or stream-K with B [N, K] where the rule picks
// it): small, odd and decode-sized shapes, both B layouts, against the same fp64 reference with
// fp16's rounding bound.
TEST(Gemm, HalfSmallOddAndDecodeShapes) {
  TW_SKIP_UNLESS_SM90();
  for (BLayout l : {BLayout::kNK, BLayout::kKN}) {
    for (Fill f : {Fill::kSmallInt, Fill::kRandom}) {
      run_and_check({128, 256, 64, l, f, DType::kFloat16});
      run_and_check({512, 1024, 1024, l, f, DType::kFloat16});
    }
    for (int M : {1, 7, 3000})
      for (int N : {8, 5144}) run_and_check({M, N, 3584, l, Fill::kRandom, DType::kFloat16});
    run_and_check({16, 8192, 4096, l, Fill::kRandom, DType::kFloat16});
  }
}

TEST(Gemm, ConfigsGiveTheSameResult) {
  TW_SKIP_UNLESS_SM90();
  const Problem p{1000, 1032, 520, BLayout::kNK, Fill::kSmallInt};
  for (tw::GemmRaster r : {tw::GemmRaster::kAlongM, tw::GemmRaster::kAlongN})
    for (int sw : {1, 2, 8})
      for (int reserved : {0, 16, 100}) {
        tw::GemmConfig cfg;
        cfg.raster = r, cfg.swizzle = sw, cfg.reserved_sms = reserved, cfg.rank = 1, cfg.nranks = 3;
        SCOPED_TRACE("swizzle " + std::to_string(sw) + " reserved " + std::to_string(reserved));
        run_and_check(p, cfg);
      }
}

TEST(Gemm, BadInputWritesNothing) {
  TW_SKIP_UNLESS_SM90();
  Stream s;
  Buffers b({64, 64, 64, BLayout::kNK, Fill::kSmallInt});
  b.fill_and_poison(s);
  tw::GemmArgs a = b.args();
  a.K = 60;  // 120-byte rows: TMA cannot address them
  EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm(a, {}, s); }, tw::Errc::kInvalidArgument, {"K=60", "multiple of 16"}));
  tw::GemmConfig cfg;
  cfg.reserved_sms = 100000;
  EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm(b.args(), cfg, s); }, tw::Errc::kInvalidArgument, {"reserved_sms"}));
  const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
  EXPECT_EQ(tw_test::check_fill(c, 0, c.size(), tw_test::kPoison, "C"), "");
}

// ------------------------------------------------------------------------------ the two kernels
// tw::gemm picks the hook or the stream-K kernel per call (src/ops/gemm/plan.hpp kernel_for); here
// each is forced by calling the launcher tw::gemm would call, on the same inputs, C poisoned
// before every run. Stream-K is run with tw::gemm's own plan and with each tile and decomposition
// forced, so both instantiations and CUTLASS's data-parallel, split-K and stream-K paths all run.
struct Variant {
  std::string name;
  bool hook;
  tw::gemm_impl::StreamKPlan plan;  // stream-K only
};

std::vector<Variant> variants(const tw::GemmArgs& a, const tw::GemmConfig& cfg, int num_sms) {
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::StreamKTile;
  std::vector<Variant> v;
  v.push_back({"hook", true, {}});
  v.push_back({"streamk (tw::gemm's plan)", false, tw::gemm_impl::plan_streamk(a, cfg, num_sms)});
  // The swapped tile (C^T = B A^T) runs on every shape, not only at M <= 64 where the plan picks it:
  // at M > 64 its grid has several tile columns (along C's M), which exercises its strides more.
  for (StreamKTile t : {StreamKTile::k128x128c1, StreamKTile::k128x256c2, StreamKTile::k128x64swap})
    for (Decomposition d : {Decomposition::kHeuristic, Decomposition::kStreamK, Decomposition::kSplitK,
                            Decomposition::kDataParallel}) {
      tw::gemm_impl::StreamKPlan p = tw::gemm_impl::plan_streamk(a, cfg, num_sms);
      p.tile = t, p.decomposition = d, p.splits = d == Decomposition::kSplitK ? 3 : 1;
      tw::gemm_impl::streamk_order(a, cfg, &p);  // raster and swizzle on the tile's own grid
      const char* dn = d == Decomposition::kHeuristic  ? "heuristic"
                       : d == Decomposition::kStreamK  ? "stream-K"
                       : d == Decomposition::kSplitK   ? "split-K 3"
                                                       : "data-parallel";
      const char* tn = t == StreamKTile::k128x128c1   ? "128x128"
                       : t == StreamKTile::k128x256c2 ? "128x256"
                                                      : "swap128x64";
      v.push_back({std::string("streamk ") + tn + " " + dn, false, p});
    }
  return v;
}

void launch(const Variant& v, const tw::GemmArgs& a, const tw::GemmConfig& cfg, int num_sms, cudaStream_t s) {
  const bool half = a.dtype == DType::kFloat16;
  const auto raster = tw::gemm_impl::resolve_raster(a, cfg, tw::gemm_impl::kBlkM, tw::gemm_impl::kBlkN);
  if (v.hook) half ? tw::gemm_impl::launch_f16_nk(a, cfg, num_sms, raster, s) : tw::gemm_impl::launch_bf16_nk(a, cfg, num_sms, raster, s);
  else if (tw::gemm_impl::tile_shape(v.plan.tile).pingpong)  // the plan's decode tiles
    half ? tw::gemm_impl::launch_f16_nk_pingpong(a, cfg, num_sms, v.plan, s)
         : tw::gemm_impl::launch_bf16_nk_pingpong(a, cfg, num_sms, v.plan, s);
  else if (tw::gemm_impl::tile_shape(v.plan.tile).blk_m == 256)  // the plan's 256x160 tile (M > 256)
    half ? tw::gemm_impl::launch_f16_nk_wide(a, cfg, num_sms, v.plan, s)
         : tw::gemm_impl::launch_bf16_nk_wide(a, cfg, num_sms, v.plan, s);
  else if (half) tw::gemm_impl::launch_f16_nk_streamk(a, cfg, num_sms, v.plan, s);
  else tw::gemm_impl::launch_bf16_nk_streamk(a, cfg, num_sms, v.plan, s);
}

int device_sms() {
  int dev = 0, n = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// Every variant on problem p: each result checked against one fp64 reference; the deterministic
// stream-K runs repeated once (counters left by the first run, no memset: scratch.hpp) and
// required to give the same bits.
void run_all_kernels(const Problem& p, const tw::GemmConfig& cfg = {}) {
  SCOPED_TRACE(p.name());
  const int num_sms = device_sms();
  Stream s;
  Buffers b(p);
  b.fill_and_poison(s);
  const Reference ref = reference(p);
  const tw::GemmArgs a = b.args();
  ASSERT_TRUE(tw::can_implement(a, cfg).ok);
  for (const Variant& v : variants(a, cfg, num_sms)) {
    SCOPED_TRACE(v.name);
    tw_test::poison(b.C.data(), b.C.bytes, s);
    launch(v, a, cfg, num_sms, s);
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
    EXPECT_EQ(compare(p, ref, c), "");
    if (v.hook) continue;
    tw_test::poison(b.C.data(), b.C.bytes, s);
    launch(v, a, cfg, num_sms, s);
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_TRUE(tw_test::to_host(b.C.data(), b.C.bytes, s) == c) << "second run differs from the first";
  }
}

TEST(Gemm, BothKernelsSmallAndOddShapes) {
  TW_SKIP_UNLESS_SM90();
  for (int M : {1, 7, 128, 3000})
    for (int N : {8, 4096, 5144})
      for (int K : {16, 3584}) run_all_kernels({M, N, K, BLayout::kNK, Fill::kRandom});
  // fp16 has the same kernels with B [N, K].
  for (int M : {1, 7, 3000}) run_all_kernels({M, 5144, 3584, BLayout::kNK, Fill::kRandom, DType::kFloat16});
}

TEST(Gemm, BothKernelsWithReservedSmsAndRanks) {
  TW_SKIP_UNLESS_SM90();
  tw::GemmConfig cfg;
  cfg.reserved_sms = 36, cfg.swizzle = 2, cfg.raster = tw::GemmRaster::kAlongN, cfg.rank = 2, cfg.nranks = 4;
  run_all_kernels({1000, 1032, 2056, BLayout::kNK, Fill::kSmallInt}, cfg);
}

// Two acceptance shapes with ragged last waves: the hook kernel, tw::gemm's plan (the 128x128
// ping-pong tile: rows of whole lines) and the tail plan for rows that are not (data-parallel waves
// of 128x256 tiles, then the last waves split in K).
TEST(Gemm, BothKernelsOnRaggedWaveShapes) {
  TW_SKIP_UNLESS_SM90();
  const int num_sms = device_sms();
  for (const Problem& p : {Problem{2048, 8192, 4096, BLayout::kNK, Fill::kRandom},
                           Problem{4096, 8192, 8192, BLayout::kNK, Fill::kRandom}}) {
    SCOPED_TRACE(p.name());
    Stream s;
    Buffers b(p);
    b.fill_and_poison(s);
    const Reference ref = reference(p);
    const tw::GemmArgs a = b.args();
    tw::gemm_impl::StreamKPlan tail = tw::gemm_impl::plan_streamk(a, {}, num_sms);
    tail.tile = tw::gemm_impl::StreamKTile::k128x256c2, tail.decomposition = tw::gemm_impl::Decomposition::kStreamK;
    tw::gemm_impl::streamk_order(a, {}, &tail);
    for (const Variant& v : {Variant{"hook", true, {}},
                             Variant{"streamk", false, tw::gemm_impl::plan_streamk(a, {}, num_sms)},
                             Variant{"streamk 128x256 stream-K", false, tail}}) {
      SCOPED_TRACE(v.name);
      tw_test::poison(b.C.data(), b.C.bytes, s);
      launch(v, a, {}, num_sms, s);
      TW_CUDA_CHECK(cudaStreamSynchronize(s));
      EXPECT_EQ(compare(p, ref, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
    }
  }
}

// One stream, shapes and plans alternating: the scratch is reused with the counters of the last
// layout known zero (no memset), re-zeroed on a change of layout, and grown (a new buffer) when a
// plan needs more. A stale counter would hang the kernel or add a wrong partial: every result is
// checked and must equal the first run of its shape bit for bit.
TEST(Gemm, StreamKScratchReuseAcrossShapes) {
  TW_SKIP_UNLESS_SM90();
  using tw::gemm_impl::Decomposition;
  using tw::gemm_impl::StreamKTile;
  const int num_sms = device_sms();
  Stream s;
  struct Case {
    Problem p;
    StreamKTile tile;
    Decomposition d;
  };
  const Case cases[] = {
      {{128, 4096, 3584, BLayout::kNK, Fill::kRandom}, StreamKTile::k128x128c1, Decomposition::kHeuristic},
      {{7, 5144, 3584, BLayout::kNK, Fill::kRandom}, StreamKTile::k128x128c1, Decomposition::kSplitK},
      {{3000, 5144, 3584, BLayout::kNK, Fill::kRandom}, StreamKTile::k128x256c2, Decomposition::kStreamK},
      {{33, 4096, 4096, BLayout::kNK, Fill::kRandom}, StreamKTile::k128x64swap, Decomposition::kSplitK},
  };
  std::vector<std::unique_ptr<Buffers>> bufs;
  std::vector<Reference> refs;
  std::vector<Bytes> first;
  for (const Case& c : cases) {
    bufs.push_back(std::make_unique<Buffers>(c.p));
    bufs.back()->fill_and_poison(s);
    refs.push_back(reference(c.p));
  }
  first.resize(std::size(cases));
  for (int i : {0, 0, 1, 1, 0, 2, 1, 3, 2, 3, 3, 2, 0, 3, 2}) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.p.name() + " (step with case " + std::to_string(i) + ")");
    Buffers& b = *bufs[i];
    const tw::GemmArgs a = b.args();
    tw::gemm_impl::StreamKPlan plan = tw::gemm_impl::plan_streamk(a, {}, num_sms);
    plan.tile = c.tile, plan.decomposition = c.d, plan.splits = c.d == Decomposition::kSplitK ? 4 : 1;
    tw::gemm_impl::streamk_order(a, {}, &plan);
    tw_test::poison(b.C.data(), b.C.bytes, s);
    tw::gemm_impl::launch_bf16_nk_streamk(a, {}, num_sms, plan, s);
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    const Bytes out = tw_test::to_host(b.C.data(), b.C.bytes, s);
    if (first[i].empty()) {
      first[i] = out;
      EXPECT_EQ(compare(c.p, refs[i], out), "");
    } else {
      EXPECT_TRUE(out == first[i]) << "differs from the first run of this shape";
    }
  }
}

// One decode-shaped call on the plan tw::gemm picks (which must name `plan_part`): every element
// against `ref` (reference(p)), then a second run into poisoned C bitwise the same.
void check_decode_call(const Problem& p, const Reference& ref, const std::string& plan_part) {
  Stream s;
  Buffers b(p);
  b.fill_and_poison(s);
  const tw::GemmArgs a = b.args();
  const std::string plan = tw::gemm_plan(a, {});
  EXPECT_NE(plan.find(plan_part), std::string::npos) << plan;
  tw::gemm(a, {}, s);
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
  EXPECT_EQ(compare(p, ref, c), "");
  tw_test::poison(b.C.data(), b.C.bytes, s);
  tw::gemm(a, {}, s);
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_TRUE(tw_test::to_host(b.C.data(), b.C.bytes, s) == c) << "second run differs from the first";
}

TEST(Gemm, DecodeShapesOnTheSwappedTile) {
  TW_SKIP_UNLESS_SM90();
  struct Shape {
    int M, N;
  };
  struct ResetPlan {
    ~ResetPlan() { tw::testing::set_gemm_plan(std::nullopt); }
  } reset;
  // The swapped 128-row tile (C^T = B A^T) through tw::gemm, forced: the rule runs it at M <= 64
  // only on grids under sms / 16 ping-pong tiles (split-K there), and at M = 65..256 in one wave.
  for (DType t : {kBf16, DType::kFloat16})
    for (Shape sh : {Shape{1, 4096}, Shape{16, 4096}, Shape{33, 4096}, Shape{64, 4096}, Shape{1, 5144},
                     Shape{33, 5144}}) {
      const Problem p{sh.M, sh.N, 4096, BLayout::kNK, Fill::kRandom, t};
      SCOPED_TRACE(p.name());
      tw::testing::set_gemm_plan(
          tw::testing::GemmPlan{tw::gemm_impl::KernelPref::kStreamK, "tile=swap128x64"});
      check_decode_call(p, reference(p), "streamk swap128x64c1");
    }
}

// The ping-pong tiles (plan.hpp k64x*swap, k128x64swappp, k128x128swappp, k128x128pp, k128x112pp),
// forced through the measurement plan: every element against the reference, and a second run
// bitwise the same (data-parallel: no reduction order).
TEST(Gemm, DecodeShapesOnThePingpongTiles) {
  TW_SKIP_UNLESS_SM90();
  struct Shape {
    int M, N;
  };
  struct ResetPlan {
    ~ResetPlan() { tw::testing::set_gemm_plan(std::nullopt); }
  } reset;
  struct Tile {
    const char* spec;       // TILEWIRE_GEMM_STREAMK_PLAN's name
    const char* described;  // describe()'s
  };
  // M = 100: several tiles along M on every 64-wide narrow side, one partial 128-wide one; M = 200:
  // two 128-row tiles of the plain ones, the second partial; M = 256: whole tiles of every narrow
  // side; N = 1032: a partial last tile of N (of 64, 112 and 128 columns).
  for (DType t : {kBf16, DType::kFloat16})
    for (Shape sh : {Shape{1, 4096}, Shape{16, 4096}, Shape{33, 5144}, Shape{64, 4096}, Shape{100, 1032},
                     Shape{200, 1032}, Shape{256, 1032}}) {
      const Problem p{sh.M, sh.N, 4096, BLayout::kNK, Fill::kRandom, t};
      const Reference ref = reference(p);  // once per shape: the host fp64 sum is the slow part
      for (Tile tile : {Tile{"swap64x16", "swap64x16pp"}, Tile{"swap64x32", "swap64x32pp"},
                        Tile{"swap64x64", "swap64x64pp"}, Tile{"swap128x64pp", "swap128x64pp"},
                        Tile{"128x128pp", "128x128pp"}, Tile{"128x112pp", "128x112pp"},
                        Tile{"swap128x128pp", "swap128x128pp"}}) {
        SCOPED_TRACE(p.name() + " " + tile.spec);
        tw::testing::set_gemm_plan(
            tw::testing::GemmPlan{tw::gemm_impl::KernelPref::kStreamK, std::string("tile=") + tile.spec});
        check_decode_call(p, ref, std::string("streamk ") + tile.described + " mode dp");
      }
    }
}

// The 256-row cooperative tiles (plan.hpp k256x160c1, k256x160c2, k256x112c1, k256x64n2), forced, data-parallel
// and stream-K (deterministic: the second run bitwise the same): M = 520 is two whole 256-row tiles
// and 8 rows (three row tiles, padded to four in 2x1 clusters), N = 1032 partial last tiles of 160
// and 112 columns, K = 1000 a partial last K tile (rows of 2000 bytes, not whole 128-byte lines).
TEST(Gemm, RaggedShapesOnTheWideTiles) {
  TW_SKIP_UNLESS_SM90();
  struct ResetPlan {
    ~ResetPlan() { tw::testing::set_gemm_plan(std::nullopt); }
  } reset;
  for (DType t : {kBf16, DType::kFloat16}) {
    const Problem p{520, 1032, 1000, BLayout::kNK, Fill::kRandom, t};
    const Reference ref = reference(p);
    for (const char* tile : {"256x160", "256x160c2", "256x112", "256x64n2"})
      for (const char* mode : {"dp", "streamk"}) {
        SCOPED_TRACE(p.name() + " " + tile + " " + mode);
        const std::string spec = std::string("tile=") + tile + ",mode=" + mode;
        tw::testing::set_gemm_plan(tw::testing::GemmPlan{tw::gemm_impl::KernelPref::kStreamK, spec});
        const std::string t = tile;
        const std::string described = t == "256x160c2" || t == "256x64n2" ? t : t + "c1";
        check_decode_call(p, ref, "streamk " + described + " mode " + mode);
      }
  }
}

// ------------------------------------------------------------------------------ custom hook
// Stores C like the default hook, and records each call: counts[tile] += 1 (one thread per CTA),
// extents[tile] = rows * 1000 + cols. Checks the contract's promises: every consumer thread sees
// the same tile (thread 0 publishes it through the hook's shared memory across the hook's named
// barrier, the others compare), and the coordinates agree with the tile indices.
struct RecordHook {
  using E = cutlass::bfloat16_t;
  struct SharedStorage {
    int tile;
  };
  tw::gemm_impl::StoreCDirect<E> store;  // no shared memory of its own: the hook's smem is RecordHook's
  int* counts = nullptr;
  int* extents = nullptr;
  int* bad_threads = nullptr;
  int tiles_n = 0;

  template <class View>
  __device__ void operator()(View const& v) const {
    store(v);
    const int t = v.tile_m * tiles_n + v.tile_n;
    if (v.thread_idx == 0) {
      atomicAdd(&counts[t], 1);
      extents[t] = v.rows * 1000 + v.cols;
      v.smem->tile = t;
    }
    cutlass::arch::NamedBarrier::sync(256, tw::gemm_impl::kHookBarrierId);
    if (v.smem->tile != t) atomicAdd(bad_threads, 1);
    cutlass::arch::NamedBarrier::sync(256, tw::gemm_impl::kHookBarrierId);  // read before the next tile's write
    if (v.row0 != v.tile_m * tw::gemm_impl::kBlkM || v.col0 != v.tile_n * tw::gemm_impl::kBlkN ||
        v.thread_idx < 0 || v.thread_idx >= 256)
      atomicAdd(bad_threads, 1);
  }
};

TEST(Gemm, HookFiresOncePerTile) {
  TW_SKIP_UNLESS_SM90();
  int num_sms = 0;
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  for (int nranks : {1, 4})
    for (int reserved : {0, 32}) {
      const Problem p{2900, 5144, 128, BLayout::kNK, Fill::kSmallInt};  // 23 M-tiles: a padding CTA
      SCOPED_TRACE(p.name() + " nranks " + std::to_string(nranks) + " reserved " + std::to_string(reserved));
      const int tiles_m = (p.M + 127) / 128, tiles_n = (p.N + 255) / 256;
      Stream s;
      Buffers b(p);
      b.fill_and_poison(s);
      DeviceBuffer counts(sizeof(int) * tiles_m * tiles_n), extents(sizeof(int) * tiles_m * tiles_n), bad(sizeof(int));
      TW_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, counts.bytes, s));
      TW_CUDA_CHECK(cudaMemsetAsync(extents.data(), 0, extents.bytes, s));
      TW_CUDA_CHECK(cudaMemsetAsync(bad.data(), 0, bad.bytes, s));

      tw::GemmConfig cfg;
      cfg.reserved_sms = reserved, cfg.rank = nranks - 1, cfg.nranks = nranks, cfg.swizzle = 2;
      const tw::GemmArgs a = b.args();
      ASSERT_TRUE(tw::can_implement(a, cfg).ok);
      RecordHook hook{{static_cast<cutlass::bfloat16_t*>(a.C), a.N},
                      static_cast<int*>(counts.data()),
                      static_cast<int*>(extents.data()),
                      static_cast<int*>(bad.data()),
                      tiles_n};
      tw::gemm_impl::run_sm90<__nv_bfloat16, BLayout::kNK>(
          a, cfg, hook, num_sms, tw::gemm_impl::resolve_raster(a, cfg, 128, 256), nullptr, s);
      TW_CUDA_CHECK(cudaStreamSynchronize(s));

      const Bytes cnt = tw_test::to_host(counts.data(), counts.bytes, s);
      const Bytes ext = tw_test::to_host(extents.data(), extents.bytes, s);
      const Bytes nbad = tw_test::to_host(bad.data(), bad.bytes, s);
      const int* cn = reinterpret_cast<const int*>(cnt.data());
      const int* ex = reinterpret_cast<const int*>(ext.data());
      EXPECT_EQ(*reinterpret_cast<const int*>(nbad.data()), 0) << "threads saw inconsistent tile coordinates";
      for (int tm = 0; tm < tiles_m; ++tm)
        for (int tn = 0; tn < tiles_n; ++tn) {
          const int t = tm * tiles_n + tn;
          ASSERT_EQ(cn[t], 1) << "tile (" << tm << "," << tn << ")";
          const int rows = std::min(128, p.M - tm * 128), cols = std::min(256, p.N - tn * 256);
          ASSERT_EQ(ex[t], rows * 1000 + cols) << "tile (" << tm << "," << tn << ")";
        }
      EXPECT_EQ(check(b, s), "");
    }
}

}  // namespace
