// The MoE FFN's own kernels (kernels.hpp says what each computes). Rows move as 16-byte vectors
// of 8 bf16; arithmetic is fp32, rounded once per output element.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cub/block/block_scan.cuh>

#include "../ep/expert_rows.cuh"
#include "kernels.hpp"
#include "tilewire/ops/ep.hpp"  // kEpMaxExperts
#include "tilewire/runtime/errors.hpp"

namespace tw::ops::moe {
namespace {

constexpr int kThreads = 256;

// 8 bf16 -> 8 fp32 (the way back, 8 fp32 rounded to 8 bf16, is ep::pack_bf16x8).
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}

// The placement, in three steps over chunks of `chunk` entries (each step parallel over chunks;
// the placement is the same on every run):
//   chunk_count  chunk c's entries per local expert (shared-memory counters: exact integers)
//   chunk_scan   one CTA: per expert, the entries in earlier chunks (chunk_base), its count and
//                its offset among the experts (a block scan), the overflow verdict
//   chunk_place  chunk c: each entry's rank among the chunk's earlier entries of its expert (lanes
//                of a warp with the same expert found by __match_any_sync, warps before it from
//                per-warp counts in shared memory), plus chunk_base and the expert's offset
// A chunk is kChunkSmall entries up to kSmallEntries (a sender's own few thousand entries: eight
// CTAs in place of two, so the placement is not one CTA's serial walk) and kChunkLarge above
// (a receive's up to half a million entries: chunk_scan walks the chunks one after another).
constexpr int kChunkSmall = 1024;
constexpr int kChunkLarge = 4096;
constexpr long long kSmallEntries = 1 << 17;
constexpr int kChunkThreads = 256;
constexpr int kChunkWarps = kChunkThreads / 32;
constexpr int kMaxSubs = kChunkLarge / kChunkThreads;  // sub-blocks of kChunkThreads entries per chunk
constexpr int kScanThreads = 512;  // >= kEpMaxExperts: one thread per local expert
static_assert(kScanThreads >= kEpMaxExperts, "chunk_scan gives each local expert a thread");
static_assert(kChunkSmall % kChunkThreads == 0 && kChunkLarge % kChunkThreads == 0, "whole sub-blocks per chunk");

int chunk_size(long long max_entries) { return max_entries <= kSmallEntries ? kChunkSmall : kChunkLarge; }
int chunks_for(long long max_entries) {
  const int c = chunk_size(max_entries);
  return int(std::max<long long>(1, (max_entries + c - 1) / c));
}

// What the placement reads: ids (int32, or a sender's int64 ids) and the rows, from the device
// (a receive's count) or the host (rows >= 0).
struct Entries {
  const void* idx;
  bool idx64;
  const int* num_rows;
  int rows;
  __device__ long long n(int topk) const { return (long long)(rows >= 0 ? rows : *num_rows) * topk; }
  __device__ int id(long long e, int L) const {
    const long long v = idx64 ? static_cast<const long long*>(idx)[e] : (long long)static_cast<const int32_t*>(idx)[e];
    return v >= 0 && v < L ? (int)v : -1;
  }
};

__global__ void __launch_bounds__(kChunkThreads) chunk_count_kernel(Entries in, int topk, int L, int chunk,
                                                                    int* chunk_counts) {
  extern __shared__ int cnt[];  // [L]
  for (int l = threadIdx.x; l < L; l += kChunkThreads) cnt[l] = 0;
  __syncthreads();
  const long long n = in.n(topk), first = (long long)blockIdx.x * chunk;
  const long long last = min(n, first + chunk);
  for (long long e = first + threadIdx.x; e < last; e += kChunkThreads) {
    const int id = in.id(e, L);
    if (id >= 0) atomicAdd(&cnt[id], 1);
  }
  __syncthreads();
  for (int l = threadIdx.x; l < L; l += kChunkThreads) chunk_counts[(long long)blockIdx.x * L + l] = cnt[l];
}

__global__ void __launch_bounds__(kScanThreads) chunk_scan_kernel(Entries in, int topk, int L, int chunk, int max_rows,
                                                                  const int* chunk_counts, int* chunk_base, int* counts,
                                                                  int* offsets, int* overflow) {
  const int l = threadIdx.x;
  const long long n = in.n(topk);
  const int chunks = int((n + chunk - 1) / chunk);
  int run = 0;
  if (l < L)
    for (int c = 0; c < chunks; ++c) {
      chunk_base[(long long)c * L + l] = run;
      run += chunk_counts[(long long)c * L + l];
    }
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int before = 0, all = 0;
  Scan(tmp).ExclusiveSum(l < L ? run : 0, before, all);
  const bool over = all > max_rows;
  if (l < L) {
    counts[l] = over ? 0 : run;
    offsets[l] = over ? 0 : before;
  }
  if (l == 0 && overflow) *overflow = over ? all : 0;
}

// The ids, the experts' first places and the overflow verdict are read from global memory once,
// before the sub-blocks; each sub-block then waits on shared memory only (three barriers).
__global__ void __launch_bounds__(kChunkThreads) chunk_place_kernel(Entries in, int topk, int L, int chunk,
                                                                    const int* chunk_base, const int* offsets,
                                                                    const int* overflow, int* perm, int* pos_of) {
  extern __shared__ int sm[];
  int* next = sm;          // [L]: expert l's next place (offset + chunk_base + this chunk's earlier sub-blocks)
  int* per_warp = sm + L;  // [kChunkWarps][L]: this sub-block's entries of expert l per warp
  const long long n = in.n(topk), first = (long long)blockIdx.x * chunk;
  if (first >= n) return;
  const long long last = min(n, first + chunk);
  const bool over = overflow && *overflow != 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int ids[kMaxSubs];  // this thread's entry of each sub-block; -1: none, or not placed
#pragma unroll
  for (int s = 0; s < kMaxSubs; ++s) {
    const long long e = first + (long long)s * kChunkThreads + threadIdx.x;
    ids[s] = !over && e < last ? in.id(e, L) : -1;
  }
  for (int l = threadIdx.x; l < L; l += kChunkThreads)
    next[l] = over ? 0 : offsets[l] + chunk_base[(long long)blockIdx.x * L + l];
  for (int i = threadIdx.x; i < kChunkWarps * L; i += kChunkThreads) per_warp[i] = 0;
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kMaxSubs; ++s) {
    const long long sub = first + (long long)s * kChunkThreads;
    if (sub >= last) break;  // the same for the whole CTA
    const long long e = sub + threadIdx.x;
    const int id = ids[s];
    const unsigned same = __match_any_sync(0xffffffffu, id);
    const int rank = __popc(same & ((1u << lane) - 1));
    if (id >= 0 && rank == 0) per_warp[warp * L + id] = __popc(same);
    __syncthreads();
    if (e < last) {
      if (id >= 0) {
        int pos = next[id] + rank;
        for (int w = 0; w < warp; ++w) pos += per_warp[w * L + id];
        if (perm) perm[pos] = int(e / topk);
        pos_of[e] = pos;
      } else {
        pos_of[e] = -1;
      }
    }
    __syncthreads();
    for (int l = threadIdx.x; l < L; l += kChunkThreads) {  // and per_warp back to 0 for the next sub-block
      int sum = 0;
      for (int w = 0; w < kChunkWarps; ++w) {
        sum += per_warp[w * L + l];
        per_warp[w * L + l] = 0;
      }
      next[l] += sum;
    }
    __syncthreads();
  }
}

// Row by row: each received row is read once and stored at each of its places (a row has one
// place per local expert it names, 1.5 on average at 8 ranks and top-8). Walking the places instead
// (xg[pos] = x[perm[pos]]) reads a row once per place, from places far apart in xg.
__global__ void gather_kernel(const uint4* x, const int* pos_of, const int* num_recv, int topk, int vecs, uint4* xg) {
  const long long n = (long long)*num_recv * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / vecs, c = i % vecs;
    const uint4 v = x[i];
    for (int j = 0; j < topk; ++j) {
      const int pos = pos_of[r * topk + j];
      if (pos >= 0) xg[(long long)pos * vecs + c] = v;
    }
  }
}

// The direct dispatch's receive: a row is read only where it has a second place.
__global__ void copy_places_kernel(uint4* xg, const int* pos_of, const int* num_recv, int topk, int vecs) {
  const long long n = (long long)*num_recv * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / vecs, c = i % vecs;
    int first = -1;
    bool loaded = false;
    uint4 v;
    for (int j = 0; j < topk; ++j) {
      const int pos = pos_of[r * topk + j];
      if (pos < 0) continue;
      if (first < 0) {  // where the dispatch stored the row
        first = pos;
        continue;
      }
      if (!loaded) v = xg[(long long)first * vecs + c], loaded = true;
      xg[(long long)pos * vecs + c] = v;
    }
  }
}

__global__ void scatter_kernel(const uint4* yg, const int* pos_of, const float* w, const int* num_recv, int topk,
                               int vecs, uint4* y) {
  const long long n = (long long)*num_recv * vecs;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = ep::expert_rows_chunk(yg, pos_of, w, topk, i / vecs, vecs, i % vecs);
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
    act[row * vecs + c] = ep::pack_bf16x8(out);
  }
}

// One 16-byte vector per thread: out row 16j + 8h + i of expert l <- w row h F + 8j + i.
__global__ void interleave_gate_up_kernel(const uint4* w, int F, int vecs, long long n, uint4* out) {
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += (long long)gridDim.x * blockDim.x) {
    const long long row = v / vecs, c = v % vecs;  // out's row over all experts
    const long long l = row / (2 * F), r = row % (2 * F);
    const long long j = r / 16, h = (r / 8) % 2, i = r % 8;
    out[v] = w[(l * 2 * F + h * F + 8 * j + i) * vecs + c];
  }
}

int grid_for(long long work, int cap) {
  return (int)std::max<long long>(1, std::min<long long>((work + kThreads - 1) / kThreads, cap));
}

}  // namespace

// The most chunks any count of entries up to max_entries is cut into (the chunk size grows at
// kSmallEntries, so the count is not monotone in the entries).
int place_chunks(long long max_entries) {
  return std::max(chunks_for(std::min(max_entries, kSmallEntries)), chunks_for(max_entries));
}

namespace {
void place(const Entries& in, int topk, int L, int max_rows, long long max_entries, const PlaceScratch& w, int* counts,
           int* offsets, int* perm, int* pos_of, int* overflow, cudaStream_t stream) {
  const int chunk = chunk_size(max_entries), chunks = chunks_for(max_entries);
  chunk_count_kernel<<<chunks, kChunkThreads, size_t(L) * sizeof(int), stream>>>(in, topk, L, chunk, w.chunk_counts);
  TW_CUDA_CHECK(cudaGetLastError());
  chunk_scan_kernel<<<1, kScanThreads, 0, stream>>>(in, topk, L, chunk, max_rows, w.chunk_counts, w.chunk_base, counts,
                                                    offsets, overflow);
  TW_CUDA_CHECK(cudaGetLastError());
  chunk_place_kernel<<<chunks, kChunkThreads, size_t(1 + kChunkWarps) * L * sizeof(int), stream>>>(
      in, topk, L, chunk, w.chunk_base, offsets, overflow, perm, pos_of);
  TW_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void place_rows(const int32_t* idx, const int* num_recv, int topk, int L, int max_rows, long long max_entries,
                const PlaceScratch& w, int* counts, int* offsets, int* perm, int* pos_of, int* overflow,
                cudaStream_t stream) {
  place(Entries{idx, false, num_recv, -1}, topk, L, max_rows, max_entries, w, counts, offsets, perm, pos_of, overflow,
        stream);
}

void place_own_rows(const void* idx, bool idx64, int N, int topk, int E, const PlaceScratch& w, int* counts,
                    int* offsets, int* pos_of, cudaStream_t stream) {
  const long long n = (long long)N * topk;
  place(Entries{idx, idx64, nullptr, N}, topk, E, INT_MAX, n, w, counts, offsets, nullptr, pos_of, nullptr, stream);
}

void gather_rows(const void* x, const int* pos_of, const int* num_recv, int topk, int H, int max_recv, void* xg,
                 cudaStream_t stream) {
  const int vecs = H / 8;
  gather_kernel<<<grid_for((long long)max_recv * vecs, 4096), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), pos_of, num_recv, topk, vecs, static_cast<uint4*>(xg));
  TW_CUDA_CHECK(cudaGetLastError());
}

void copy_to_places(void* xg, const int* pos_of, const int* num_recv, int topk, int H, int max_recv,
                    cudaStream_t stream) {
  const int vecs = H / 8;
  copy_places_kernel<<<grid_for((long long)max_recv * vecs, 4096), kThreads, 0, stream>>>(
      static_cast<uint4*>(xg), pos_of, num_recv, topk, vecs);
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

void interleave_gate_up(const void* w, void* out, int L, int F, int H, cudaStream_t stream) {
  const int vecs = H / 8;
  const long long n = (long long)L * 2 * F * vecs;
  if (n == 0) return;
  interleave_gate_up_kernel<<<grid_for(n, 4096), kThreads, 0, stream>>>(static_cast<const uint4*>(w), F, vecs, n,
                                                                      static_cast<uint4*>(out));
  TW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tw::ops::moe
