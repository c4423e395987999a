// bench/ep_ll_ceiling.cu — the pieces of a low-latency dispatch's row phase on one GPU, in plain
// CUDA (no tilewire): what a copy of T x k rows costs in each shape the design can take, so that
// the send kernel's time can be read against them (docs/ep.md).
//
// T tokens of hidden H (bf16) choose k distinct experts of E each (seeded, uniform). Row i =
// (token i / k, slot i % k) goes to the receive row of its expert:
//   padded: row e x cap + pos (cap = P x T rows per expert, the buffer's layout at P ranks:
//           the rows spread over E x cap x 2H bytes of address space);
//   packed: row start(e) + pos (the rows of all experts back to back).
// Items (the work of one warp): pair-major (a (row, part) per warp: the token's row is read once
// per expert, from L2 after the first; optionally two items' loads in flight before either is
// stored), token-major (a (token, part) per warp: loaded once, stored k times), or token-major
// by the CTA's bulk copies (TMA: a row loaded into shared memory once, stored k times). A CTA ends with no fence, a GPU-scope fence + release flag, or a system-scope
// fence + release flag (what a peer over NVLink needs). "+recv" adds the receive kernel's floor:
// a second kernel, launched with programmatic dependent launch, whose CTA 0 acquires every flag.
// Baselines from the same run: cudaMemcpyAsync of the same bytes contiguously, an empty kernel,
// and two empty kernels chained with programmatic dependent launch.
//
// Usage (GPU machine): ep_ll_ceiling [json path]   (env: T, H, K, E, P for another shape)
// Times: per call, the median over 7 repeats of 20 calls back to back (CUDA events).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32, kUnroll = 8;

enum Fence : int { kNoFence = 0, kGpuFence = 1, kSysFence = 2 };

struct Rows {
  const char* x;         // [T][H] bf16
  char* dst;             // receive rows, row_bytes each
  const int* row_of;     // [T k]: the receive row of (token, slot)
  unsigned long long* flags;  // [grid]
  unsigned long long epoch;
  int T, k, chunks, parts;   // chunks: 16-byte units of a bf16 row
  int fence, fp8;
  size_t row_bytes;          // bf16: 2H; fp8: H (+ the scales, not written here)
};

__device__ __forceinline__ uint4 ld_nc(const char* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// e4m3 of 8 bf16 values, scaled by the amax of the half-warp's 128 columns (as the send does).
__device__ __forceinline__ uint2 quantize(uint4 v) {
  const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
  float f[8], amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[i] = __uint_as_float((i % 2 ? wd[i / 2] >> 16 : wd[i / 2] & 0xffffu) << 16);
    amax = fmaxf(amax, fabsf(f[i]));
  }
#pragma unroll
  for (int o = 8; o >= 1; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
  uint32_t q[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float s = fminf(fmaxf(f[i] * inv, -448.0f), 448.0f);
    // Truncating float -> e4m3 by bits is enough for a cost probe (the product rounds).
    const uint32_t b = __float_as_uint(s);
    const uint32_t sign = b >> 31, ex = (b >> 23) & 0xff, man = (b >> 20) & 7;
    const uint32_t e8 = ex > 120 ? min(ex - 120, 15u) : 0u;
    q[i / 4] |= ((sign << 7) | (e8 << 3) | man) << (8 * (i % 4));
  }
  return make_uint2(q[0], q[1]);
}

__device__ __forceinline__ void end_cta(const Rows& r) {
  if (r.fence == kNoFence) return;
  if (r.fence == kSysFence) __threadfence_system();
  else __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    if (r.fence == kSysFence)
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(r.flags + blockIdx.x), "l"(r.epoch) : "memory");
    else
      asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(r.flags + blockIdx.x), "l"(r.epoch) : "memory");
  }
}

// A warp per (row, part): the token's bf16 chunks [c_begin, c_begin + n) into the row.
__global__ void __launch_bounds__(kThreads) pair_major(const Rows r) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = ((r.chunks + r.parts - 1) / r.parts + 15) / 16 * 16;
  for (int it = blockIdx.x + warp * gridDim.x; it < r.T * r.k * r.parts; it += gridDim.x * kWarps) {
    const int i = it / r.parts, part = it % r.parts;
    const int c_begin = min(r.chunks, part * per), n = min(r.chunks, c_begin + per) - c_begin;
    const char* src = r.x + (size_t)(i / r.k) * r.chunks * 16 + (size_t)c_begin * 16;
    char* to = r.dst + (size_t)r.row_of[i] * r.row_bytes + (size_t)c_begin * (r.fp8 ? 8 : 16);
    for (int c0 = 0; c0 < n; c0 += 32 * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + 32 * u + lane;
        v[u] = c < n ? ld_nc(src + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (c0 + 32 * u >= n) break;
        const int c = c0 + 32 * u + lane;
        if (r.fp8) {
          const uint2 q = quantize(v[u]);
          if (c < n) *reinterpret_cast<uint2*>(to + (size_t)c * 8) = q;
        } else if (c < n) {
          *reinterpret_cast<uint4*>(to + (size_t)c * 16) = v[u];
        }
      }
    }
  }
  end_cta(r);
}

// pair_major with two items in flight per warp: the loads of items it and it + stride (up to
// kUnroll chunks per lane each: parts >= 4 at H 7168) are all issued before either is stored,
// so a warp with two items waits for one round of loads instead of two.
__global__ void __launch_bounds__(kThreads) pair_major_2inflight(const Rows r) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = ((r.chunks + r.parts - 1) / r.parts + 15) / 16 * 16;
  const int items = r.T * r.k * r.parts, stride = gridDim.x * kWarps;
  for (int it0 = blockIdx.x + warp * gridDim.x; it0 < items; it0 += 2 * stride) {
    uint4 v[2][kUnroll];
    int n[2], c_begin[2];
    const char* src[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int it = it0 + h * stride;
      const int i = it / r.parts, part = it % r.parts;
      c_begin[h] = min(r.chunks, part * per);
      n[h] = it < items ? min(r.chunks, c_begin[h] + per) - c_begin[h] : 0;
      src[h] = r.x + (size_t)(i / r.k) * r.chunks * 16 + (size_t)c_begin[h] * 16;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = 32 * u + lane;
        v[h][u] = c < n[h] ? ld_nc(src[h] + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (n[h] == 0) break;
      const int it = it0 + h * stride;
      char* to = r.dst + (size_t)r.row_of[it / r.parts] * r.row_bytes + (size_t)c_begin[h] * 16;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = 32 * u + lane;
        if (c < n[h]) *reinterpret_cast<uint4*>(to + (size_t)c * 16) = v[h][u];
      }
    }
  }
  end_cta(r);
}

// A warp per (token, part): the chunks loaded once and stored into each of the token's k rows.
__global__ void __launch_bounds__(kThreads) token_major(const Rows r) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = ((r.chunks + r.parts - 1) / r.parts + 15) / 16 * 16;
  for (int it = blockIdx.x + warp * gridDim.x; it < r.T * r.parts; it += gridDim.x * kWarps) {
    const int t = it / r.parts, part = it % r.parts;
    const int c_begin = min(r.chunks, part * per), n = min(r.chunks, c_begin + per) - c_begin;
    const char* src = r.x + (size_t)t * r.chunks * 16 + (size_t)c_begin * 16;
    for (int c0 = 0; c0 < n; c0 += 32 * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + 32 * u + lane;
        v[u] = c < n ? ld_nc(src + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
      }
      for (int j = 0; j < r.k; ++j) {
        char* to = r.dst + (size_t)r.row_of[t * r.k + j] * r.row_bytes + (size_t)c_begin * 16;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + 32 * u + lane;
          if (c < n) *reinterpret_cast<uint4*>(to + (size_t)c * 16) = v[u];
        }
      }
    }
  }
  end_cta(r);
}

// The receive's floor: CTA 0 acquires every send CTA's flag (after the send grid, by PDL).
__global__ void __launch_bounds__(kThreads) recv_floor(const unsigned long long* flags, int n, unsigned long long epoch,
                                                       int* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (blockIdx.x != 0) return;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    unsigned long long v = 0;
    do asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(flags + i) : "memory");
    while (v < epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) *out = (int)epoch;
}

// Token-major through the CTA's copy engine (TMA bulk copies): CTA b loads the bf16 rows of its
// tokens b, b + G, .. (at most kTmaTokens) into shared memory with one bulk load each, then lane j
// of warp i issues the bulk store of token i's row to its slot j's receive row; the stores
// complete (wait_group 0: written, not only read) before the CTA's fence and flag. No registers
// hold the data, and every store of the CTA is in flight at once.
constexpr int kTmaTokens = 4;
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__global__ void __launch_bounds__(kThreads) token_tma(const Rows r) {
  extern __shared__ __align__(128) char rows_sm[];
  __shared__ __align__(8) unsigned long long bar[kTmaTokens];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t rb = (uint32_t)r.chunks * 16;
  const int ntok = min(kTmaTokens, (r.T - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x);
  if (threadIdx.x < ntok) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[threadIdx.x])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < ntok) {
    const int t = blockIdx.x + threadIdx.x * gridDim.x;
    const uint32_t b = smem_u32(&bar[threadIdx.x]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(rb) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(rows_sm + (size_t)threadIdx.x * rb)),
                 "l"(r.x + (size_t)t * rb), "r"(rb), "r"(b)
                 : "memory");
  }
  if (warp < ntok && lane < r.k) {
    const int t = blockIdx.x + warp * gridDim.x;
    const uint32_t b = smem_u32(&bar[warp]);
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(b)
                   : "memory");
    char* to = r.dst + (size_t)r.row_of[t * r.k + lane] * r.row_bytes;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to), "r"(smem_u32(rows_sm + (size_t)warp * rb)),
                 "r"(rb)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  end_cta(r);
}

__global__ void empty_kernel() {}
__global__ void empty_pdl() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

template <class K, class... A>
void launch_pdl(K kernel, int grid, cudaStream_t s, A... args) {
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(grid);
  c.blockDim = dim3(kThreads);
  c.stream = s;
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  c.attrs = &at;
  c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, kernel, args...));
}

int env_int(const char* n, int d) {
  const char* v = std::getenv(n);
  return v ? std::atoi(v) : d;
}

struct Result {
  std::string name;
  double us;
};

}  // namespace

int main(int argc, char** argv) {
  const int T = env_int("T", 128), H = env_int("H", 7168), K = env_int("K", 8), E = env_int("E", 256), P = env_int("P", 1);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = T * K, chunks = H / 8, cap = P * T;
  const size_t rb = (size_t)H * 2;
  // Routing: K distinct experts per token; pos = earlier tokens with the same expert.
  std::mt19937 rng(20261205);
  std::vector<int> ex(n), cnt(E, 0), padded(n), packed(n), start(E + 1, 0);
  for (int t = 0; t < T; ++t) {
    std::vector<int> all(E);
    std::iota(all.begin(), all.end(), 0);
    for (int j = 0; j < K; ++j) {
      std::uniform_int_distribution<int> d(j, E - 1);
      std::swap(all[j], all[d(rng)]);
      ex[t * K + j] = all[j];
    }
  }
  std::vector<int> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = cnt[ex[i]]++;
  for (int e = 0; e < E; ++e) start[e + 1] = start[e] + cnt[e];
  for (int i = 0; i < n; ++i) padded[i] = ex[i] * cap + pos[i], packed[i] = start[ex[i]] + pos[i];

  char *x = nullptr, *dst_pad = nullptr, *dst_pack = nullptr, *cpy = nullptr;
  int *row_pad = nullptr, *row_pack = nullptr, *out = nullptr;
  unsigned long long* flags = nullptr;
  CK(cudaMalloc(&x, (size_t)T * rb));
  CK(cudaMalloc(&dst_pad, (size_t)E * cap * rb));
  CK(cudaMalloc(&dst_pack, (size_t)n * rb));
  CK(cudaMalloc(&cpy, (size_t)n * rb));
  CK(cudaMalloc(&row_pad, n * sizeof(int)));
  CK(cudaMalloc(&row_pack, n * sizeof(int)));
  CK(cudaMalloc(&flags, 4 * (size_t)sms * sizeof(unsigned long long)));
  CK(cudaMalloc(&out, sizeof(int)));
  CK(cudaMemset(flags, 0, 4 * (size_t)sms * sizeof(unsigned long long)));
  CK(cudaMemset(x, 0x3c, (size_t)T * rb));
  CK(cudaMemcpy(row_pad, padded.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(row_pack, packed.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(recv_floor, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  unsigned long long epoch = 0;

  // The send's own choice of parts at this shape (ll.cu dispatch_send).
  const int pairs_per_cta = std::max(1, (n + sms - 1) / sms);
  int parts_ll = 1;
  while (parts_ll < kWarps && 2 * parts_ll * pairs_per_cta <= kWarps) parts_ll *= 2;

  const auto time_us = [&](auto&& call) {
    for (int w = 0; w < 5; ++w) call();
    std::vector<double> v;
    for (int rep = 0; rep < 7; ++rep) {
      CK(cudaEventRecord(e0, s));
      for (int c = 0; c < 20; ++c) call();
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      v.push_back(ms * 1e3 / 20);
    }
    CK(cudaGetLastError());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<Result> res;
  const auto add = [&](const std::string& name, double us) {
    res.push_back({name, us});
    std::printf("  %-44s %9.2f\n", name.c_str(), us);
    std::fflush(stdout);
  };
  std::printf("# ep_ll_ceiling: %d SMs, T %d, H %d, top-%d of %d experts, P %d (cap %d rows per expert), %zu B per bf16 row,\n"
              "#   %.1f MB of rows (bf16); the send's parts at this shape: %d; per call, median of 7 x 20 calls\n",
              sms, T, H, K, E, P, cap, rb, n * rb / 1e6, parts_ll);
  std::printf("  %-44s %9s\n", "variant", "us");
  add("memcpy (same bytes, contiguous)", time_us([&] { CK(cudaMemcpyAsync(cpy, dst_pack, (size_t)n * rb, cudaMemcpyDeviceToDevice, s)); }));
  add("empty kernel", time_us([&] { empty_kernel<<<sms, kThreads, 0, s>>>(); }));
  add("two empty kernels, the second by PDL", time_us([&] {
        empty_kernel<<<sms, kThreads, 0, s>>>();
        launch_pdl(empty_pdl, sms, s);
      }));

  struct V {
    const char* name;
    int kind;  // 0 pair-major, 1 token-major, 2 pair-major with two items in flight, 3 token-major by TMA
    bool pack;
    int fence, fp8, parts, grid_mult;
    bool recv;
  };
  const V vs[] = {
      {"token padded, TMA bulk copies, sys fence", 3, false, kSysFence, 0, 1, 1, false},
      {"token padded, TMA bulk copies, sys fence +recv", 3, false, kSysFence, 0, 1, 1, true},
      {"token packed, TMA bulk copies, sys fence", 3, true, kSysFence, 0, 1, 1, false},
      {"pair padded, no fence", 0, false, kNoFence, 0, parts_ll, 1, false},
      {"pair padded, gpu fence", 0, false, kGpuFence, 0, parts_ll, 1, false},
      {"pair padded, sys fence", 0, false, kSysFence, 0, parts_ll, 1, false},
      {"pair padded, sys fence +recv", 0, false, kSysFence, 0, parts_ll, 1, true},
      {"pair packed, no fence", 0, true, kNoFence, 0, parts_ll, 1, false},
      {"pair packed, sys fence", 0, true, kSysFence, 0, parts_ll, 1, false},
      {"pair packed, sys fence +recv", 0, true, kSysFence, 0, parts_ll, 1, true},
      {"pair padded, sys fence, parts 1", 0, false, kSysFence, 0, 1, 1, false},
      {"pair padded, sys fence, parts 4", 0, false, kSysFence, 0, 4, 1, false},
      {"pair padded, sys fence, parts 8", 0, false, kSysFence, 0, 8, 1, false},
      {"pair padded, sys fence, 2 CTAs per SM", 0, false, kSysFence, 0, parts_ll, 2, false},
      {"pair padded, sys fence, parts 4, 2 in flight", 2, false, kSysFence, 0, 4, 1, false},
      {"pair padded, sys fence, parts 8, 2 in flight", 2, false, kSysFence, 0, 8, 1, false},
      {"pair padded, sys fence +recv, parts 4, 2 in flight", 2, false, kSysFence, 0, 4, 1, true},
      {"token padded, sys fence, parts 8", 1, false, kSysFence, 0, 8, 1, false},
      {"token packed, sys fence, parts 8", 1, true, kSysFence, 0, 8, 1, false},
      {"token packed, sys fence, parts 16", 1, true, kSysFence, 0, 16, 1, false},
      {"pair padded fp8, sys fence", 0, false, kSysFence, 1, parts_ll, 1, false},
      {"pair packed fp8, sys fence", 0, true, kSysFence, 1, parts_ll, 1, false},
  };
  // The TMA variant keeps up to kTmaTokens bf16 rows per CTA in shared memory.
  const int tma_tokens = (T + sms - 1) / sms;
  const size_t tma_smem = (size_t)std::min(tma_tokens, kTmaTokens) * rb;
  CK(cudaFuncSetAttribute(token_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tma_smem));
  for (const V& v : vs) {
    if (v.kind == 3 && (tma_tokens > kTmaTokens || K > 32)) continue;  // the variant's limits
    Rows r{};
    r.x = x;
    r.dst = v.pack ? dst_pack : dst_pad;
    r.row_of = v.pack ? row_pack : row_pad;
    r.flags = flags;
    r.T = T, r.k = K, r.chunks = chunks, r.parts = v.parts, r.fence = v.fence, r.fp8 = v.fp8;
    r.row_bytes = v.fp8 ? (size_t)H : rb;
    const int grid = sms * v.grid_mult;
    if (v.grid_mult > 1) {
      int per = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, pair_major, kThreads, 0));
      if (per < v.grid_mult) continue;
    }
    add(v.name, time_us([&] {
          r.epoch = ++epoch;
          if (v.kind == 3) token_tma<<<grid, kThreads, tma_smem, s>>>(r);
          else if (v.kind == 1) token_major<<<grid, kThreads, 0, s>>>(r);
          else if (v.kind == 2) pair_major_2inflight<<<grid, kThreads, 0, s>>>(r);
          else pair_major<<<grid, kThreads, 0, s>>>(r);
          if (v.recv) launch_pdl(recv_floor, grid, s, (const unsigned long long*)flags, grid, r.epoch, out);
        }));
  }
  CK(cudaStreamSynchronize(s));
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (!f) return 1;
    std::fprintf(f, "{\"bench\":\"ep_ll_ceiling\",\"sms\":%d,\"T\":%d,\"H\":%d,\"K\":%d,\"E\":%d,\"P\":%d,\"parts_ll\":%d,\"rows\":[",
                 sms, T, H, K, E, P, parts_ll);
    for (size_t i = 0; i < res.size(); ++i)
      std::fprintf(f, "%s{\"variant\":\"%s\",\"us\":%.3f}", i ? "," : "", res[i].name.c_str(), res[i].us);
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
