// The EP kernels (kernels.cuh). Memory-order argument, once: a source's CTA b writes its rows
// (plain 16-byte stores into the peer's window), fences at system scope, synchronizes the CTA,
// and releases its flag (st.release.sys) to that peer; the peer's CTA b acquires the flag
// (bounded wait) and synchronizes: every thread of it, and after the kernel ends every later
// kernel on its stream, sees the rows. Count slots work the same way. Nothing here uses the
// async proxy (no TMA or bulk copies), so no proxy fence is needed (device/ptx.cuh's rule).
#include <cub/block/block_scan.cuh>

#include "kernels.cuh"
#include "tilewire/device/wait.cuh"

namespace tw::ops::ep {
namespace {

__device__ __forceinline__ long long topk_at(const void* idx, bool idx64, size_t i) {
  return idx64 ? static_cast<const long long*>(idx)[i] : (long long)static_cast<const int*>(idx)[i];
}

// Thread q < P of the CTA waits for peer q's flag `base`[q][ch] >= e in this rank's window (and
// records when q's rows landed: kChunkRecv, id = id0 + q); then the whole CTA is ordered after
// those acquires.
__device__ void wait_all(const DevCtx& ctx, const DevWindow& w, const Geometry& g, size_t base, int ch, uint64_t e,
                         const char* what, const trace::Ring& ring, uint32_t id0) {
  if (threadIdx.x < g.P) {
    dev::wait_flag(dev::Thread{}, ctx, at<uint64_t>(ctx, w, g.flag(base, threadIdx.x, ch), g.me), e,
                   cuda::memory_order_acquire, what);
    trace::emit(ring, trace::EventKind::kChunkRecv, id0 + threadIdx.x, ptx::globaltimer());
  }
  __syncthreads();
}

// This CTA's stores are published, then thread q < P releases flag `base`[me][ch] = e at peer q.
__device__ void release_all(const DevCtx& ctx, const DevWindow& w, const Geometry& g, size_t base, int ch, uint64_t e) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < g.P) ptx::st_release_sys(at<uint64_t>(ctx, w, g.flag(base, g.me, ch), threadIdx.x), e);
}

}  // namespace

// ------------------------------------------------------------------------------ layout
// One thread per token: which ranks it goes to, and the per-expert counts (integer atomics: the
// counts are exact whatever the order). Ids outside [-1, E) are recorded and skipped.
__global__ void layout_count(const void* topk_idx, bool idx64, int N, int topk, int E, int L, int P, Routing r, int me,
                             Status* status) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < N; t += gridDim.x * blockDim.x) {
    unsigned mask = 0;
    for (int j = 0; j < topk; ++j) {
      const long long e = topk_at(topk_idx, idx64, (size_t)t * topk + j);
      if (e == -1) continue;
      if (e < -1 || e >= E) {
        if (atomicCAS(&status->code, 0, 1) == 0) {
          status->rank = me;
          status->token = t;
          status->slot = j;
          status->value = e;
          __threadfence_system();
        }
        continue;
      }
      mask |= 1u << (int)(e / L);
      atomicAdd(&r.tokens_per_expert[e], 1);
    }
    for (int d = 0; d < P; ++d) r.in_rank[(size_t)t * P + d] = (mask >> d) & 1u;
  }
}

// One CTA per destination rank d: send_slot[t][d] = the number of tokens before t that go to d
// (an exclusive scan over the tokens, each thread a contiguous run), tokens_per_rank[d] = all.
__global__ void layout_scan(Routing r, int P) {
  using Scan = cub::BlockScan<int, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  const int d = blockIdx.x, N = r.num_tokens;
  const int per = (N + 1023) / 1024, t0 = threadIdx.x * per, t1 = min(N, t0 + per);
  int mine = 0;
  for (int t = t0; t < t1; ++t) mine += r.in_rank[(size_t)t * P + d];
  int before = 0, total = 0;
  Scan(tmp).ExclusiveSum(mine, before, total);
  for (int t = t0; t < t1; ++t) {
    r.send_slot[(size_t)t * P + d] = before;
    before += r.in_rank[(size_t)t * P + d];
  }
  if (threadIdx.x == 0) r.tokens_per_rank[d] = total;
}

// ---------------------------------------------------------------------------- dispatch
__global__ void __launch_bounds__(kThreads) dispatch(const __grid_constant__ DispatchParams p) {
  const Geometry& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int P = g.P, me = g.me, ch = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t e = next_epoch(p.epochs);
  stamp(p.ring, trace::EventKind::kKernelStart, ch);
  __shared__ int counts[kMaxRanks][kMaxRanks];  // counts[q][d]: tokens rank q sends to rank d
  __shared__ int base_to[kMaxRanks];            // this rank's first row at rank d
  __shared__ int bad;

  // 1. CTA 0 publishes this rank's counts (and its layout's verdict) to every rank.
  if (ch == 0) {
    for (int d = warp; d < P; d += kWarps) {
      char* s = at<char>(ctx, p.win, g.slot(me), d);
      if (lane == 0) *reinterpret_cast<int*>(s + 8) = *reinterpret_cast<volatile int*>(&p.status->code) == 1 ? 1 : 0;
      for (int q = lane; q < P; q += 32) reinterpret_cast<int*>(s + 16)[q] = p.r.tokens_per_rank[q];
      for (int l = lane; l < g.L; l += 32) reinterpret_cast<int*>(s + 16)[P + l] = p.r.tokens_per_expert[d * g.L + l];
      __threadfence_system();
      __syncwarp();
      if (lane == 0) ptx::st_release_sys(reinterpret_cast<uint64_t*>(s), e);
    }
  }
  // 2. Every CTA: every rank's counts (this rank's slot q holds rank q's).
  if (threadIdx.x < P)
    dev::wait_flag(dev::Thread{}, ctx, at<uint64_t>(ctx, p.win, g.slot(threadIdx.x), me), e, cuda::memory_order_acquire,
                   "ep.dispatch.counts");
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (threadIdx.x < P * P) {
    const int q = threadIdx.x / P, d = threadIdx.x % P;
    const char* s = at<char>(ctx, p.win, g.slot(q), me);
    counts[q][d] = reinterpret_cast<const int*>(s + 16)[d];
    if (d == 0 && *reinterpret_cast<const int*>(s + 8) != 0) atomicMax(&bad, q + 1);
  }
  __syncthreads();
  if (bad) {  // some rank's routing was invalid: every rank writes no rows (they all see it)
    if (ch == 0 && threadIdx.x == 0) {
      if (atomicCAS(&p.status->code, 0, 2) == 0) {
        p.status->rank = bad - 1;
        __threadfence_system();
      }
      *p.num_recv = 0;
    }
    // Still the done exchange: it keeps every rank's next call from rewriting a count slot that
    // a slower peer is still reading.
    release_all(ctx, p.win, g, g.off_done, ch, e);
    wait_all(ctx, p.win, g, g.off_done, ch, e, "ep.dispatch.rows", trace::Ring{}, 0);
    return;
  }
  if (threadIdx.x < P) {
    int b = 0;
    for (int q = 0; q < me; ++q) b += counts[q][threadIdx.x];
    base_to[threadIdx.x] = b;
  }
  if (ch == 0) {
    if (threadIdx.x == 0) {
      int n = 0;
      for (int q = 0; q < P; ++q) {
        p.recv_base[q] = n;
        n += counts[q][me];
      }
      *p.num_recv = n;
    }
    for (int l = threadIdx.x; l < g.L; l += kThreads) {
      int n = 0;
      for (int q = 0; q < P; ++q) n += reinterpret_cast<const int*>(at<char>(ctx, p.win, g.slot(q), me) + 16)[P + l];
      p.recv_per_expert[l] = (n + p.alignment - 1) / p.alignment * p.alignment;
    }
  }
  __syncthreads();

  // 3. Rows: a warp per token, its row loaded once and stored to every destination.
  stamp(p.ring, trace::EventKind::kChunkSend, ch);
  const int chunks = (int)(g.row_bytes / 16), nsc = (int)(g.scale_bytes / 4);
  for (int t = ch * kWarps + warp; t < p.r.num_tokens; t += gridDim.x * kWarps) {
    int dst[kMaxRanks], row[kMaxRanks], nd = 0;
    for (int d = 0; d < P; ++d)
      if (p.r.in_rank[(size_t)t * P + d]) {
        dst[nd] = d;
        row[nd++] = base_to[d] + p.r.send_slot[(size_t)t * P + d];
      }
    if (nd == 0) continue;
    const char* src = p.x + (size_t)t * g.row_bytes;
    char* to[kMaxRanks];
    for (int i = 0; i < nd; ++i) to[i] = at<char>(ctx, p.win, g.off_rx + (size_t)row[i] * g.row_bytes, dst[i]);
    warp_copy_row(
        chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
        [&](int c, uint4 v) {
          for (int i = 0; i < nd; ++i) ptx::st_v4(to[i] + (size_t)c * 16, v);
        });
    for (int c = lane; c < nsc; c += 32) {
      const float v = p.x_scales[(size_t)t * nsc + c];
      for (int i = 0; i < nd; ++i) *at<float>(ctx, p.win, g.off_rscale + ((size_t)row[i] * nsc + c) * 4, dst[i]) = v;
    }
    if (lane < g.topk) {
      const long long id = topk_at(p.topk_idx, p.idx64, (size_t)t * g.topk + lane);
      const float w = p.topk_weights[(size_t)t * g.topk + lane];
      for (int i = 0; i < nd; ++i) {
        const bool here = id >= 0 && id / g.L == dst[i];
        const size_t k = (size_t)row[i] * g.topk + lane;
        *at<int32_t>(ctx, p.win, g.off_ridx + k * 4, dst[i]) = here ? (int32_t)(id % g.L) : -1;
        *at<float>(ctx, p.win, g.off_rw + k * 4, dst[i]) = here ? w : 0.0f;
      }
    }
    if (lane == 0)
      for (int i = 0; i < nd; ++i) {
        *at<int32_t>(ctx, p.win, g.off_rsrc + (size_t)row[i] * 4, dst[i]) = me;
        *at<int32_t>(ctx, p.win, g.off_rtok + (size_t)row[i] * 4, dst[i]) = t;
      }
  }
  // 4. This channel's rows are out; then every source's rows of this channel are in.
  release_all(ctx, p.win, g, g.off_done, ch, e);
  wait_all(ctx, p.win, g, g.off_done, ch, e, "ep.dispatch.rows", p.ring, 0);
  stamp(p.ring, trace::EventKind::kKernelEnd, ch);
}

// ----------------------------------------------------------------------------- combine
// Each received row goes back to its source, at the row it has in that source's stream to this
// rank: the source's combine area [this rank][slot].
__global__ void __launch_bounds__(kThreads) combine_push(const __grid_constant__ CombineParams p) {
  const Geometry& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int ch = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t e = next_epoch(p.epochs);
  stamp(p.ring, trace::EventKind::kKernelStart, kCombineId + ch);
  // Every rank has started this combine, so its combine area is free (the last reduce ran
  // before this kernel on its stream).
  __syncthreads();
  if (threadIdx.x < g.P) ptx::st_release_sys(at<uint64_t>(ctx, p.win, g.flag(g.off_cstart, g.me, ch), threadIdx.x), e);
  wait_all(ctx, p.win, g, g.off_cstart, ch, e, "ep.combine.start", trace::Ring{}, 0);
  stamp(p.ring, trace::EventKind::kChunkSend, kCombineId + ch);
  const int n = *p.num_recv, chunks = (int)(g.hidden * 2 / 16);
  const int32_t* src_rank = at<int32_t>(ctx, p.win, g.off_rsrc, g.me);
  for (int r = ch * kWarps + warp; r < n; r += gridDim.x * kWarps) {
    const int s = src_rank[r], slot = r - p.recv_base[s];
    const size_t row = (size_t)g.me * g.max_tokens + slot;
    char* dst = at<char>(ctx, p.win, g.off_cy + row * g.hidden * 2, s);
    const char* src = p.y + (size_t)r * g.hidden * 2;
    warp_copy_row(
        chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
        [&](int c, uint4 v) { ptx::st_v4(dst + (size_t)c * 16, v); });
    if (lane == 0 && p.weights) *at<float>(ctx, p.win, g.off_cw + row * 4, s) = p.weights[r];
  }
  release_all(ctx, p.win, g, g.off_cdone, ch, e);
  wait_all(ctx, p.win, g, g.off_cdone, ch, e, "ep.combine.rows", p.ring, kCombineId);
  stamp(p.ring, trace::EventKind::kKernelEnd, kCombineId + ch);
}

// out[t] = sum over ranks d = 0..P-1 that token t went to of (w x) y_d, in fp32, rounded once.
// A thread per 8 columns of a token.
__global__ void combine_reduce(const __grid_constant__ ReduceParams p) {
  const Geometry& g = p.g;
  if (*reinterpret_cast<const volatile int*>(&p.status->code) != 0) return;
  const int vecs = g.hidden / 8;
  const size_t n = (size_t)p.r.num_tokens * vecs;
  const char* local = p.win.lsa_base + (size_t)g.me * p.win.lsa_stride;  // this rank's copy (its own LSA index)
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / vecs), v = (int)(i % vecs);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int d = 0; d < g.P; ++d) {
      if (!p.r.in_rank[(size_t)t * g.P + d]) continue;
      const size_t row = (size_t)d * g.max_tokens + p.r.send_slot[(size_t)t * g.P + d];
      const uint4 raw = *reinterpret_cast<const uint4*>(local + g.off_cy + row * g.hidden * 2 + (size_t)v * 16);
      const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&raw);
      const float w = p.weighted ? *reinterpret_cast<const float*>(local + g.off_cw + row * 4) : 1.0f;
      for (int k = 0; k < 8; ++k) acc[k] = p.weighted ? __fmaf_rn(w, __bfloat162float(y[k]), acc[k]) : acc[k] + __bfloat162float(y[k]);
    }
    uint4 o;
    __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
    for (int k = 0; k < 8; ++k) ob[k] = __float2bfloat16_rn(acc[k]);
    *reinterpret_cast<uint4*>(p.out + (size_t)t * g.hidden + (size_t)v * 8) = o;
  }
}

}  // namespace tw::ops::ep
