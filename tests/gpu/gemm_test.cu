// GEMM on one Hopper GPU (ops/gemm.hpp) against an fp64 host reference: small and odd shapes,
// both B layouts, poisoned outputs (an unwritten element stays NaN and fails), bad inputs write
// nothing, and a custom epilogue hook that records every tile it is called for (exactly once each,
// with the right extents) under rank rotation and reserved SMs.
//
// This file instantiates one more kernel (bf16, kNK, RecordHook): the third of the build.
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/gemm/gemm_sm90.cuh"
#include "ops/gemm/plan.hpp"
#include "tilewire/ops/gemm.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw_test::Bytes;
using tw_test::DeviceBuffer;
using tw_test::Fill;
using tw_test::Stream;

constexpr DType kT = DType::kBFloat16;
constexpr uint64_t kSeedA = 11, kSeedB = 23;


struct Problem {
  int M, N, K;
  BLayout layout;
  Fill fill;
  std::string name() const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " B=" + tw::blayout_name(layout) +
           (fill == Fill::kSmallInt ? " small-int" : " random");
  }
};

// Device inputs of a problem, filled from seeds; C poisoned (0xFFFF = bf16 NaN).
struct Buffers {
  Problem p;
  DeviceBuffer A, B, C;
  explicit Buffers(const Problem& pr)
      : p(pr), A(size_t(pr.M) * pr.K * 2), B(size_t(pr.N) * pr.K * 2), C(size_t(pr.M) * pr.N * 2) {}
  void fill_and_poison(cudaStream_t s) {
    tw_test::fill(A.data(), kT, size_t(p.M) * p.K, p.fill, kSeedA, 0, s);
    tw_test::fill(B.data(), kT, size_t(p.N) * p.K, p.fill, kSeedB, 0, s);
    tw_test::poison(C.data(), C.bytes, s);
  }
  tw::GemmArgs args() const { return tw::GemmArgs{A.data(), B.data(), C.data(), p.M, p.N, p.K, kT, p.layout}; }
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

// "" when C matches the fp64 reference on the checked rows and holds no poison anywhere, else the
// first problem. Bound per element (C = round_bf16(fp32 sum)): half a bf16 ulp of the result,
// 2^-8 |ref|, plus the worst-case fp32 accumulation error K * 2^-24 * sum_k |a_k b_k|.
std::string check(const Buffers& b, cudaStream_t s) {
  const Problem& p = b.p;
  const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
  for (size_t i = 0; i < size_t(p.M) * p.N; ++i)
    if (std::isnan(tw_test::from_bits(kT, tw_test::elem(c, kT, i))))
      return "C[" + std::to_string(i / p.N) + "," + std::to_string(i % p.N) + "] is NaN (never written?)";
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
  for (int m : rows_to_check(p.M)) {
    for (int k = 0; k < p.K; ++k) arow[k] = tw_test::from_bits(kT, tw_test::elem(a_bits, kT, size_t(m) * p.K + k));
    for (int n = 0; n < p.N; ++n) {
      const float* br = &bt[size_t(n) * p.K];
      double ref = 0, mag = 0;
      for (int k = 0; k < p.K; ++k) {
        ref += arow[k] * br[k];
        mag += std::fabs(arow[k] * br[k]);
      }
      const double got = tw_test::from_bits(kT, tw_test::elem(c, kT, size_t(m) * p.N + n));
      const double tol = std::ldexp(std::fabs(ref), -8) + p.K * std::ldexp(mag, -24);
      if (!(std::fabs(got - ref) <= tol))
        return "C[" + std::to_string(m) + "," + std::to_string(n) + "] = " + std::to_string(got) + ", reference " +
               std::to_string(ref) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
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
