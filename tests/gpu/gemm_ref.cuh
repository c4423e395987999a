// tests/gpu/gemm_ref.cuh — the fused GEMM + all-reduce tests' reference, computed on the GPU
// independently of the library (plain CUDA: no CUTLASS, no tensor cores), and the element-by-
// element check of C against it. For every (m, n) of C [M, N], over the ranks q of the team:
//
//   ref (m, n) = sum_q  sum_k A_q[m, k] * B_q(n, k)        the exact result, in fp32
//   mag (m, n) = sum_q  sum_k |A_q[m, k] * B_q(n, k)|      what fp32 accumulation error scales with
//   absp(m, n) = sum_q |sum_k A_q[m, k] * B_q(n, k)|       what rounding each partial scales with
//
// A_q [M, K] and B_q ([N, K] kNK or [K, N] kKN, row-major) are regenerated with the same seeded
// fill each rank ran (tw_test::fill, Fill::kRandom, rank q, in the call's dtype: bf16 or fp16),
// one rank at a time into one pair of buffers: memory is three fp32 [M, N] sums, a 16-bit copy
// of C and one rank's inputs.
//
// The GEMM: a (128, 128) tile of C per CTA, 256 threads, each an 8 x 8 register block (rows
// tm + 16 i, columns tn + 16 j), k-steps of 16 through shared memory, the next step's inputs
// held in registers while this one is computed, fp32 FMA. The inputs are bf16 (8 significand
// bits) or fp16 (11), so every product a * b (at most 22 significand bits) is exact in fp32;
// only the sums round.
// Measured on one H200 (bf16): 8192 x 8192 x 4096 summed over 8 ranks in 0.37 s (fills
// included), the check of its C in 0.1 s.
//
// Tolerance of C against ref, per element — the op's worst case, K = K_local, P ranks, u the unit
// roundoff of C's dtype (2^-8 bf16, 2^-11 fp16):
//   K 2^-24 mag          fp32 accumulation of K products on each rank
//   + u absp             each rank's partial rounded to C's dtype (2-byte partials only)
//   + u |ref|            the final rounding to C's dtype
//   + (P + 1) 2^-25      fp16 only (2^-25 with fp32 partials): a rounding in fp16's subnormal
//                        range (below 2^-14) is off by up to half its spacing 2^-24, not u times
//                        the value (bf16's subnormals lie below 2^-126: nothing to add)
// The reference's own fp32 error (a random walk, about sqrt(K) 2^-24 times the running sums for
// these random inputs) is far inside the first term. NaN (the poison: never written) is wrong,
// and so is an infinity: fp16's largest finite value is 65504, and the random inputs' products
// have an RMS of about 88, so |C| has a standard deviation of about 88 sqrt(P K); fp16 cases
// keep P K small enough (P K <= 8 x 520: about 5700) that no partial or sum leaves the range.
//
// All work runs on GPU 0 on a stream of this object's own, with stream syncs only (virtual ranks
// share the GPU; no device-wide sync): use it once no kernel of the op under test can still run,
// i.e. after run_team() returned.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "common.cuh"
#include "tilewire/ops/gemm.hpp"  // tw::BLayout

namespace tw_test {

namespace gemm_ref_detail {

using bf16 = __nv_bfloat16;

inline constexpr int kBlkM = 128, kBlkN = 128, kBlkK = 16;            // C tile per CTA; k-step
inline constexpr int kThrM = 8, kThrN = 8;                            // C elements per thread
inline constexpr int kGridM = kBlkM / kThrM, kGridN = kBlkN / kThrN;  // 16 x 16 threads
inline constexpr int kThreads = kGridM * kGridN;
inline constexpr int kLoadA = kBlkM * kBlkK / kThreads, kLoadB = kBlkN * kBlkK / kThreads;  // per thread, per step
// Row pitch of the shared tiles: 2 mod 32 words, so the transposed stores of a warp (16 k of
// row m, 16 k of row m + 1) hit 32 distinct banks.
inline constexpr int kPitchM = kBlkM + 2, kPitchN = kBlkN + 2;
static_assert(kThreads == 256, "the launch bounds and the check's grid assume 256 threads");
static_assert(kLoadA * kThreads == kBlkM * kBlkK && kLoadB * kThreads == kBlkN * kBlkK, "whole tiles per step");
static_assert(kPitchM % 32 == 2 && kPitchN % 32 == 2, "conflict-free transposed stores");

// The roundings of C's dtype: u, the unit roundoff; tiny, the most a rounding in its subnormal
// range is off by (0 where that range is far below any value here).
struct Rounding {
  float u = 0, tiny = 0;
};
inline Rounding rounding_of(tw::DType t) {
  if (t == tw::DType::kFloat16) return {1.0f / 2048.0f, 1.0f / 33554432.0f};  // 2^-11, 2^-25
  return {1.0f / 256.0f, 0.0f};                                               // bf16: 2^-8
}

// Tolerance of one element of C (see the top of this file); the same expression on host and
// device. hops16: roundings of a partial sum to 2 bytes (C's dtype) before the final sum, 0 with
// fp32 partials (partial_hops in gemm_allreduce_cases.hpp); P: the ranks summed.
TW_TEST_HD float tolerance(float ref, float mag, float absp, int K, int P, int hops16, Rounding r) {
  constexpr float k2m24 = 1.0f / 16777216.0f;
  return (float)K * (mag * k2m24) + (hops16 > 0 ? (float)hops16 * absp * r.u + (float)P * r.tiny : 0.0f) +
         fabsf(ref) * r.u + r.tiny;
}

__device__ __forceinline__ float as_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float as_float(__half x) { return __half2float(x); }

// Adds rank q's A_q * B_q to the sums (first: q == 0, the sums start at zero). sums = ref, mag,
// absp, each [M, N] row-major, one after the other. T: bf16 or __half.
template <class T, tw::BLayout L>
__global__ void __launch_bounds__(kThreads) accumulate_rank(const T* __restrict__ A, const T* __restrict__ B, int M,
                                                            int N, int K, bool first, float* __restrict__ sums) {
  __shared__ float sa[kBlkK][kPitchM];  // sa[k][m] = A[m0 + m, k0 + k]
  __shared__ float sb[kBlkK][kPitchN];  // sb[k][n] = B(n0 + n, k0 + k)
  const int tid = threadIdx.x, tn = tid % kGridN, tm = tid / kGridN;
  const int m0 = blockIdx.y * kBlkM, n0 = blockIdx.x * kBlkN;

  // Element e = tid + l * 256 of a step's A tile is (m, k) = (e / 16, e % 16): a row's 16 k are
  // adjacent in memory. B [N, K] the same; B [K, N] along n: (k, n) = (e / 128, e % 128).
  float na[kLoadA], nb[kLoadB];  // the next step's inputs (0 outside the matrices)
  auto fetch = [&](int k0) {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int e = tid + l * kThreads, m = m0 + e / kBlkK, k = k0 + e % kBlkK;
      na[l] = m < M && k < K ? as_float(A[(size_t)m * K + k]) : 0.0f;
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int e = tid + l * kThreads;
      if constexpr (L == tw::BLayout::kNK) {
        const int n = n0 + e / kBlkK, k = k0 + e % kBlkK;
        nb[l] = n < N && k < K ? as_float(B[(size_t)n * K + k]) : 0.0f;
      } else {
        const int k = k0 + e / kBlkN, n = n0 + e % kBlkN;
        nb[l] = n < N && k < K ? as_float(B[(size_t)k * N + n]) : 0.0f;
      }
    }
  };
  auto stage = [&] {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int e = tid + l * kThreads;
      sa[e % kBlkK][e / kBlkK] = na[l];
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int e = tid + l * kThreads;
      if constexpr (L == tw::BLayout::kNK)
        sb[e % kBlkK][e / kBlkK] = nb[l];
      else
        sb[e / kBlkN][e % kBlkN] = nb[l];
    }
  };

  float p[kThrM][kThrN], g[kThrM][kThrN];  // sum a b and sum |a b| of this thread's 8 x 8 elements
#pragma unroll
  for (int i = 0; i < kThrM; ++i)
#pragma unroll
    for (int j = 0; j < kThrN; ++j) p[i][j] = g[i][j] = 0.0f;

  fetch(0);
  for (int k0 = 0; k0 < K; k0 += kBlkK) {
    __syncthreads();  // every thread is done reading the previous step
    stage();
    __syncthreads();
    if (k0 + kBlkK < K) fetch(k0 + kBlkK);  // in flight while this step is computed
#pragma unroll
    for (int k = 0; k < kBlkK; ++k) {
      float a[kThrM], b[kThrN];
#pragma unroll
      for (int i = 0; i < kThrM; ++i) a[i] = sa[k][tm + kGridM * i];  // 2 addresses per warp: broadcast
#pragma unroll
      for (int j = 0; j < kThrN; ++j) b[j] = sb[k][tn + kGridN * j];  // 16 consecutive words per warp
#pragma unroll
      for (int i = 0; i < kThrM; ++i)
#pragma unroll
        for (int j = 0; j < kThrN; ++j) {
          p[i][j] = fmaf(a[i], b[j], p[i][j]);
          g[i][j] = fmaf(fabsf(a[i]), fabsf(b[j]), g[i][j]);
        }
    }
  }

  const size_t mn = (size_t)M * N;
#pragma unroll
  for (int i = 0; i < kThrM; ++i) {
    const int m = m0 + tm + kGridM * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < kThrN; ++j) {
      const int n = n0 + tn + kGridN * j;
      if (n >= N) continue;
      const size_t x = (size_t)m * N + n;
      sums[x] = (first ? 0.0f : sums[x]) + p[i][j];
      sums[mn + x] = (first ? 0.0f : sums[mn + x]) + g[i][j];
      sums[2 * mn + x] = (first ? 0.0f : sums[2 * mn + x]) + fabsf(p[i][j]);
    }
  }
}

struct CheckResult {
  unsigned long long wrong;  // elements of C out of tolerance (NaN included)
  unsigned long long first;  // the lowest such index, ~0 when none
};

// Counts the elements of C (T = bf16 or __half) that are not within tolerance() of the reference.
template <class T>
__global__ void count_wrong(const T* __restrict__ c, const float* __restrict__ sums, size_t mn, int K, int P,
                            int hops16, Rounding rnd, CheckResult* out) {
  unsigned long long bad = 0, first = ~0ull;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < mn; i += (size_t)gridDim.x * blockDim.x) {
    const float got = as_float(c[i]), ref = sums[i];
    if (!(fabsf(got - ref) <= tolerance(ref, sums[mn + i], sums[2 * mn + i], K, P, hops16, rnd)) && bad++ == 0)
      first = i;  // a thread's indices ascend: its first is its lowest
  }
  if (bad) {
    atomicAdd(&out->wrong, bad);
    atomicMin(&out->first, first);
  }
}

// The reference's one runtime dtype -> element type dispatch (bf16 or fp16: the fused op's dtypes).
template <class F>
void with_half_type(tw::DType t, F&& f) {
  if (t == tw::DType::kFloat16)
    f(__half{});
  else
    f(bf16{});
}

inline std::string num(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.9g", v);
  return s;
}

}  // namespace gemm_ref_detail

// The reference sums of one (shape, B layout, team size, seeds, dtype), kept until another is
// asked for: a test that checks several algorithms on one shape computes it once.
class GemmReference {
 public:
  struct Key {
    int M = 0, N = 0, K = 0;  // K: K_local
    tw::BLayout b = tw::BLayout::kNK;
    int P = 0;  // ranks summed
    uint64_t seed_a = 0, seed_b = 0;
    tw::DType dtype = tw::DType::kBFloat16;  // A, B and C: bf16 or fp16
    bool operator==(const Key&) const = default;
  };

  // Computes the sums for `k` unless they are the ones held. Returns when they are done.
  void prepare(const Key& k) {
    namespace d = gemm_ref_detail;
    TW_CUDA_CHECK(cudaSetDevice(0));
    if (held_ && key_ == k) return;
    if (k.dtype != tw::DType::kBFloat16 && k.dtype != tw::DType::kFloat16)
      throw std::invalid_argument(std::string("GemmReference: dtype ") + tw::dtype_name(k.dtype) + " (bf16 or fp16)");
    held_ = false;
    if (!st_) st_ = std::make_unique<Stream>();
    if (!result_) result_ = std::make_unique<DeviceBuffer>(sizeof(d::CheckResult));
    const size_t mn = (size_t)k.M * k.N;
    sums_.reset();  // the previous shape's buffers go before the new ones come
    c_.reset();
    sums_ = std::make_unique<DeviceBuffer>(3 * mn * sizeof(float));
    c_ = std::make_unique<DeviceBuffer>(mn * 2);
    DeviceBuffer a((size_t)k.M * k.K * 2), b((size_t)k.N * k.K * 2);  // 2 bytes per element, both dtypes
    const dim3 grid((k.N + d::kBlkN - 1) / d::kBlkN, (k.M + d::kBlkM - 1) / d::kBlkM);
    auto* sums = static_cast<float*>(sums_->data());
    for (int q = 0; q < k.P; ++q) {
      // Rank q's inputs, as run_rank filled them; the same stream orders this fill after the
      // previous rank's GEMM has read the buffers.
      fill(a.data(), k.dtype, (size_t)k.M * k.K, Fill::kRandom, k.seed_a, q, *st_);
      fill(b.data(), k.dtype, (size_t)k.N * k.K, Fill::kRandom, k.seed_b, q, *st_);
      d::with_half_type(k.dtype, [&](auto tag) {
        using T = decltype(tag);
        const auto* pa = static_cast<const T*>(a.data());
        const auto* pb = static_cast<const T*>(b.data());
        if (k.b == tw::BLayout::kNK)
          d::accumulate_rank<T, tw::BLayout::kNK><<<grid, d::kThreads, 0, *st_>>>(pa, pb, k.M, k.N, k.K, q == 0, sums);
        else
          d::accumulate_rank<T, tw::BLayout::kKN><<<grid, d::kThreads, 0, *st_>>>(pa, pb, k.M, k.N, k.K, q == 0, sums);
      });
      TW_CUDA_CHECK(cudaGetLastError());
    }
    TW_CUDA_CHECK(cudaStreamSynchronize(*st_));  // before a and b are freed
    key_ = k;
    held_ = true;
  }

  // "" when every element of `c` (a host copy of C [M, N] in the prepared dtype) is within
  // tolerance of the reference prepared last, else how many are not and the first of them.
  // partials16: the call's partials were 2-byte (PartialPrecision::kBFloat16: C's dtype), each
  // partial sum rounded `hops` times (partial_hops).
  std::string check(const Bytes& c, bool partials16, int hops = 1) {
    const int hops16 = partials16 ? hops : 0;
    namespace d = gemm_ref_detail;
    if (!held_) return "no reference prepared";
    TW_CUDA_CHECK(cudaSetDevice(0));
    const size_t mn = (size_t)key_.M * key_.N;
    if (c.size() != mn * 2) return "C has " + std::to_string(c.size()) + " bytes, expected " + std::to_string(mn * 2);
    const d::Rounding rnd = d::rounding_of(key_.dtype);
    auto* res = static_cast<d::CheckResult*>(result_->data());
    TW_CUDA_CHECK(cudaMemcpyAsync(c_->data(), c.data(), c.size(), cudaMemcpyHostToDevice, *st_));
    TW_CUDA_CHECK(cudaMemsetAsync(&res->wrong, 0, sizeof res->wrong, *st_));
    TW_CUDA_CHECK(cudaMemsetAsync(&res->first, 0xFF, sizeof res->first, *st_));
    const int grid = (int)std::min<size_t>((mn + d::kThreads - 1) / d::kThreads, 2048);
    const auto* sums = static_cast<const float*>(sums_->data());
    d::with_half_type(key_.dtype, [&](auto tag) {
      using T = decltype(tag);
      d::count_wrong<T><<<grid, d::kThreads, 0, *st_>>>(static_cast<const T*>(c_->data()), sums, mn, key_.K, key_.P,
                                                        hops16, rnd, res);
    });
    TW_CUDA_CHECK(cudaGetLastError());
    d::CheckResult r{};
    TW_CUDA_CHECK(cudaMemcpyAsync(&r, res, sizeof r, cudaMemcpyDeviceToHost, *st_));
    TW_CUDA_CHECK(cudaStreamSynchronize(*st_));
    if (r.wrong == 0) return "";
    float v[3];  // ref, mag, absp at the first wrong element
    for (int s = 0; s < 3; ++s)
      TW_CUDA_CHECK(cudaMemcpyAsync(&v[s], sums + s * mn + r.first, sizeof(float), cudaMemcpyDeviceToHost, *st_));
    TW_CUDA_CHECK(cudaStreamSynchronize(*st_));
    const double got = from_bits(key_.dtype, elem(c, key_.dtype, r.first));
    const size_t m = r.first / key_.N, n = r.first % key_.N;
    return std::to_string(r.wrong) + " of " + std::to_string(mn) + " elements of C wrong; first C[" +
           std::to_string(m) + "," + std::to_string(n) + "] = " + d::num(got) + ", reference " + d::num(v[0]) +
           " (tolerance " + d::num(d::tolerance(v[0], v[1], v[2], key_.K, key_.P, hops16, rnd)) + ", sum |a b| " +
           d::num(v[1]) + ", " + tw::dtype_name(key_.dtype) + ")" + (std::isnan(got) ? " (NaN: never written?)" : "") +
           (std::isinf(got) ? " (out of the dtype's range)" : "");
  }

 private:
  Key key_{};
  bool held_ = false;
  std::unique_ptr<Stream> st_;                       // made on GPU 0 at the first prepare()
  std::unique_ptr<DeviceBuffer> sums_, c_, result_;  // ref | mag | absp; C under check; CheckResult
};

}  // namespace tw_test
