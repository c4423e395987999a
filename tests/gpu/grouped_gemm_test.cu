// The grouped GEMM (ops/grouped_gemm.hpp) against an fp64 host reference, on every element of C:
// padded and packed layouts, both B layouts, every tile, empty and full groups, groups of one
// row, rows past the last group; every row outside the groups stays poisoned. Bad counts write
// nothing and name the first bad group in the status; the next good call works. A captured graph
// replays with the counts it finds. No rows at all is legal when every count is 0. The row gate
// (src/ops/grouped_gemm/gate.hpp): a GEMM launched before its rows, counts and bounds exist computes
// every group right once a kernel beside it writes them source by source, in reverse order.
// The SwiGLU epilogue (GroupedEpilogue::kSwiGlu): every element of C [rows, N / 2] against
// silu(g) u from fp64 g and u, padded and packed, every tile, partial row and column tiles;
// nothing written outside the groups' rows of [rows, N / 2]; bad counts write nothing.
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/grouped_gemm/launch.hpp"  // grouped_gemm_gated, RowGate
#include "tilewire/ops/grouped_gemm.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw::GroupedEpilogue;
using tw::GroupedTile;
using tw_test::Bytes;
using tw_test::DeviceBuffer;
using tw_test::Fill;
using tw_test::Stream;

constexpr DType kBf16 = DType::kBFloat16;
constexpr uint64_t kSeedA = 31, kSeedB = 47;

// A grouped problem: the group layout on the host (counts, first rows) and its shape.
struct Problem {
  int groups, N, K;
  int rows;        // rows A and C hold
  int group_rows;  // padded; 0: packed (firsts are the offsets)
  std::vector<int> counts, firsts;
  BLayout layout = BLayout::kNK;
  GroupedEpilogue epilogue = GroupedEpilogue::kStore;
  int a_shift = 0;  // A's values are the seeded ones times 2^-a_shift (exact in bf16)
  std::string name() const {
    return std::to_string(groups) + " groups N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " rows=" + std::to_string(rows) + (group_rows ? " padded " + std::to_string(group_rows) : " packed") +
           " B=" + tw::blayout_name(layout) + " epilogue " + tw::grouped_epilogue_name(epilogue);
  }
};

// Padded: counts drawn in [0, group_rows] with the ends forced in (an empty group, a full one, one row).
Problem padded(int groups, int N, int K, int group_rows, uint64_t seed, BLayout l) {
  Problem p{groups, N, K, groups * group_rows, group_rows, {}, {}, l, GroupedEpilogue::kStore, 0};
  for (int g = 0; g < groups; ++g) {
    int c = int(tw_test::mix(seed, 0, g) % uint64_t(group_rows + 1));
    if (g == 0) c = 0;
    if (g == 1) c = group_rows;
    if (g == 2) c = 1;
    p.counts.push_back(c);
    p.firsts.push_back(g * group_rows);
  }
  return p;
}

// Packed: groups one after another with seeded gaps (rows no group owns), and spare rows at the end.
Problem packed(int groups, int N, int K, int max_rows, uint64_t seed, BLayout l) {
  Problem p{groups, N, K, 0, 0, {}, {}, l, GroupedEpilogue::kStore, 0};
  int row = 0;
  for (int g = 0; g < groups; ++g) {
    row += int(tw_test::mix(seed, 1, g) % 3);  // 0-2 rows between groups
    int c = int(tw_test::mix(seed, 0, g) % uint64_t(max_rows + 1));
    if (g == 1) c = 0;
    if (g == 2) c = max_rows;
    p.firsts.push_back(row);
    p.counts.push_back(c);
    row += c;
  }
  p.rows = row + 5;
  return p;
}

// The same layout with the SwiGLU epilogue. A scaled by 2^-8: the seeded values (|x| in [2^-4, 32))
// make g in the hundreds, where silu(g) is max(g, 0) to the last bit; scaled, g spreads over a few
// units either side of 0, across silu's curve.
Problem swiglu(Problem p) {
  p.epilogue = GroupedEpilogue::kSwiGlu;
  p.a_shift = 8;
  return p;
}

// p[i] *= 2^-shift, exact for bf16 values that stay normal (the seeded ones are >= 2^-4).
__global__ void scale_down(__nv_bfloat16* p, size_t n, int shift) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16_rn(ldexpf(__bfloat162float(p[i]), -shift));
}

struct Buffers {
  Problem p;
  DeviceBuffer A, B, C, counts, offsets, status;
  explicit Buffers(const Problem& pr)
      : p(pr),
        A(std::max<size_t>(16, size_t(pr.rows) * pr.K * 2)),
        B(size_t(pr.groups) * pr.N * pr.K * 2),
        C(std::max<size_t>(16, size_t(pr.rows) * pr.N * 2)),
        counts(size_t(pr.groups) * 4),
        offsets(size_t(pr.groups) * 4),
        status(4) {}
  void fill_and_poison(cudaStream_t s) {
    tw_test::fill(A.data(), kBf16, size_t(p.rows) * p.K, Fill::kRandom, kSeedA, 0, s);
    if (p.a_shift != 0 && p.rows > 0) {
      scale_down<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(A.data()), size_t(p.rows) * p.K, p.a_shift);
      TW_CUDA_CHECK(cudaGetLastError());
    }
    tw_test::fill(B.data(), kBf16, size_t(p.groups) * p.N * p.K, Fill::kRandom, kSeedB, 0, s);
    tw_test::poison(C.data(), C.bytes, s);
    set_counts(p.counts, s);
    TW_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), p.firsts.data(), offsets.bytes, cudaMemcpyHostToDevice, s));
    TW_CUDA_CHECK(cudaMemsetAsync(status.data(), 0x7F, 4, s));  // neither 0 nor a verdict
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void set_counts(const std::vector<int>& c, cudaStream_t s) {
    TW_CUDA_CHECK(cudaMemcpyAsync(counts.data(), c.data(), counts.bytes, cudaMemcpyHostToDevice, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  tw::GroupedGemmArgs args() const {
    tw::GroupedGemmArgs a;
    a.A = A.data(), a.B = B.data(), a.C = C.data();
    a.counts = static_cast<const int*>(counts.data());
    a.offsets = p.group_rows ? nullptr : static_cast<const int*>(offsets.data());
    a.groups = p.groups, a.N = p.N, a.K = p.K, a.rows = p.rows, a.group_rows = p.group_rows;
    a.b_layout = p.layout;
    a.epilogue = p.epilogue;
    a.status = static_cast<int*>(status.data());
    return a;
  }
  int read_status(cudaStream_t s) const {
    int v = 0;
    TW_CUDA_CHECK(cudaMemcpyAsync(&v, status.data(), 4, cudaMemcpyDeviceToHost, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    return v;
  }
};

std::string check_swiglu(const Problem& p, const std::vector<int>& counts, const Bytes& c);

// "" when every row of a group matches the fp64 reference (C = round(fp32 sum): half an ulp of
// bf16, 2^-8 |ref|, plus the fp32 accumulation bound K 2^-24 sum |a b|) and every other row is
// still poison (NaN); else the first problem. `counts` may differ from p.counts (a replay).
std::string check(const Problem& p, const std::vector<int>& counts, const Bytes& c) {
  if (p.epilogue == GroupedEpilogue::kSwiGlu) return check_swiglu(p, counts, c);
  const Bytes a_bits = tw_test::host_inputs(Fill::kRandom, kBf16, size_t(p.rows) * p.K, kSeedA, 0);
  const Bytes b_bits = tw_test::host_inputs(Fill::kRandom, kBf16, size_t(p.groups) * p.N * p.K, kSeedB, 0);
  std::vector<int> owner(size_t(p.rows), -1);
  for (int g = 0; g < p.groups; ++g)
    for (int r = 0; r < counts[g]; ++r) owner[size_t(p.firsts[g] + r)] = g;
  std::vector<double> arow(p.K), bt(size_t(p.N) * p.K);
  int bt_group = -1;
  for (int m = 0; m < p.rows; ++m) {
    const int g = owner[m];
    if (g < 0) {
      for (int n = 0; n < p.N; ++n)
        if (!std::isnan(tw_test::from_bits(kBf16, tw_test::elem(c, kBf16, size_t(m) * p.N + n))))
          return "C[" + std::to_string(m) + "," + std::to_string(n) + "] (no group's row) was written";
      continue;
    }
    if (g != bt_group) {  // B_g as [N][K]
      const size_t base = size_t(g) * p.N * p.K;
      for (int n = 0; n < p.N; ++n)
        for (int k = 0; k < p.K; ++k) {
          const size_t i = p.layout == BLayout::kNK ? size_t(n) * p.K + k : size_t(k) * p.N + n;
          bt[size_t(n) * p.K + k] = tw_test::from_bits(kBf16, tw_test::elem(b_bits, kBf16, base + i));
        }
      bt_group = g;
    }
    for (int k = 0; k < p.K; ++k)
      arow[k] = std::ldexp(tw_test::from_bits(kBf16, tw_test::elem(a_bits, kBf16, size_t(m) * p.K + k)), -p.a_shift);
    for (int n = 0; n < p.N; ++n) {
      const double* br = &bt[size_t(n) * p.K];
      double ref = 0, mag = 0;
      for (int k = 0; k < p.K; ++k) {
        ref += arow[k] * br[k];
        mag += std::fabs(arow[k] * br[k]);
      }
      const double tol = std::ldexp(std::fabs(ref), -8) + p.K * std::ldexp(mag, -24);
      const double got = tw_test::from_bits(kBf16, tw_test::elem(c, kBf16, size_t(m) * p.N + n));
      if (!(std::fabs(got - ref) <= tol))
        return "C[" + std::to_string(m) + "," + std::to_string(n) + "] (group " + std::to_string(g) + ") = " +
               std::to_string(got) + ", reference " + std::to_string(ref) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

// check() for kSwiGlu: C is [rows, N / 2] with C[m][8j + i] = silu(g) u, g = (A B)[m][16j + i],
// u = (A B)[m][16j + 8 + i]; the reference takes g and u as fp64 dot products of the bf16 inputs.
// Tolerance: the kernel's fp32 sums g~, u~ are within eg = K 2^-24 sum |a b| of g (and eu of u), as
// in check(); silu is 1.1-Lipschitz (max |silu'| = 1.0998), so
//   |silu(g~) u~ - silu(g) u| <= err = 1.1 eg (|u| + eu) + |silu(g)| eu,
// and the fp32 silu and product (a few ulps of fp32, __expf's included) and the rounding to bf16
// (half an ulp, 2^-9) stay under 2^-8 (|ref| + err): tol = err + 2^-8 (|ref| + err). In practice
// err is tiny and the bound is check()'s one bf16 ulp; err matters where silu(g) u is near 0.
// Rows outside every group, and the buffer's elements past [rows, N / 2] (it holds rows x N), must
// still be poison.
std::string check_swiglu(const Problem& p, const std::vector<int>& counts, const Bytes& c) {
  const int H = p.N / 2;  // C's columns
  const Bytes a_bits = tw_test::host_inputs(Fill::kRandom, kBf16, size_t(p.rows) * p.K, kSeedA, 0);
  const Bytes b_bits = tw_test::host_inputs(Fill::kRandom, kBf16, size_t(p.groups) * p.N * p.K, kSeedB, 0);
  auto c_at = [&](size_t i) { return tw_test::from_bits(kBf16, tw_test::elem(c, kBf16, i)); };
  for (size_t i = size_t(p.rows) * H; i < c.size() / 2; ++i)
    if (!std::isnan(c_at(i))) return "C element " + std::to_string(i) + " (past [rows, N / 2]) was written";
  std::vector<int> owner(size_t(p.rows), -1);
  for (int g = 0; g < p.groups; ++g)
    for (int r = 0; r < counts[g]; ++r) owner[size_t(p.firsts[g] + r)] = g;
  std::vector<double> arow(p.K), bt(size_t(p.N) * p.K);  // B_g [N][K] (kNK only)
  int bt_group = -1;
  for (int m = 0; m < p.rows; ++m) {
    const int g = owner[m];
    if (g < 0) {
      for (int n = 0; n < H; ++n)
        if (!std::isnan(c_at(size_t(m) * H + n)))
          return "C[" + std::to_string(m) + "," + std::to_string(n) + "] (no group's row) was written";
      continue;
    }
    if (g != bt_group) {
      const size_t base = size_t(g) * p.N * p.K;
      for (size_t i = 0; i < size_t(p.N) * p.K; ++i) bt[i] = tw_test::from_bits(kBf16, tw_test::elem(b_bits, kBf16, base + i));
      bt_group = g;
    }
    for (int k = 0; k < p.K; ++k)
      arow[k] = std::ldexp(tw_test::from_bits(kBf16, tw_test::elem(a_bits, kBf16, size_t(m) * p.K + k)), -p.a_shift);
    for (int n = 0; n < H; ++n) {
      const int gate = (n / 8) * 16 + n % 8, up = gate + 8;  // B_g's rows
      const double* bg = &bt[size_t(gate) * p.K];
      const double* bu = &bt[size_t(up) * p.K];
      double gv = 0, gmag = 0, uv = 0, umag = 0;
      for (int k = 0; k < p.K; ++k) {
        gv += arow[k] * bg[k];
        gmag += std::fabs(arow[k] * bg[k]);
        uv += arow[k] * bu[k];
        umag += std::fabs(arow[k] * bu[k]);
      }
      const double sg = gv / (1.0 + std::exp(-gv));  // -0 where exp overflows (g < -709)
      const double ref = sg * uv;
      const double eg = p.K * std::ldexp(gmag, -24), eu = p.K * std::ldexp(umag, -24);
      const double err = 1.1 * eg * (std::fabs(uv) + eu) + std::fabs(sg) * eu;
      const double tol = err + std::ldexp(std::fabs(ref) + err, -8);
      const double got = c_at(size_t(m) * H + n);
      if (!(std::fabs(got - ref) <= tol))
        return "C[" + std::to_string(m) + "," + std::to_string(n) + "] (group " + std::to_string(g) +
               ", g=" + std::to_string(gv) + ", u=" + std::to_string(uv) + ") = " + std::to_string(got) +
               ", reference " + std::to_string(ref) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

void run_and_check(const Problem& p, GroupedTile tile) {
  SCOPED_TRACE(p.name() + " tile " + tw::grouped_tile_name(tile));
  Stream s;
  Buffers b(p);
  b.fill_and_poison(s);
  tw::GroupedGemmConfig cfg;
  cfg.tile = tile;
  const tw::Status st = tw::can_implement(b.args(), cfg);
  ASSERT_TRUE(st.ok) << st.reason;
  tw::grouped_gemm(b.args(), cfg, s);
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(b.read_status(s), 0);
  EXPECT_EQ(check(p, p.counts, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
}

constexpr GroupedTile kTiles[] = {GroupedTile::k64x128pp, GroupedTile::k64x256pp, GroupedTile::k128x256coop};

TEST(GroupedGemm, PaddedLayout) {
  TW_SKIP_UNLESS_SM90();
  for (BLayout l : {BLayout::kNK, BLayout::kKN})
    for (GroupedTile t : kTiles) {
      run_and_check(padded(6, 136, 72, 40, 5, l), t);     // N, K not multiples of the tile
      run_and_check(padded(5, 520, 264, 200, 6, l), t);   // groups over one 128-row tile
    }
}

TEST(GroupedGemm, PackedLayout) {
  TW_SKIP_UNLESS_SM90();
  for (BLayout l : {BLayout::kNK, BLayout::kKN})
    for (GroupedTile t : kTiles) {
      run_and_check(packed(7, 264, 128, 150, 8, l), t);
      run_and_check(packed(40, 128, 64, 9, 9, l), t);  // more groups than a warp reads at once
    }
}

// Counts that break the layout: nothing written, the first bad group in the status; the buffers
// then take a good call.
TEST(GroupedGemm, BadCountsWriteNothing) {
  TW_SKIP_UNLESS_SM90();
  Stream s;
  for (int variant = 0; variant < 4; ++variant) {  // padded / packed x store / SwiGLU
    const bool pack = variant % 2 == 1;
    const GroupedEpilogue e = variant < 2 ? GroupedEpilogue::kStore : GroupedEpilogue::kSwiGlu;
    const Problem base = pack ? packed(6, 144, 64, 30, 3, BLayout::kNK) : padded(6, 144, 64, 30, 3, BLayout::kNK);
    const Problem p = e == GroupedEpilogue::kSwiGlu ? swiglu(base) : base;
    SCOPED_TRACE(p.name());
    Buffers b(p);
    b.fill_and_poison(s);
    std::vector<int> bad = p.counts;
    bad[3] = pack ? p.firsts[4] - p.firsts[3] + 1 : p.group_rows + 1;  // into the next group / block
    bad[5] = -1;
    b.set_counts(bad, s);
    tw::grouped_gemm(b.args(), {}, s);
    EXPECT_EQ(b.read_status(s), -(3 + 1));
    const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
    for (size_t i = 0; i < c.size() / 2; ++i)  // the whole buffer (rows x N; the SwiGLU's C is half of it)
      ASSERT_TRUE(std::isnan(tw_test::from_bits(kBf16, tw_test::elem(c, kBf16, i)))) << "C element " << i << " written";
    b.set_counts(p.counts, s);
    tw::grouped_gemm(b.args(), {}, s);
    EXPECT_EQ(b.read_status(s), 0);
    EXPECT_EQ(check(p, p.counts, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
  }
}

// SwiGLU: ragged groups (empty, full, one row; group_rows and counts not multiples of the tile's
// rows), N / 2 not a multiple of any tile's N / 2 (partial last column tile), K not a multiple of
// the tile's K. Only B [N, K] is built for it.
TEST(GroupedGemm, SwiGluPaddedLayout) {
  TW_SKIP_UNLESS_SM90();
  for (GroupedTile t : kTiles) {
    run_and_check(swiglu(padded(6, 400, 72, 40, 5, BLayout::kNK)), t);    // C 200 wide
    run_and_check(swiglu(padded(5, 528, 264, 200, 6, BLayout::kNK)), t);  // groups over one 128-row tile
    run_and_check(swiglu(padded(3, 16, 64, 8, 7, BLayout::kNK)), t);      // one gate-up block
  }
}

TEST(GroupedGemm, SwiGluPackedLayout) {
  TW_SKIP_UNLESS_SM90();
  for (GroupedTile t : kTiles) {
    run_and_check(swiglu(packed(7, 400, 128, 150, 8, BLayout::kNK)), t);
    run_and_check(swiglu(packed(40, 144, 64, 9, 9, BLayout::kNK)), t);
  }
}

// A graph captured once computes with the counts in device memory at each replay.
TEST(GroupedGemm, GraphReplayReadsTheCounts) {
  TW_SKIP_UNLESS_SM90();
  Stream s;
  const Problem p = padded(8, 264, 128, 64, 12, BLayout::kNK);
  Buffers b(p);
  b.fill_and_poison(s);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  tw::grouped_gemm(b.args(), {}, s);
  TW_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  TW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    std::vector<int> counts = p.counts;
    for (int g = 0; g < p.groups; ++g) counts[g] = int(tw_test::mix(100 + replay, 0, g) % uint64_t(p.group_rows + 1));
    b.set_counts(counts, s);
    tw_test::poison(b.C.data(), b.C.bytes, s);
    TW_CUDA_CHECK(cudaGraphLaunch(exec, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    SCOPED_TRACE("replay " + std::to_string(replay));
    EXPECT_EQ(b.read_status(s), 0);
    EXPECT_EQ(check(p, counts, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A rank that received no rows: null A and C, rows 0, every count 0.
TEST(GroupedGemm, NoRows) {
  TW_SKIP_UNLESS_SM90();
  Stream s;
  DeviceBuffer B(size_t(4) * 64 * 64 * 2), counts(16), status(4);
  TW_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, 16, s));
  TW_CUDA_CHECK(cudaMemsetAsync(status.data(), 0x7F, 4, s));
  tw::GroupedGemmArgs a;
  a.B = B.data(), a.counts = static_cast<const int*>(counts.data()), a.status = static_cast<int*>(status.data());
  a.groups = 4, a.N = 64, a.K = 64;
  tw::grouped_gemm(a, {}, s);
  int v = 1;
  TW_CUDA_CHECK(cudaMemcpyAsync(&v, status.data(), 4, cudaMemcpyDeviceToHost, s));
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(v, 0);
}

TEST(GroupedGemm, BadArgumentsThrow) {
  TW_SKIP_UNLESS_SM90();
  Stream s;
  Buffers b(padded(4, 64, 64, 16, 1, BLayout::kNK));
  b.fill_and_poison(s);
  tw::GroupedGemmArgs a = b.args();
  a.K = 60;  // rows not 16-byte multiples
  EXPECT_THROW(tw::grouped_gemm(a, {}, s), tw::Error);
  a = b.args();
  a.group_rows = 17;  // 4 x 17 rows > rows
  EXPECT_THROW(tw::grouped_gemm(a, {}, s), tw::Error);
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  const Bytes c = tw_test::to_host(b.C.data(), b.C.bytes, s);
  for (size_t i = 0; i < size_t(b.p.rows) * b.p.N; ++i)
    ASSERT_TRUE(std::isnan(tw_test::from_bits(kBf16, tw_test::elem(c, kBf16, i)))) << "C element " << i << " written";
}

// ------------------------------------------------------------------------------ the row gate
// A kernel beside the gated GEMM plays the receive: it first writes the counts, offsets and
// bounds and raises the layout flag, then, for s = S - 1 down to 0, waits `delay_ns`, copies
// source s's rows of every group from the staging copy into A (poisoned until then) and raises
// flags[s] to `want`. One CTA; segs: [n][3] = source, first row, rows.
__global__ void release_sources(const uint16_t* staged, uint16_t* A, int K, const int* segs, int nseg, int S,
                                const int* layout_src, int* layout_dst, int layout_ints, uint64_t* layout_flag,
                                uint64_t* flags, uint64_t want, uint64_t delay_ns) {
  for (int i = threadIdx.x; i < layout_ints; i += blockDim.x) layout_dst[i] = layout_src[i];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) tw::ptx::st_release_sys(layout_flag, want);
  for (int s = S - 1; s >= 0; --s) {
    const uint64_t t0 = tw::ptx::globaltimer();
    while (tw::ptx::globaltimer() - t0 < delay_ns) {
    }
    for (int i = 0; i < nseg; ++i) {
      if (segs[3 * i] != s) continue;
      const size_t first = size_t(segs[3 * i + 1]) * K, n = size_t(segs[3 * i + 2]) * K;
      for (size_t e = threadIdx.x; e < n; e += blockDim.x) A[first + e] = staged[first + e];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) tw::ptx::st_release_sys(flags + s, want);
  }
}

TEST(GroupedGemm, RowGateWaitsForEachSource) {
  TW_SKIP_UNLESS_SM90();
  constexpr int S = 3;
  const std::pair<BLayout, GroupedTile> runs[] = {{BLayout::kNK, GroupedTile::k64x128pp},
                                                  {BLayout::kNK, GroupedTile::k128x256coop},
                                                  {BLayout::kKN, GroupedTile::k128x256coop}};
  for (const auto& [layout, tile] : runs) {
    const Problem p = packed(6, 264, 128, 300, 21, layout);
    SCOPED_TRACE(p.name() + " tile " + tw::grouped_tile_name(tile));
    Stream s, side;
    Buffers b(p);
    b.fill_and_poison(s);
    // Each group's rows cut into S source blocks at seeded points (some empty); segments of A.
    std::vector<int> bounds, segs;
    for (int g = 0; g < p.groups; ++g) {
      int cut[S + 1] = {0};
      for (int q = 1; q < S; ++q) cut[q] = int(tw_test::mix(77, g, q) % uint64_t(p.counts[g] + 1));
      cut[S] = p.counts[g];
      std::sort(cut + 1, cut + S);
      for (int q = 0; q <= S; ++q) bounds.push_back(cut[q]);
      for (int q = 0; q < S; ++q)
        if (cut[q + 1] > cut[q]) segs.insert(segs.end(), {q, p.firsts[g] + cut[q], cut[q + 1] - cut[q]});
    }
    // The layout the side kernel publishes: counts, offsets, bounds (one array, copied at once).
    std::vector<int> layout = p.counts;
    layout.insert(layout.end(), p.firsts.begin(), p.firsts.end());
    layout.insert(layout.end(), bounds.begin(), bounds.end());
    DeviceBuffer staged(b.A.bytes), seg_d(segs.size() * 4 + 4), layout_src(layout.size() * 4),
        layout_dst(layout.size() * 4), flags((S + 1) * 8);
    TW_CUDA_CHECK(cudaMemcpyAsync(staged.data(), b.A.data(), b.A.bytes, cudaMemcpyDeviceToDevice, s));
    tw_test::upload(seg_d.data(), segs, s);
    tw_test::upload(layout_src.data(), layout, s);
    tw_test::poison(b.A.data(), b.A.bytes, s);
    TW_CUDA_CHECK(cudaMemsetAsync(layout_dst.data(), 0x7F, layout_dst.bytes, s));  // not a layout
    TW_CUDA_CHECK(cudaMemsetAsync(flags.data(), 0, flags.bytes, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    int* dst = static_cast<int*>(layout_dst.data());
    auto* f = static_cast<uint64_t*>(flags.data());
    tw::GroupedGemmArgs a = b.args();
    a.counts = dst, a.offsets = dst + p.groups;
    tw::grouped_impl::RowGate gate;
    gate.flags = f, gate.bounds = dst + 2 * p.groups, gate.sources = S, gate.want = 5, gate.layout_flag = f + S;
    gate.ctx.timeout_ns = 20'000'000'000ull;
    tw::GroupedGemmConfig cfg;
    cfg.tile = tile;
    cfg.reserved_sms = 2;  // the side kernel's SM
    // Loaded before the GEMM's preparation spins (a lazy module load would wait for the device).
    cudaFuncAttributes attr{};
    TW_CUDA_CHECK(cudaFuncGetAttributes(&attr, release_sources));
    tw::grouped_impl::grouped_gemm_gated(a, cfg, gate, s);
    release_sources<<<1, 256, 0, side>>>(static_cast<const uint16_t*>(staged.data()), static_cast<uint16_t*>(b.A.data()),
                                         p.K, static_cast<const int*>(seg_d.data()), int(segs.size() / 3), S,
                                         static_cast<const int*>(layout_src.data()), dst, int(layout.size()), f + S, f,
                                         gate.want, 200'000);
    TW_CUDA_CHECK(cudaGetLastError());
    TW_CUDA_CHECK(cudaStreamSynchronize(side));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(b.read_status(s), 0);
    EXPECT_EQ(check(p, p.counts, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
    // The flags already at `want`: the gate passes at once.
    tw_test::poison(b.C.data(), b.C.bytes, s);
    tw::grouped_impl::grouped_gemm_gated(a, cfg, gate, s);
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(check(p, p.counts, tw_test::to_host(b.C.data(), b.C.bytes, s)), "");
  }
}

}  // namespace
