// The MoE FFN's own kernels (kernels.hpp says what each computes). Rows move as 16-byte vectors
// of 8 bf16; arithmetic is fp32, rounded once per output element.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::ops::moe {
namespace {

constexpr int kPlaceThreads = 1024;
constexpr int kThreads = 256;

// 8 bf16 <-> 8 fp32.
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 v;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// CTA l: the entries of local expert l among the receive's (row, slot) entries.
__global__ void __launch_bounds__(kPlaceThreads) count_kernel(const int32_t* idx, const int* num_recv, int topk,
                                                              int* counts) {
  const int l = blockIdx.x;
  const long long n = (long long)*num_recv * topk;
  int c = 0;
  for (long long e = threadIdx.x; e < n; e += kPlaceThreads) c += idx[e] == l;
  using Reduce = cub::BlockReduce<int, kPlaceThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int total = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0) counts[l] = total;
}

// CTA l: offsets[l], then each entry of expert l its place, 1024 entries at a time in (row, slot)
// order (a block-wide exclusive scan: the same places on every run). CTA 0 also marks the entries
// that go to no local expert, and records the overflow. raw: count_kernel's counts.
__global__ void __launch_bounds__(kPlaceThreads) place_kernel(const int32_t* idx, const int* num_recv, int topk, int L,
                                                              int max_rows, const int* raw, int* counts, int* offsets,
                                                              int* perm, int* pos_of, int* overflow) {
  const int l = blockIdx.x;
  __shared__ int base, total_rows;
  if (threadIdx.x == 0) {
    long long s = 0, all = 0;
    for (int k = 0; k < L; ++k) {
      if (k < l) s += raw[k];
      all += raw[k];
    }
    const bool over = all > max_rows;
    base = over ? 0 : int(s);
    total_rows = over ? -1 : int(all);
    offsets[l] = base;
    counts[l] = over ? 0 : raw[l];
    if (l == 0) *overflow = over ? int(min(all, (long long)INT_MAX)) : 0;
  }
  __syncthreads();
  const bool over = total_rows < 0;
  using Scan = cub::BlockScan<int, kPlaceThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const long long n = (long long)*num_recv * topk;
  int running = 0;
  for (long long first = 0; first < n; first += kPlaceThreads) {
    const long long e = first + threadIdx.x;
    const int id = e < n ? idx[e] : -1;
    const int mine = id == l && !over;
    int before = 0, total = 0;
    Scan(tmp).ExclusiveSum(mine, before, total);
    if (mine) {
      const int pos = base + running + before;
      perm[pos] = int(e / topk);
      pos_of[e] = pos;
    }
    if (l == 0 && e < n && (over || id < 0 || id >= L)) pos_of[e] = -1;
    running += total;
    __syncthreads();  // tmp is reused
  }
}

__global__ void gather_kernel(const uint4* x, const int* perm, const int* counts, const int* offsets, int L, int vecs,
                              uint4* xg) {
  const long long rows = (long long)offsets[L - 1] + counts[L - 1];
  const long long n = rows * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long pos = i / vecs, c = i % vecs;
    xg[i] = x[(long long)perm[pos] * vecs + c];
  }
}

__global__ void scatter_kernel(const uint4* yg, const int* pos_of, const float* w, const int* num_recv, int topk,
                               int vecs, uint4* y) {
  const long long n = (long long)*num_recv * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / vecs, c = i % vecs;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < topk; ++j) {
      const int pos = pos_of[r * topk + j];
      if (pos < 0) continue;
      const float wj = w[r * topk + j];
      float v[8];
      unpack8(yg[(long long)pos * vecs + c], v);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += wj * v[k];
    }
    y[i] = pack8(acc);
  }
}

__global__ void silu_mul_kernel(const uint4* h, const int* counts, const int* offsets, int group_rows, int vecs,
                                uint4* act) {
  const int g = blockIdx.y;
  const long long first = offsets ? offsets[g] : (long long)g * group_rows;
  const long long n = (long long)counts[g] * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long row = first + i / vecs, c = i % vecs;
    float gate[8], up[8], out[8];
    unpack8(h[row * 2 * vecs + c], gate);
    unpack8(h[row * 2 * vecs + vecs + c], up);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = gate[k] / (1.0f + expf(-gate[k])) * up[k];
    act[row * vecs + c] = pack8(out);
  }
}

int grid_for(long long work, int cap) {
  return (int)std::max<long long>(1, std::min<long long>((work + kThreads - 1) / kThreads, cap));
}

}  // namespace

void place_rows(const int32_t* idx, const int* num_recv, int topk, int L, int max_rows, int* raw, int* counts,
                int* offsets, int* perm, int* pos_of, int* overflow, cudaStream_t stream) {
  count_kernel<<<L, kPlaceThreads, 0, stream>>>(idx, num_recv, topk, raw);
  TW_CUDA_CHECK(cudaGetLastError());
  place_kernel<<<L, kPlaceThreads, 0, stream>>>(idx, num_recv, topk, L, max_rows, raw, counts, offsets, perm, pos_of,
                                                overflow);
  TW_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const void* x, const int* perm, const int* counts, const int* offsets, int L, int H, int max_rows,
                 void* xg, cudaStream_t stream) {
  const int vecs = H / 8;
  gather_kernel<<<grid_for((long long)max_rows * vecs, 4096), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), perm, counts, offsets, L, vecs, static_cast<uint4*>(xg));
  TW_CUDA_CHECK(cudaGetLastError());
}

void scatter_rows(const void* yg, const int* pos_of, const float* w, const int* num_recv, int topk, int H,
                  int max_rows, void* y, cudaStream_t stream) {
  const int vecs = H / 8;
  scatter_kernel<<<grid_for((long long)max_rows * vecs, 4096), kThreads, 0, stream>>>(
      static_cast<const uint4*>(yg), pos_of, w, num_recv, topk, vecs, static_cast<uint4*>(y));
  TW_CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const void* h, const int* counts, const int* offsets, int group_rows, int L, int F, int max_count,
              void* act, cudaStream_t stream) {
  const int vecs = F / 8;
  const dim3 grid(grid_for((long long)max_count * vecs, std::max(1, 4096 / L)), L);
  silu_mul_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(h), counts, offsets, group_rows, vecs,
                                                 static_cast<uint4*>(act));
  TW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tw::ops::moe
