// The low-latency EP mode (tilewire/ops/ep.hpp, EpMode::kLowLatency): kernels and launches.
//
// A row per (token, expert). The send puts token t's row for expert e = d x L + l into rank d's
// staging block [buffer][l][source me][pos], pos = the number of earlier tokens of this rank that
// chose e (a per-expert scan: no atomics, so the order is deterministic), then releases one flag
// per (source, CTA) at every rank; its counts (per expert of d) go into d's count slot. The
// receive waits for every source's counts and flags, then packs each expert's rows in source
// order into the expert-major output. Combine mirrors it: the expert rank pushes y(l, r) back
// into the source's [buffer][t][j] slot, the source sums slots j = 0..topk-1 in fp32.
//
// Why no wait before sending: staging and combine areas are double-buffered by call parity. A
// sender at call e writes buffer e % 2 at rank d, which d last read in its receive of call e - 2;
// the sender's own receive of call e - 1 waited for d's send of call e - 1, which d made after
// that receive. The same holds for combine (see docs/ep.md).
//
// Peers outside the LSA team (GIN; compiled, never run here: no GIN-capable NIC): what would be
// stored into such a peer's window is stored into this rank's staging (Geo::off_s*) and put
// with a signal add; the receiver waits for its counters (one per phase, call parity and
// source) to reach the counts it expects (1 per call for the count slot; per row for rows, from
// the counts) instead of flags. The same
// double-buffering argument covers the staging (a put of call e has landed before the sender's
// call e + 2 rewrites its source); the combine staging is single-buffered (the sender's
// next combine follows its dispatch receive, which follows the source's combine receive).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "../../runtime/op_entry.hpp"
#include "state.cuh"
#include "tilewire/device/put.cuh"
#include "tilewire/device/wait.cuh"
#include "tilewire/ops/ep.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace ops::ep::ll {

// Every thread i < P x G waits for flag (buf, source i / G, channel i % G) in this rank's window
// (trace: kChunkRecv, id = id0 + source, when the source's last channel landed).
__device__ void wait_every_channel(const Params& p, size_t base, int buf, uint64_t e, const char* what, uint32_t id0) {
  const Geo& g = p.g;
  for (int i = threadIdx.x; i < g.P * g.G; i += blockDim.x) {
    if (!dev::is_lsa_peer(p.ctx, i / g.G)) continue;  // a GIN source: its counter (wait_gin_rows)
    dev::wait_flag(dev::Thread{}, p.ctx, at<uint64_t>(p.ctx, p.win, g.done(base, buf, i / g.G, i % g.G), g.me), e,
                   cuda::memory_order_acquire, what);
    if (blockIdx.x == 0 && i % g.G == g.G - 1) trace::emit(p.ring, trace::EventKind::kChunkRecv, id0 + i / g.G, ptx::globaltimer());
  }
  __syncthreads();
}

__device__ void release_to_all(const Params& p, size_t base, int buf, uint64_t e) {
  const Geo& g = p.g;
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < g.P && dev::is_lsa_peer(p.ctx, threadIdx.x)) ptx::st_release_sys(at<uint64_t>(p.ctx, p.win, g.done(base, buf, g.me, blockIdx.x), threadIdx.x), e);
}

// Puts per row dispatched to a GIN peer: the row, its (token, slot), fp8: its scales.
__device__ __forceinline__ int row_puts(const Geo& g) { return g.nsc ? 3 : 2; }

// Rows a source put into buffer `buf` of this rank (its counts for this rank's experts).
__device__ __forceinline__ int rows_from(const Params& p, int buf, int src) {
  const int* c = at<const int>(p.ctx, p.win, p.g.slot(buf, src) + 16, p.g.me);
  int n = 0;
  for (int l = 0; l < p.g.L; ++l) n += c[l];
  return n;
}

// This rank's (token, expert) pairs that went to rank d (its layout's counts).
__device__ __forceinline__ int pairs_to(const Params& p, int d) {
  int n = 0;
  for (int l = 0; l < p.g.L; ++l) n += p.s.cnt[d * p.g.L + l];
  return n;
}

// The index of (phase, parity, source) among the buffer's 6P signals (sig0's layout).
__device__ __forceinline__ int sig_slot(const Geo& g, Geo::Phase ph, int par, int src) {
  return ((int)ph * 2 + par) * g.P + src;
}

// Every GIN source's counter of (phase `ph`, parity `par`) reached its running total plus what
// this call adds (`adds(q)`), then the whole CTA is ordered after those acquires (kChunkRecv).
// gin_total's layout: [rows: 2 parities][P], then [combine: 2 parities][P] (total0 = 0 or 2P).
template <class Adds>
__device__ void wait_gin(const Params& p, Geo::Phase ph, int par, int total0, Adds adds, const char* what, uint32_t id0) {
  const Geo& g = p.g;
  for (int q = threadIdx.x; q < g.P; q += blockDim.x) {
    if (dev::is_lsa_peer(p.ctx, q)) continue;
    const uint64_t want =
        p.s.sig0[sig_slot(g, ph, par, q)] + p.s.gin_total[total0 + par * g.P + q] + (uint64_t)adds(q);
    dev::wait_signal(dev::Thread{}, p.ctx, g.signal(ph, par, q), want, cuda::memory_order_acquire, what);
    if (blockIdx.x == 0) trace::emit(p.ring, trace::EventKind::kChunkRecv, id0 + q, ptx::globaltimer());
  }
  __syncthreads();
}

// pre[0..n] = the exclusive prefix sums of v(0..n-1) in shared memory (pre[n]: the total),
// by warp 0 in chunks of 32 (n <= kEpMaxExperts), then the CTA synchronized. Why: the row loops
// below used to walk the experts one by one, each step waiting on a count's global load (256
// steps at 256 experts); traced at one rank, the receive took 87 us to copy what the send had
// stored in 24 us (docs/ep.md). With the prefix in shared
// memory a warp finds its rows by binary search; rows land where they did.
template <class V>
__device__ void block_prefix(int* pre, int n, V v) {
  if (threadIdx.x < 32) {
    int carry = 0;
    for (int x0 = 0; x0 < n; x0 += 32) {
      const int x = x0 + (int)threadIdx.x;
      const int mine = x < n ? v(x) : 0;
      int inc = mine;
      for (int o = 1; o < 32; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, inc, o);
        if ((int)threadIdx.x >= o) inc += y;
      }
      if (x < n) pre[x] = carry + inc - mine;
      carry += __shfl_sync(0xffffffffu, inc, 31);
    }
    if (threadIdx.x == 0) pre[n] = carry;
  }
  __syncthreads();
}

// The last x in [0, n) with pre[x] <= k (pre ascending, pre[0] = 0 <= k < pre[n]).
__device__ __forceinline__ int find_in_prefix(const int* pre, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pre[mid] <= k) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// One CTA of kLayoutThreads: pos[t][j] = the number of earlier (token, slot) entries of this rank
// with the same expert (a repeat within a token's row is refused below, so: earlier tokens), and the
// count per expert. Deterministic without atomics: warp w takes a contiguous range of entries,
// 32 at a time; __match_any_sync groups the lanes holding the same expert, so a lane's place is
// the warp's running count for that expert plus the matching lanes below it. Then a prefix over
// the warps per expert. Shared memory: the ids as int16 and the per-warp counts as int16 (both
// fit: at most 1024 x 16 entries). Bad ids are recorded and left out.
constexpr int kLayoutThreads = 512, kLayoutWarps = kLayoutThreads / 32;
__global__ void __launch_bounds__(kLayoutThreads) layout(const __grid_constant__ Params p) {
  extern __shared__ int16_t sm[];
  const Geo& g = p.g;
  const int n = p.s.num_tokens * g.topk, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int16_t* wcnt = sm;                         // [kLayoutWarps][E]
  int16_t* sid = sm + kLayoutWarps * g.E;     // [n]
  for (int i = threadIdx.x; i < kLayoutWarps * g.E; i += blockDim.x) wcnt[i] = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const long long e = p.idx64 ? static_cast<const long long*>(p.topk_idx)[i] : static_cast<const int*>(p.topk_idx)[i];
    if (e < -1 || e >= g.E) {
      if (atomicCAS(&p.s.status->code, 0, 1) == 0) {
        p.s.status->rank = g.me, p.s.status->token = i / g.topk, p.s.status->slot = i % g.topk, p.s.status->value = e;
        __threadfence_system();
      }
      sid[i] = -1;
    } else {
      sid[i] = (int16_t)e;
    }
  }
  __syncthreads();
  // An expert twice in a token's row would count the token twice and overrun the expert's
  // max_tokens staging rows of this source: the repeat is left out and recorded, and the
  // verdict makes every rank's dispatch write nothing.
  for (int t = threadIdx.x; t < p.s.num_tokens; t += blockDim.x)
    for (int j = 1; j < g.topk; ++j) {
      const int16_t e = sid[t * g.topk + j];
      bool repeat = false;
      for (int k = 0; k < j && !repeat && e >= 0; ++k) repeat = sid[t * g.topk + k] == e;
      if (!repeat) continue;
      if (atomicCAS(&p.s.status->code, 0, kStatusDuplicate) == 0) {
        p.s.status->rank = g.me, p.s.status->token = t, p.s.status->slot = j, p.s.status->value = e;
        __threadfence_system();
      }
      sid[t * g.topk + j] = -1;
    }
  __syncthreads();
  const int per = (n + kLayoutWarps - 1) / kLayoutWarps, begin = warp * per, end = min(n, begin + per);
  for (int i0 = begin; i0 < end; i0 += 32) {
    const int i = i0 + lane;
    const int e = i < end ? sid[i] : -2;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int below = __popc(same & ((1u << lane) - 1u));
    if (e >= 0) p.s.pos[i] = wcnt[warp * g.E + e] + below;
    __syncwarp();
    if (e >= 0 && below == 0) wcnt[warp * g.E + e] += (int16_t)__popc(same);
    __syncwarp();
  }
  __syncthreads();
  for (int e = threadIdx.x; e < g.E; e += blockDim.x) {
    int run = 0;
    for (int w = 0; w < kLayoutWarps; ++w) {
      const int c = wcnt[w * g.E + e];
      wcnt[w * g.E + e] = (int16_t)run;
      run += c;
    }
    p.s.cnt[e] = run;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = sid[i];
    p.s.pos[i] = e >= 0 ? p.s.pos[i] + wcnt[(i / per) * g.E + e] : -1;
  }
}

__global__ void __launch_bounds__(kThreads) send(const __grid_constant__ Params p) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stamp(p.ring, trace::EventKind::kChunkSend, blockIdx.x);
  if (blockIdx.x == 0)  // the counts for each rank's experts, and this rank's verdict
    for (int d = warp; d < g.P; d += kWarps) {
      const bool lsa = dev::is_lsa_peer(ctx, d);
      const size_t staged = g.off_sslots + ((size_t)buf * g.P + d) * g.slot_bytes;
      char* s = lsa ? at<char>(ctx, p.win, g.slot(buf, g.me), d) : at<char>(ctx, p.win, staged, g.me);
      const int code = *reinterpret_cast<volatile int*>(&p.s.status->code);
      if (lane == 0) *reinterpret_cast<int*>(s + 8) = (code == 1 || code == kStatusDuplicate) ? 1 : 0;
      for (int l = lane; l < g.L; l += 32) reinterpret_cast<int*>(s + 16)[l] = p.s.cnt[d * g.L + l];
      if (!lsa && lane == 0) *reinterpret_cast<uint64_t*>(s) = e;
      __threadfence_system();
      __syncwarp();
      if (lsa && lane == 0) ptx::st_release_sys(reinterpret_cast<uint64_t*>(s), e);
      if (!lsa)
        dev::put_signal(dev::Warp{}, ctx, d, p.win, g.slot(buf, g.me), p.win, staged, g.slot_bytes,
                        g.signal(Geo::kSigCounts, buf, g.me), 1);
    }
  // A warp per (token, expert) pair, so that a decode batch of a few tokens still spreads over
  // every warp of the grid: the token's bf16 row (read from L2 after the first of its pairs) is
  // stored into that expert's staging row; fp8 quantizes it per 128 columns, a half-warp per
  // group of 16 chunks.
  const int chunks = g.hidden / 8;  // 16-byte bf16 chunks
  const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
  for (int i = gw; i < p.s.num_tokens * g.topk; i += nw) {
    const int pos = p.s.pos[i];
    if (pos < 0) continue;  // warp-uniform: one pair per warp
    const int t = i / g.topk, j = i % g.topk;
    const long long id = p.idx64 ? static_cast<const long long*>(p.topk_idx)[i] : static_cast<const int*>(p.topk_idx)[i];
    const int dst = (int)(id / g.L);
    const size_t r = g.srow(buf, (int)(id % g.L), g.me, pos);
    const char* src = p.x + (size_t)t * g.hidden * 2;
    // An LSA destination's staging row directly; a GIN one's through this rank's staging.
    const bool lsa = dev::is_lsa_peer(ctx, dst);
    const int wr = lsa ? dst : g.me;
    const size_t sp = g.spair(buf, i);
    const size_t row_off = lsa ? g.off_rows + r * g.row_bytes : g.off_srows + sp * g.row_bytes;
    const size_t sc_off = lsa ? g.off_scales + r * g.nsc * 4 : g.off_sscales + sp * g.nsc * 4;
    const size_t meta_off = lsa ? g.off_meta + r * 8 : g.off_smeta + sp * 8;
    if (!p.fp8) {
      char* to = at<char>(ctx, p.win, row_off, wr);
      warp_copy_row(
          chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
          [&](int c, uint4 v) { ptx::st_v4(to + (size_t)c * 16, v); });
    }
    // fp8: kRowUnroll chunks per lane loaded before any is quantized (latency, as in
    // warp_copy_row); the shuffles stay within each half-warp's 16 lanes.
    for (int c0 = 0; p.fp8 && c0 < chunks; c0 += 32 * kRowUnroll) {
      uint4 v[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int c = c0 + 32 * u + lane;
        v[u] = c < chunks ? ptx::ld_nc_v4(src + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        if (c0 + 32 * u >= chunks) break;  // warp-uniform
        const int c = c0 + 32 * u + lane;
        const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v[u]);
        float f[8], amax = 0.0f;
        for (int k = 0; k < 8; ++k) {
          f[k] = __bfloat162float(h[k]);
          amax = fmaxf(amax, fabsf(f[k]));
        }
        for (int o = 8; o >= 1; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        uint2 q;
        uint8_t* qb = reinterpret_cast<uint8_t*>(&q);
        for (int k = 0; k < 8; ++k) qb[k] = (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(f[k], scale), __NV_SATFINITE, __NV_E4M3);
        if (c < chunks) {
          *at<uint2>(ctx, p.win, row_off + (size_t)c * 8, wr) = q;
          if (c % 16 == 0) *at<float>(ctx, p.win, sc_off + (size_t)(c / 16) * 4, wr) = scale;
        }
      }
    }
    if (lane == 0) *at<int2>(ctx, p.win, meta_off, wr) = make_int2(t, j);
    if (!lsa) {  // warp-uniform
      __threadfence_system();
      const int sig = g.signal(Geo::kSigRows, buf, g.me);
      dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.off_rows + r * g.row_bytes, p.win, row_off, g.row_bytes, sig, 1);
      if (g.nsc)
        dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.off_scales + r * g.nsc * 4, p.win, sc_off, g.nsc * 4, sig, 1);
      dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.off_meta + r * 8, p.win, meta_off, 8, sig, 1);
    }
  }
  release_to_all(p, g.off_done, buf, e);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
}

__global__ void __launch_bounds__(kThreads) recv(const __grid_constant__ Params p) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs + g.G);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  if (threadIdx.x < g.P && dev::is_lsa_peer(ctx, threadIdx.x))
    dev::wait_flag(dev::Thread{}, ctx, at<uint64_t>(ctx, p.win, g.slot(buf, threadIdx.x), g.me), e,
                   cuda::memory_order_acquire, "ep.ll.recv.counts");
  else if (threadIdx.x < g.P)  // a GIN source's slot: one put per call
    dev::wait_signal(dev::Thread{}, ctx, g.signal(Geo::kSigCounts, buf, threadIdx.x),
                     p.s.sig0[sig_slot(g, Geo::kSigCounts, buf, threadIdx.x)] + (e + 1) / 2,  // calls of this parity
                     cuda::memory_order_acquire, "ep.ll.recv.counts");
  wait_every_channel(p, g.off_done, buf, e, "ep.ll.recv.rows", 0);
  if (g.gin)
    wait_gin(p, Geo::kSigRows, buf, 0, [&](int q) { return rows_from(p, buf, q) * row_puts(g); }, "ep.ll.recv.rows", 0);
  if (threadIdx.x < g.P && *at<int>(ctx, p.win, g.slot(buf, threadIdx.x) + 8, g.me) != 0) atomicMax(&bad, threadIdx.x + 1);
  __syncthreads();
  const auto count_of = [&](int src, int l) { return at<const int>(ctx, p.win, g.slot(buf, src) + 16, g.me)[l]; };
  if (bad) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && atomicCAS(&p.s.status->code, 0, 2) == 0) {
      p.s.status->rank = bad - 1;
      __threadfence_system();
    }
    for (int l = blockIdx.x * blockDim.x + threadIdx.x; l < g.L; l += gridDim.x * blockDim.x) p.s.rcount[l] = 0;
    return;
  }
  // Expert l's rows: source 0's, then source 1's, ... A warp per row: row k of all (expert,
  // source, row) in that order goes to warp k mod (grid warps), so a few busy experts still
  // spread over every CTA. pre[x], x = l P + s: the rows before (l, s) in that order.
  __shared__ int pre[kEpMaxExperts + 1];
  const int LP = g.L * g.P;
  block_prefix(pre, LP, [&](int x) { return count_of(x % g.P, x / g.P); });
  const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
  for (int l = threadIdx.x; blockIdx.x == 0 && l < g.L; l += blockDim.x) p.s.rcount[l] = pre[(l + 1) * g.P] - pre[l * g.P];
  for (int k = gw; k < pre[LP]; k += nw) {
    const int x = find_in_prefix(pre, LP, k), l = x / g.P, s = x % g.P, i = k - pre[x];
    const size_t from = g.srow(buf, l, s, i), to = (size_t)l * g.cap + (k - pre[l * g.P]);
    const char* src = at<const char>(ctx, p.win, g.off_rows + from * g.row_bytes, g.me);
    char* dst = p.s.rx + to * g.row_bytes;
    warp_copy_row(
        (int)(g.row_bytes / 16), lane, [&](int c) { return ptx::ld_volatile_v4(src + (size_t)c * 16); },
        [&](int c, uint4 v) { ptx::st_v4(dst + (size_t)c * 16, v); });
    for (size_t c = lane; c < g.nsc; c += 32)
      p.s.rscales[to * g.nsc + c] = at<const float>(ctx, p.win, g.off_scales + (from * g.nsc + c) * 4, g.me)[0];
    if (lane == 0) {
      const int2 m = *at<const int2>(ctx, p.win, g.off_meta + from * 8, g.me);
      p.s.rsrc[to] = s, p.s.rtok[to] = m.x, p.s.rslot[to] = m.y;
    }
  }
  stamp(p.ring, trace::EventKind::kKernelEnd, blockIdx.x);
}

__global__ void __launch_bounds__(kThreads) combine_send(const __grid_constant__ Params p) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs + 2 * g.G);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stamp(p.ring, trace::EventKind::kChunkSend, kCombineId + blockIdx.x);
  const int chunks = g.hidden / 8;
  // Row k of all experts' rows goes to warp k mod (grid warps), as in recv; pre[l]: the rows of
  // the experts before l.
  __shared__ int pre[kEpMaxExperts + 1];
  block_prefix(pre, g.L, [&](int l) { return p.s.rcount[l]; });
  const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
  for (int k = gw; k < pre[g.L]; k += nw) {
    const int l = find_in_prefix(pre, g.L, k), r = k - pre[l];
    const size_t row = (size_t)l * g.cap + r;
    const int s = p.s.rsrc[row];
    const size_t at_s = g.off_cy + g.cyrow(buf, p.s.rtok[row], p.s.rslot[row]) * g.hidden * 2;
    const bool lsa = dev::is_lsa_peer(ctx, s);  // else staged here and put
    char* dst = lsa ? at<char>(ctx, p.win, at_s, s) : at<char>(ctx, p.win, g.off_scy + row * g.hidden * 2, g.me);
    const char* src = p.y + row * g.hidden * 2;
    warp_copy_row(
        chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
        [&](int c, uint4 v) { ptx::st_v4(dst + (size_t)c * 16, v); });
    if (!lsa) {  // warp-uniform
      __threadfence_system();
      dev::put_signal(dev::Warp{}, ctx, s, p.win, at_s, p.win, g.off_scy + row * g.hidden * 2, (size_t)g.hidden * 2,
                      g.signal(Geo::kSigCombine, buf, g.me), 1);
    }
  }
  release_to_all(p, g.off_cdone, buf, e);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
}

// out[t] = sum_j w[t][j] y(t, j) over the slots with an expert, j ascending, fp32, rounded once.
__global__ void __launch_bounds__(kThreads) combine_recv(const __grid_constant__ Params p) {
  const Geo& g = p.g;
  const uint64_t e = next_epoch(p.s.epochs + 3 * g.G);
  const int buf = (int)(e & 1u);
  wait_every_channel(p, g.off_cdone, buf, e, "ep.ll.combine.rows", kCombineId);
  if (*reinterpret_cast<const volatile int*>(&p.s.status->code) != 0) return;  // the dispatch wrote nothing
  if (g.gin)  // every GIN expert rank put back one row per pair of this rank it received
    wait_gin(p, Geo::kSigCombine, buf, 2 * g.P, [&](int d) { return pairs_to(p, d); }, "ep.ll.combine.rows", kCombineId);
  const int vecs = g.hidden / 8;
  const char* local = at<const char>(p.ctx, p.win, 0, g.me);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.s.num_tokens * vecs; i += gridDim.x * blockDim.x) {
    const int t = i / vecs, v = i % vecs;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < g.topk; ++j) {
      if (p.s.pos[t * g.topk + j] < 0) continue;
      const float w = p.weights[t * g.topk + j];
      const uint4 raw = ptx::ld_volatile_v4(local + g.off_cy + g.cyrow(buf, t, j) * g.hidden * 2 + (size_t)v * 16);
      const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&raw);
      for (int k = 0; k < 8; ++k) acc[k] = __fmaf_rn(w, __bfloat162float(y[k]), acc[k]);
    }
    uint4 o;
    __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
    for (int k = 0; k < 8; ++k) ob[k] = __float2bfloat16_rn(acc[k]);
    *reinterpret_cast<uint4*>(p.out + (size_t)t * g.hidden + (size_t)v * 8) = o;
  }
  stamp(p.ring, trace::EventKind::kKernelEnd, kCombineId + blockIdx.x);
}

// After a receive (stream order: every CTA of it is done): the running totals the next call's
// waits count from. The dispatch rows were put whatever the verdict; combine rows only when the
// dispatch was good (a bad one sends nothing back).
__global__ void gin_advance(const __grid_constant__ Params p) {
  const int buf = (int)(p.s.epochs[p.g.G] & 1u);  // the receive's buffer (its CTA 0's epoch)
  for (int q = threadIdx.x; q < p.g.P; q += blockDim.x)
    if (!dev::is_lsa_peer(p.ctx, q)) p.s.gin_total[buf * p.g.P + q] += (uint64_t)rows_from(p, buf, q) * row_puts(p.g);
}

__global__ void gin_advance_combine(const __grid_constant__ Params p) {
  if (*reinterpret_cast<const volatile int*>(&p.s.status->code) != 0) return;
  const int buf = (int)(p.s.epochs[3 * p.g.G] & 1u);  // the combine receive's buffer
  for (int d = threadIdx.x; d < p.g.P; d += blockDim.x)
    if (!dev::is_lsa_peer(p.ctx, d)) p.s.gin_total[(2 + buf) * p.g.P + d] += (uint64_t)pairs_to(p, d);
}

}  // namespace ops::ep::ll

// ------------------------------------------------------------------------------ host
void EpBuffer::init_low_latency() {
  ll_ = std::make_unique<LowLatency>();
  LowLatency& ll = *ll_;
  const int P = comm_.nranks();
  const bool gin = !comm_.all_lsa();
  ll.g = ops::ep::ll::geometry(cfg_, P, comm_.rank(), sms_, gin);
  ll.win = comm_.alloc_window(ll.g.total);
  StreamGuard init;
  const cudaStream_t s0 = init.s;
  ops::ep::ll::Local& s = ll.s;
  const ops::ep::ll::Geo& g = ll.g;
  s.pos = ep_zalloc<int>((size_t)g.max_tokens * g.topk, s0);
  s.cnt = ep_zalloc<int>(g.E, s0);
  s.epochs = ep_zalloc<uint32_t>(4 * (size_t)g.G, s0);
  s.rx = ep_zalloc<char>((size_t)g.L * g.cap * g.row_bytes, s0);
  s.rscales = ep_zalloc<float>((size_t)g.L * g.cap * g.nsc, s0);
  s.rcount = ep_zalloc<int>(g.L, s0);
  s.rsrc = ep_zalloc<int32_t>((size_t)g.L * g.cap, s0);
  s.rtok = ep_zalloc<int32_t>((size_t)g.L * g.cap, s0);
  s.rslot = ep_zalloc<int32_t>((size_t)g.L * g.cap, s0);
  ll.local_bytes = (size_t)g.max_tokens * g.topk * 4 + (size_t)g.E * 4 + 16 * (size_t)g.G +
                   (size_t)g.L * g.cap * (g.row_bytes + 4 * g.nsc + 12) + 4 * (size_t)g.L;
  TW_CUDA_CHECK(cudaMemsetAsync(ll.win.data(), 0, g.off_meta, s0));  // slots and flags start at 0
  if (gin) {  // GIN counters are cumulative and shared with earlier owners: waits count from here
    ll.g.sig = comm_.reserve_signals(6 * P, "EpBuffer (low latency)");
    uint64_t* sig0 = ep_zalloc<uint64_t>(6 * (size_t)P, s0);
    ops::ep::read_signals<<<1, 128, 0, s0>>>(comm_.dev_ctx(), ll.g.sig, 6 * P, sig0);
    TW_CUDA_CHECK(cudaGetLastError());
    s.sig0 = sig0;
    s.gin_total = ep_zalloc<uint64_t>(4 * (size_t)P, s0);
    ll.local_bytes += 80 * (size_t)P;
  }
  comm_.sync(s0);
}

// A refused low-latency call; the message is built only when it is (these checks run per call).
#define TW_EP_REFUSE_UNLESS(ok, op, why) TW_REQUIRE(ok, kInvalidArgument, std::string("EpBuffer::") + (op) + ": " + (why))

// The low-latency state, after the check every call of the mode makes (inside its OpEntry's checks,
// after the communicator's).
EpBuffer::LowLatency& EpBuffer::low_latency(const char* op) {
  TW_EP_REFUSE_UNLESS(ll_ != nullptr, op, "the buffer was made for the high-throughput mode (EpConfig::mode)");
  return *ll_;
}

// What every low-latency kernel takes; the call adds its own pointers.
ops::ep::ll::Params EpBuffer::low_latency_params() const {
  ops::ep::ll::Params p{};
  p.ctx = comm_.dev_ctx();
  p.win = ll_->win.dev();
  p.g = ll_->g;
  p.ring = st_->ring;
  p.s = ll_->s;
  return p;
}

void EpBuffer::dispatch_send(const EpLowLatencyArgs& a, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("dispatch_send");
    TW_EP_REFUSE_UNLESS(ll.step != LowLatency::Step::kSent, "dispatch_send", "the last dispatch_send was not received yet (dispatch_recv)");
    TW_EP_REFUSE_UNLESS(ll.step != LowLatency::Step::kCombineSent, "dispatch_send", "the last combine_send was not received yet (combine_recv)");
    TW_EP_REFUSE_UNLESS(a.num_tokens >= 0 && a.num_tokens <= cfg_.max_tokens_per_rank, "dispatch_send",
              std::to_string(a.num_tokens) + " tokens; the buffer holds at most " + std::to_string(cfg_.max_tokens_per_rank) +
                  " per rank (EpConfig::max_tokens_per_rank)");
    TW_EP_REFUSE_UNLESS(a.num_tokens == 0 || (a.x != nullptr && reinterpret_cast<uintptr_t>(a.x) % 16 == 0), "dispatch_send",
              "x is null or not 16-byte aligned");
    TW_EP_REFUSE_UNLESS(a.num_tokens == 0 || a.topk_idx != nullptr, "dispatch_send", "topk_idx is null");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::dispatch_send", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::dispatch_send", {{"mode", "low latency"}}); });
  LowLatency& ll = *ll_;
  ll.s.num_tokens = a.num_tokens;
  ll.s.status = st_->status_dev;
  ops::ep::ll::Params p = low_latency_params();
  p.x = static_cast<const char*>(a.x);
  p.topk_idx = a.topk_idx;
  p.idx64 = a.index_type == EpIndex::kInt64;
  p.fp8 = cfg_.payload == EpPayload::kFp8E4M3;
  TW_CUDA_CHECK(cudaMemsetAsync(st_->status_dev, 0, sizeof(ops::ep::Status), stream));
  const size_t smem = ((size_t)ops::ep::ll::kLayoutWarps * cfg_.num_experts + (size_t)a.num_tokens * cfg_.topk) * sizeof(int16_t);
  ops::ep::ll::layout<<<1, ops::ep::ll::kLayoutThreads, smem, stream>>>(p);
  TW_CUDA_CHECK(cudaGetLastError());
  ops::ep::ll::send<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  TW_CUDA_CHECK(cudaGetLastError());
  ll.step = LowLatency::Step::kSent;
}

EpLowLatencyRecv EpBuffer::dispatch_recv(cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("dispatch_recv");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kSent, "dispatch_recv", "no dispatch_send to receive");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::dispatch_recv", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::dispatch_recv", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = low_latency_params();
  ops::ep::ll::recv<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  if (ll.g.gin) ops::ep::ll::gin_advance<<<1, 64, 0, stream>>>(p);
  comm_.check_launch("ep low-latency receive launch");
  comm_.launched("ep low-latency receive");
  ll.step = LowLatency::Step::kReceived;
  EpLowLatencyRecv r;
  r.x = ll.s.rx;
  r.x_scales = ll.g.nsc ? ll.s.rscales : nullptr;
  r.count = ll.s.rcount;
  r.src_rank = ll.s.rsrc;
  r.src_token = ll.s.rtok;
  r.capacity = ll.g.cap;
  return r;
}

void EpBuffer::combine_send(const void* y, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("combine_send");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kReceived, "combine_send", "combine_send follows a dispatch_recv");
    TW_EP_REFUSE_UNLESS(y != nullptr && reinterpret_cast<uintptr_t>(y) % 16 == 0, "combine_send", "y is null or not 16-byte aligned");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::combine_send", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::combine_send", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = low_latency_params();
  p.y = static_cast<const char*>(y);
  ops::ep::ll::combine_send<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  TW_CUDA_CHECK(cudaGetLastError());
  ll.step = LowLatency::Step::kCombineSent;
}

void EpBuffer::combine_recv(const float* topk_weights, void* out, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("combine_recv");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kCombineSent, "combine_recv", "no combine_send to receive");
    TW_EP_REFUSE_UNLESS(ll.s.num_tokens == 0 || (topk_weights != nullptr && out != nullptr &&
                                       reinterpret_cast<uintptr_t>(out) % 16 == 0),
              "combine_recv", "topk_weights or out is null, or out is not 16-byte aligned");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::combine_recv", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::combine_recv", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = low_latency_params();
  p.weights = topk_weights;
  p.out = static_cast<__nv_bfloat16*>(out);
  ops::ep::ll::combine_recv<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  if (ll.g.gin) ops::ep::ll::gin_advance_combine<<<1, 64, 0, stream>>>(p);
  comm_.check_launch("ep low-latency combine launch");
  comm_.launched("ep low-latency combine");
  ll.step = LowLatency::Step::kIdle;
}

}  // namespace tw
