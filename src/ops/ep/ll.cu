// The low-latency EP mode (tilewire/ops/ep.hpp, EpMode::kLowLatency): kernels and launches.
//
// A row per (token, expert), one copy: the send stores token t's row for expert e = d x L + l
// straight into the slot of rank d's receive block that the expert reads, row
// base(e) + pos of expert l, where pos = the number of earlier tokens of this rank that chose e
// (a per-expert scan in the layout kernel: no atomics) and base(e) = the rows that lower ranks
// send to e. So that the sender knows base(e), every rank's send first publishes its counts
// per expert (all E of them) to every rank and waits for every rank's: the counts travel ahead
// of the rows in the same kernel, and a rank's counts of call e also say that it has begun call
// e, which ends its use of call e - 1's rows (valid until its next dispatch_send): that is
// what lets a single receive block, at a fixed address, take the next call's rows. Each row's
// source rank and token (and, for a GIN source, its top-k slot) travel with it. The receive
// waits for every source's rows (a flag per source and CTA) and writes the counts per expert;
// it moves nothing per row.
//
// Combine is a pull: the expert rank's rows y(l, r) are in its window's combine block (the
// caller's expert GEMM writes there, or combine_send copies them in), combine_send releases a
// flag per CTA, and each source reads its tokens' rows from the expert ranks with every top-k
// load in flight, summing w x y in fp32 in slot order (one read of each row, no staging).
//
// Why the blocks can be reused at once: a sender writes rank d's receive block for call e + 1
// only after d's counts of call e + 1 arrived (d has begun call e + 1, so it no longer reads
// call e's rows); a source pulls d's combine block of call e in its combine_recv of call e,
// which precedes its send of call e + 1, and d's combine_send of call e + 1 follows its receive
// of call e + 1, which waited for that send. Count slots and flags alternate with the call's
// parity: a rank may publish call e + 1's counts while a slower peer still reads call e's.
//
// Peers outside the LSA team (GIN; run under the emulated GIN of virtual nodes): what would be
// stored into such a peer's window is stored into this rank's staging (Geo::off_s*) and put,
// with a signal add, to the offsets the LSA store would have used; the receiver waits for its
// counters (one per phase, call parity and source) to reach the counts it expects (1 per call
// for the count slot; per row for rows, from the counts) instead of flags. Combine rows for a
// GIN source are put from the combine block into that source's landing rows [t][j] (it cannot
// pull them). The dispatch staging alternates with the call's parity (a put of call e has
// landed before the sender's call e + 2 rewrites its source).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include <algorithm>
#include <cfloat>
#include <mutex>
#include <string>

#include "../../runtime/op_entry.hpp"
#include "../../runtime/pdl_launch.hpp"
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
    if (!dev::is_lsa_peer(p.ctx, i / g.G)) continue;  // a GIN source: its counter (wait_gin)
    dev::wait_flag(dev::Thread{}, p.ctx, at<uint64_t>(p.ctx, p.win, g.done(base, buf, i / g.G, i % g.G), g.me), e,
                   cuda::memory_order_acquire, what);
    if (blockIdx.x == 0 && i % g.G == g.G - 1) trace::emit(p.ring, trace::EventKind::kChunkRecv, id0 + i / g.G, ptx::globaltimer());
  }
  __syncthreads();
}

// The fence that orders a CTA's stores before its flags, and the flag's release. A flag read by
// another rank needs system scope (another GPU, or host memory on virtual nodes). A team of one
// rank writes and flags only its own window, which only this GPU reads: GPU scope orders that,
// as for the own count slot in publish_counts (what the narrower fence saves: docs/ep.md).
__device__ __forceinline__ void fence_before_flags(const Geo& g) {
  if (g.P == 1) __threadfence();
  else __threadfence_system();
}
__device__ __forceinline__ void release_flag(const Geo& g, uint64_t* flag, uint64_t e) {
  if (g.P == 1) cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*flag).store(e, cuda::memory_order_release);
  else ptx::st_release_sys(flag, e);
}

__device__ void release_to_all(const Params& p, size_t base, int buf, uint64_t e) {
  const Geo& g = p.g;
  fence_before_flags(g);
  __syncthreads();
  if (threadIdx.x < g.P && dev::is_lsa_peer(p.ctx, threadIdx.x)) release_flag(g, at<uint64_t>(p.ctx, p.win, g.done(base, buf, g.me, blockIdx.x), threadIdx.x), e);
}

// Puts per row dispatched to a GIN peer: the row, its source, token and slot, fp8: its scales.
__device__ __forceinline__ int row_puts(const Geo& g) { return g.nsc ? 5 : 4; }

// Source `src`'s count of call parity `buf` for expert x (0..E-1), in this rank's window.
__device__ __forceinline__ int count_from(const Params& p, int buf, int src, int x) {
  return at<const int>(p.ctx, p.win, p.g.slot(buf, src) + 16, p.g.me)[x];
}

// Rows a source put into this rank's receive block at call parity `buf` (its counts for this
// rank's experts).
__device__ __forceinline__ int rows_from(const Params& p, int buf, int src) {
  int n = 0;
  for (int l = 0; l < p.g.L; ++l) n += count_from(p, buf, src, p.g.me * p.g.L + l);
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
// by warp 0 in chunks of 32 (n <= kEpMaxExperts), then the CTA synchronized. A warp or thread
// then finds its row by binary search instead of walking the experts on dependent loads (which
// once made the receive 3.6x slower than the send; docs/ep.md).
template <class V>
__device__ void block_prefix(int* pre, int n, V v) {
  for (int x = threadIdx.x; x < n; x += blockDim.x) pre[x] = v(x);  // every load in flight at once
  __syncthreads();
  if (threadIdx.x < 32) {
    int carry = 0;
    for (int x0 = 0; x0 < n; x0 += 32) {
      const int x = x0 + (int)threadIdx.x;
      const int mine = x < n ? pre[x] : 0;
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
// The layout of this rank's routing, computed by every CTA of the send in its shared memory (a
// kernel of its own cost a launch per step, more than the work): pos[t][j] = the number of
// earlier (token, slot) entries of this rank with the same expert (a repeat within a token's row
// is refused below, so: earlier tokens), and cnt[e], the count per expert. Deterministic without
// ordering: a bit per (expert, token) in shared memory, set by the thread that owns the token
// (its slots in order, so a repeat is the later slot, the one whose bit was already set); then
// pos = the bits of expert e below token t (the popcounts of e's earlier words, summed once per
// (expert, word), plus the word's bits below t) and cnt[e] = all of e's bits. Four barriers,
// against eight for the per-warp counting it replaced (4.9 us of a 20 us dispatch). The ids stay
// in shared memory for the send's warps (sid), which then read no routing from global memory.
// Shared memory (layout_smem): the bits [W][E] words and their prefix counts [W][E] int16
// (W = ceil(N / 32); word-major, so that the lanes of a warp, which share a word index and
// differ in expert, fall on different banks), the places and the ids [N topk] int16 each (at
// most 32 x 512 x 6 bytes and 1024 x 16 x 4 bytes: 160 KiB). With `record` (CTA 0) the verdict
// goes to the status: the first entry (in (token, slot) order) with an id out of range, else the
// first repeat, both left out of the layout; and pos and cnt to the device state (combine_recv
// and the GIN totals read them).

struct LayoutSmem {
  const int16_t* pos;  // [n]: the row's place among its expert's rows from this rank, -1: none
  const int16_t* sid;  // [n]: the expert (valid where pos >= 0)
};

__device__ LayoutSmem layout_in_smem(const Params& p, uint32_t* sm, int* cnt, bool record) {
  const Geo& g = p.g;
  const int N = p.s.num_tokens, n = N * g.topk, W = (N + 31) / 32, E = g.E;
  uint32_t* bits = sm;                                             // [W][E]
  int16_t* wpre = reinterpret_cast<int16_t*>(bits + (size_t)W * E);  // [W][E]
  int16_t* pos = wpre + (size_t)W * E;                             // [n]
  int16_t* sid = pos + n;                                          // [n]
  __shared__ int first_out, first_repeat;  // the first entry with an id out of range / a repeat
  if (threadIdx.x == 0) first_out = first_repeat = INT_MAX;
  for (int i = threadIdx.x; i < W * E; i += blockDim.x) bits[i] = 0;
  __syncthreads();
  // A thread per token: its slots' ids (every load in flight), then its bits in slot order. pos
  // holds, for now, the expert (>= 0), -1 (no expert, or out of range) or -(e + 2) (a repeat).
  for (int t = threadIdx.x; t < N; t += blockDim.x) {
    long long ids[kEpMaxTopk];
#pragma unroll
    for (int j = 0; j < kEpMaxTopk; ++j)
      if (j < g.topk)
        ids[j] = p.idx64 ? static_cast<const long long*>(p.topk_idx)[t * g.topk + j]
                         : static_cast<const int*>(p.topk_idx)[t * g.topk + j];
    const uint32_t bit = 1u << (t % 32);
#pragma unroll
    for (int j = 0; j < kEpMaxTopk; ++j) {
      if (j >= g.topk) break;
      const long long e = ids[j];
      int16_t v = -1;
      if (e < -1 || e >= E) {
        atomicMin(&first_out, t * g.topk + j);
      } else if (e >= 0) {
        const uint32_t old = atomicOr(&bits[(size_t)(t / 32) * E + e], bit);
        v = (old & bit) ? (int16_t)(-(e + 2)) : (int16_t)e;
      }
      pos[t * g.topk + j] = v;
      sid[t * g.topk + j] = v;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int c = 0;
    for (int w = 0; w < W; ++w) {
      wpre[(size_t)w * E + e] = (int16_t)c;
      c += __popc(bits[(size_t)w * E + e]);
    }
    cnt[e] = c;
    if (record) p.s.cnt[e] = c;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int v = pos[i];
    if (v >= 0) {
      const int t = i / g.topk;
      const size_t w = (size_t)(t / 32) * E + v;
      pos[i] = (int16_t)(wpre[w] + __popc(bits[w] & ((1u << (t % 32)) - 1u)));
    } else {
      if (v < -1) atomicMin(&first_repeat, i);
      pos[i] = -1;
    }
    if (record) p.s.pos[i] = pos[i];
  }
  __syncthreads();
  // The verdict (CTA 0): an id out of range anywhere takes precedence over a repeat, as the
  // receive's message expects; the status starts clean on every dispatch.
  if (record) {
    if (threadIdx.x == 0) {
      Status st{};
      if (first_out != INT_MAX) {
        const int i = first_out;
        st.code = 1, st.rank = g.me, st.token = i / g.topk, st.slot = i % g.topk;
        st.value = p.idx64 ? static_cast<const long long*>(p.topk_idx)[i] : static_cast<const int*>(p.topk_idx)[i];
      } else if (first_repeat != INT_MAX) {
        const int i = first_repeat;
        st.code = kStatusDuplicate, st.rank = g.me, st.token = i / g.topk, st.slot = i % g.topk;
        st.value = -sid[i] - 2;
      }
      *p.s.status = st;
      __threadfence();  // read on this GPU (publish_counts, the receive) and by the host after a sync
    }
    __syncthreads();
  }
  return {pos, sid};
}

// e4m3 of one 16-byte chunk of bf16 (8 values), scaled per 128 columns: the amax over the
// half-warp's 16 lanes (16 consecutive chunks of a row), q = e4m3(x x (448 / amax)), and the
// row keeps scale = amax / 448. Every lane of the warp calls it (the shuffles).
__device__ __forceinline__ uint2 quantize_chunk(uint4 v, float& scale) {
  // Registers only (a byte pointer into a vector would put it in local memory).
  const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
  float f[8], m[4];
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = __uint_as_float((k % 2 ? wd[k / 2] >> 16 : wd[k / 2] & 0xffffu) << 16);  // exact
  // The chunk's amax as a tree (depth 3, not a chain of 8: fmaxf's result does not depend on
  // the order), then over the half-warp's 16 lanes.
#pragma unroll
  for (int k = 0; k < 4; ++k) m[k] = fmaxf(fabsf(f[2 * k]), fabsf(f[2 * k + 1]));
  float amax = fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
#pragma unroll
  for (int o = 8; o >= 1; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // q = e4m3(x x (448 / amax)), one multiply per element (a division each cost the fp8
  // send twice the bf16 one); the row keeps amax / 448 to dequantize.
  // inv at most FLT_MAX: 448 / amax overflows below amax ~ 1.3e-36, and 0 x inf is NaN.
  scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  const float inv = amax > 0.0f ? fminf(__fdiv_rn(448.0f, amax), FLT_MAX) : 1.0f;
  // Two elements per conversion (cvt.rn.satfinite.e4m3x2: the same rounding as one at a
  // time; the first of the pair in the low byte).
  uint32_t qw[2] = {0, 0};
#pragma unroll
  for (int e2 = 0; e2 < 4; ++e2) {
    const float2 pr = make_float2(__fmul_rn(f[2 * e2], inv), __fmul_rn(f[2 * e2 + 1], inv));
    qw[e2 / 2] |= (uint32_t)__nv_cvt_float2_to_fp8x2(pr, __NV_SATFINITE, __NV_E4M3) << (16 * (e2 % 2));
  }
  return make_uint2(qw[0], qw[1]);
}

// Steps 1 and 2 of either send. publish_counts: CTA 0 publishes this rank's verdict and its
// counts for every expert to every rank. gather_counts: every CTA waits for every rank's counts
// of this call (they place this rank's rows, and each says that its rank has begun the call: it
// reads no earlier rows any more), then base[x] = the rows that lower ranks send to expert x;
// returns whether some rank's routing was refused (every CTA of every rank sees the same). Work
// that needs no count (send_tma's quantization) runs between the two, under the wait.
__device__ void publish_counts(const Params& p, const int* cnt, uint64_t e, int buf) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x == 0)
    for (int d = warp; d < g.P; d += kWarps) {
      const bool lsa = dev::is_lsa_peer(ctx, d);
      const size_t staged = g.off_sslots + ((size_t)buf * g.P + d) * g.slot_bytes;
      char* s = lsa ? at<char>(ctx, p.win, g.slot(buf, g.me), d) : at<char>(ctx, p.win, staged, g.me);
      const int code = *reinterpret_cast<volatile int*>(&p.s.status->code);
      if (lane == 0) *reinterpret_cast<int*>(s + 8) = (code == 1 || code == kStatusDuplicate) ? 1 : 0;
      for (int x = lane; x < g.E; x += 32) reinterpret_cast<int*>(s + 16)[x] = cnt[x];
      if (!lsa && lane == 0) *reinterpret_cast<uint64_t*>(s) = e;
      // This rank's own slot is read by this GPU's CTAs alone: a GPU-scope fence and release
      // (a system-scope fence cost the 1-rank dispatch about 2.8 us before its counts were out).
      const bool own = lsa && d == g.me;
      if (own) __threadfence();
      else __threadfence_system();
      __syncwarp();
      if (own && lane == 0)
        cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*reinterpret_cast<uint64_t*>(s)).store(e, cuda::memory_order_release);
      else if (lsa && lane == 0) ptx::st_release_sys(reinterpret_cast<uint64_t*>(s), e);
      if (!lsa)
        dev::put_signal(dev::Warp{}, ctx, d, p.win, g.slot(buf, g.me), p.win, staged, g.slot_bytes,
                        g.signal(Geo::kSigCounts, buf, g.me), 1);
      if (lane == 0 && d == g.P - 1) trace::emit(p.ring, trace::EventKind::kChunkSend, kCountsId, ptx::globaltimer());
    }
}

__device__ bool gather_counts(const Params& p, uint64_t e, int buf, int* base) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  for (int q = threadIdx.x; q < g.P; q += blockDim.x) {
    if (dev::is_lsa_peer(ctx, q))
      dev::wait_flag(dev::Thread{}, ctx, at<uint64_t>(ctx, p.win, g.slot(buf, q), g.me), e, cuda::memory_order_acquire,
                     "ep.ll.send.counts");
    else  // a GIN rank's slot: one put per call of this parity
      dev::wait_signal(dev::Thread{}, ctx, g.signal(Geo::kSigCounts, buf, q),
                       p.s.sig0[sig_slot(g, Geo::kSigCounts, buf, q)] + (e + 1) / 2, cuda::memory_order_acquire,
                       "ep.ll.send.counts");
  }
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  stamp(p.ring, trace::EventKind::kChunkRecv, kCountsId + blockIdx.x);
  for (int q = threadIdx.x; q < g.P; q += blockDim.x)
    if (*at<const int>(ctx, p.win, g.slot(buf, q) + 8, g.me) != 0) bad = 1;
  for (int x = threadIdx.x; x < g.E; x += blockDim.x) {
    int b = 0;
    for (int q = 0; q < g.me; ++q) b += count_from(p, buf, q, x);
    base[x] = b;
  }
  __syncthreads();
  return bad != 0;
}

__device__ bool exchange_counts(const Params& p, const int* cnt, uint64_t e, int buf, int* base) {
  publish_counts(p, cnt, e, buf);
  return gather_counts(p, e, buf, base);
}

// send_tma's fp8 rows: every warp of the CTA quantizes, a half-warp per group of 128 columns
// (16 chunks; the amax's shuffles stay in the half), the CTA's groups dealt round-robin, from
// the bf16 rows into the quantized rows and their scales (tma_row_smem's regions). One warp per
// row took the fp8 send 4 us over the bf16 one: 56 dependent rounds at H 7168. The bulk
// stores read what this writes: each writer fences into the async proxy here, and a CTA barrier
// (gather_counts') comes before the first store.
__device__ void quantize_rows_smem(const Params& p, char* rows, size_t rs, int ntok, const uint64_t* loaded) {
  const int H = p.g.hidden, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Every row of the CTA has landed (bounded, as every EP wait).
  if (lane < ntok)
    dev::bounded_spin(
        p.ctx, "ep.ll.send.rows_smem", 1, [&] { return (uint64_t)cutlass::arch::ClusterBarrier::try_wait(&loaded[lane], 0u); },
        [](uint64_t v) { return v != 0; });
  __syncwarp();
  const int groups = H / 128, items = ntok * groups;
  for (int it = 2 * warp; it < items; it += 2 * kWarps) {  // warp-uniform: both halves shuffle
    const int item = it + lane / 16, tok = item / groups, c = (item % groups) * 16 + lane % 16;
    const bool ok = item < items;
    char* const row = rows + (size_t)tok * rs;
    const uint4 v = ok ? *reinterpret_cast<const uint4*>(row + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
    float scale;
    const uint2 q = quantize_chunk(v, scale);
    if (ok) {
      *reinterpret_cast<uint2*>(row + 2 * (size_t)H + (size_t)c * 8) = q;
      if (lane % 16 == 0) reinterpret_cast<float*>(row + 3 * (size_t)H)[c / 16] = scale;
    }
  }
  cute::tma_store_fence();
}

__global__ void __launch_bounds__(kThreads) send(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  if (p.early) ptx::griddep_launch_dependents();  // the next kernel waits for this one's end (Params::early)
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stamp(p.ring, trace::EventKind::kKernelStart, blockIdx.x);
  extern __shared__ uint32_t lsm[];
  __shared__ int cnt[kEpMaxExperts];
  stamp(p.ring, trace::EventKind::kMmaStart, kLayoutId + blockIdx.x);
  const LayoutSmem lay = layout_in_smem(p, lsm, cnt, blockIdx.x == 0);
  const int16_t* pos = lay.pos;
  stamp(p.ring, trace::EventKind::kMmaEnd, kLayoutId + blockIdx.x);
  __shared__ int base[kEpMaxExperts];  // rows that lower ranks send to expert x
  const bool bad = exchange_counts(p, cnt, e, buf, base);
  stamp(p.ring, trace::EventKind::kChunkSend, blockIdx.x);
  // 3. p.parts warps per (token, expert) pair, each a range of its 16-byte chunks (a multiple of
  //    16: whole fp8 scale groups), so that a decode batch of a few tokens still spreads over
  //    every warp of the grid and each lane has one or two rounds of loads in flight: the token's
  //    bf16 row (read from L2 after the first of its pairs) is stored into the expert's receive
  //    row; fp8 quantizes it per 128 columns, a half-warp per group of 16 chunks. Item k (pair
  //    k / parts) goes to CTA k mod G, warp (k / G) mod kWarps (in CTA-major order the first
  //    pairs filled half the grid). Nothing when some rank's routing was refused (every rank
  //    sees it).
  const int all_chunks = g.hidden / 8;  // 16-byte bf16 chunks
  const int per_part = ((all_chunks + p.parts - 1) / p.parts + 15) / 16 * 16;
  for (int k = blockIdx.x + warp * gridDim.x; !bad && k < p.s.num_tokens * g.topk * p.parts; k += gridDim.x * kWarps) {
    const int i = k / p.parts, part = k % p.parts;
    if (pos[i] < 0) continue;  // warp-uniform: one item per warp
    const int c_begin = min(all_chunks, part * per_part), chunks = min(all_chunks, c_begin + per_part) - c_begin;
    const int t = i / g.topk, j = i % g.topk;
    const int id = lay.sid[i];
    const int dst = id / g.L;
    const size_t r = (size_t)(id % g.L) * g.cap + base[id] + pos[i];  // the row in dst's receive block
    if (lane == 0 && part == 0) p.s.route[i] = make_int2(dst, (int)r);
    const char* src = p.x + (size_t)t * g.hidden * 2 + (size_t)c_begin * 16;
    // An LSA destination's receive row directly; a GIN one's through this rank's staging.
    const bool lsa = dev::is_lsa_peer(ctx, dst);
    const int wr = lsa ? dst : g.me;
    const size_t sp = g.spair(buf, i);
    // This part's first byte of the row (bf16 16 bytes per chunk, fp8 8) and its first scale.
    const size_t row_off = (lsa ? g.off_rows + r * g.row_bytes : g.off_srows + sp * g.row_bytes) + (size_t)c_begin * (p.fp8 ? 8 : 16);
    const size_t sc_off = (lsa ? g.off_scales + r * g.nsc * 4 : g.off_sscales + sp * g.nsc * 4) + (size_t)(c_begin / 16) * 4;
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
        float scale;
        const uint2 q = quantize_chunk(v[u], scale);
        if (c < chunks) {
          *at<uint2>(ctx, p.win, row_off + (size_t)c * 8, wr) = q;
          if (c % 16 == 0) *at<float>(ctx, p.win, sc_off + (size_t)(c / 16) * 4, wr) = scale;
        }
      }
    }
    // The row's source rank and token travel with it (lanes 0 and 1, one store each; lane 2 the
    // top-k slot, which only a GIN expert rank reads, to put the combined row back): the
    // receive then writes nothing per row.
    if (part == 0 && lane < (lsa ? 2 : 3))
      *at<int>(ctx, p.win, lsa ? g.meta(lane, r) : g.smeta(lane, buf, i), wr) = lane == 0 ? g.me : lane == 1 ? t : j;
    if (!lsa) {  // warp-uniform (a GIN team sends whole rows: parts is 1)
      __threadfence_system();
      const int sig = g.signal(Geo::kSigRows, buf, g.me);
      dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.off_rows + r * g.row_bytes, p.win, row_off, g.row_bytes, sig, 1);
      if (g.nsc)
        dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.off_scales + r * g.nsc * 4, p.win, sc_off, g.nsc * 4, sig, 1);
      for (int k = 0; k < 3; ++k) dev::put_signal(dev::Warp{}, ctx, dst, p.win, g.meta(k, r), p.win, g.smeta(k, buf, i), 4, sig, 1);
    }
  }
  release_to_all(p, g.off_done, buf, e);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
}

// The send through the CTA's copy engine (an all-LSA team whose CTAs' rows fit in shared memory:
// EpBuffer::dispatch_send chooses, tma_send_smem). CTA b owns tokens b, b + G, .. (at most
// kTmaTokens, a warp each). Their bf16 rows are bulk-loaded into shared memory first, so the
// loads run under the layout and the count exchange; fp8 quantizes each row once, in shared
// memory, with every warp of the CTA, between publishing this rank's counts and waiting for its
// peers' (quantize_rows_smem); then lane j of token t's warp bulk-stores the row (fp8: and its
// scales) into slot j's receive row, with its source rank and token beside it. The rows are read once per token, no
// register holds them, and all of a CTA's stores are in flight at once; they are complete
// (written, not only read) before the CTA's fence and flags, as in the warp send.
__global__ void __launch_bounds__(kThreads) send_tma(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  if (p.early) ptx::griddep_launch_dependents();  // the next kernel waits for this one's end (Params::early)
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stamp(p.ring, trace::EventKind::kKernelStart, blockIdx.x);
  extern __shared__ __align__(128) uint32_t tma_sm[];  // the layout, then the rows
  __shared__ int cnt[kEpMaxExperts];
  __shared__ __align__(8) uint64_t loaded[kTmaTokens];
  const int N = p.s.num_tokens, G = (int)gridDim.x, H = g.hidden;
  const int ntok = (int)blockIdx.x < N ? min(kTmaTokens, (N - 1 - (int)blockIdx.x) / G + 1) : 0;
  char* const rows = reinterpret_cast<char*>(tma_sm) + tma_rows_offset(g.E, N, g.topk);
  const size_t rs = tma_row_smem(H, p.fp8);
  // 0. The rows: one bulk load each, completing loaded[i] by its bytes.
  if ((int)threadIdx.x < ntok) {
    const int i = threadIdx.x;
    cutlass::arch::ClusterTransactionBarrier::init(&loaded[i], 1);
    cutlass::arch::fence_barrier_init();
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&loaded[i], (uint32_t)(2 * H));
    cute::SM90_BULK_COPY_G2S::copy(p.x + (size_t)(blockIdx.x + i * G) * 2 * H, &loaded[i], rows + i * rs, 2 * H);
  }
  stamp(p.ring, trace::EventKind::kMmaStart, kLayoutId + blockIdx.x);
  const LayoutSmem lay = layout_in_smem(p, tma_sm, cnt, blockIdx.x == 0);  // its barriers publish loaded[]'s init
  stamp(p.ring, trace::EventKind::kMmaEnd, kLayoutId + blockIdx.x);
  publish_counts(p, cnt, e, buf);
  if (p.fp8) quantize_rows_smem(p, rows, rs, ntok, loaded);
  __shared__ int base[kEpMaxExperts];
  const bool bad = gather_counts(p, e, buf, base);
  stamp(p.ring, trace::EventKind::kChunkSend, blockIdx.x);
  if (warp < ntok) {
    const int t = (int)blockIdx.x + warp * G;
    char* const row = rows + warp * rs;
    // Every load completes before the CTA ends, refused call or not (bounded, as every EP wait).
    dev::bounded_spin(
        ctx, "ep.ll.send.rows_smem", 1, [&] { return (uint64_t)cutlass::arch::ClusterBarrier::try_wait(&loaded[warp], 0u); },
        [](uint64_t v) { return v != 0; });
    __syncwarp();
    if (!bad) {
      // fp8: the quantized row and its scales (quantize_rows_smem), after the bf16 row.
      const char* const q = p.fp8 ? row + 2 * H : row;
      const char* const sc = row + 3 * H;
      const int i = t * g.topk + lane;
      if (lane < g.topk && lay.pos[i] >= 0) {
        const int id = lay.sid[i], dst = id / g.L;
        const size_t r = (size_t)(id % g.L) * g.cap + base[id] + lay.pos[i];
        p.s.route[i] = make_int2(dst, (int)r);
        // The destination's counts were acquired in the generic proxy (it no longer reads its
        // earlier rows); the bulk stores that overwrite them go through the async proxy.
        ptx::fence_proxy_async_global();
        cute::SM90_BULK_COPY_S2G::copy(q, at<char>(ctx, p.win, g.off_rows + r * g.row_bytes, dst), (int32_t)g.row_bytes);
        if (p.fp8) cute::SM90_BULK_COPY_S2G::copy(sc, at<char>(ctx, p.win, g.off_scales + r * g.nsc * 4, dst), (int32_t)(g.nsc * 4));
        *at<int>(ctx, p.win, g.meta(0, r), dst) = g.me;
        *at<int>(ctx, p.win, g.meta(1, r), dst) = t;
        cute::tma_store_arrive();
        ptx::bulk_wait_all_writes();  // written before release_to_all's fence and flags
      }
    }
  }
  release_to_all(p, g.off_done, buf, e);
}

// The rows are where the expert reads them, each with its source rank, token and slot (the
// sender stored them with the row): the receive, one CTA, waits for them and counts each
// expert's rows.
static_assert(kEpMaxExperts <= kThreads, "recv: a thread per local expert");
__global__ void __launch_bounds__(kThreads) recv(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs + g.G);
  const int buf = (int)(e & 1u), l = threadIdx.x;
  const bool counts = l < g.L;  // a thread per local expert
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  // This call's counts arrived before this rank's send ended (stream order); the rows:
  wait_every_channel(p, g.off_done, buf, e, "ep.ll.recv.rows", 0);
  // The verdicts and expert l's rows (every source's count for it) in one round of loads; the
  // barrier publishes `bad`.
  if (threadIdx.x < g.P && *at<const int>(ctx, p.win, g.slot(buf, threadIdx.x) + 8, g.me) != 0) atomicMax(&bad, threadIdx.x + 1);
  int n = 0;
  for (int q = 0; counts && q < g.P; ++q) n += count_from(p, buf, q, g.me * g.L + l);
  __syncthreads();
  if (bad) {  // no rank sent rows
    if (threadIdx.x == 0 && atomicCAS(&p.s.status->code, 0, 2) == 0) {
      p.s.status->rank = bad - 1;
      __threadfence_system();
    }
    if (counts) p.s.rcount[l] = 0;
    return;
  }
  // A GIN source's rows are waited for only when no rank was refused (it put none otherwise).
  if (g.gin)
    wait_gin(p, Geo::kSigRows, buf, 0, [&](int q) { return rows_from(p, buf, q) * row_puts(g); }, "ep.ll.recv.rows", 0);
  if (counts) p.s.rcount[l] = n;
  stamp(p.ring, trace::EventKind::kKernelEnd, blockIdx.x);
}

// The combine block holds y (p.y null: the caller wrote it there; else copied in here); the
// flags tell every source it may pull. A GIN source cannot pull: its rows are put into its
// landing rows [t][j].
__global__ void __launch_bounds__(kThreads) combine_send(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  if (p.early) ptx::griddep_launch_dependents();  // the next kernel waits for this one's end (Params::early)
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const uint64_t e = next_epoch(p.s.epochs + 2 * g.G);
  const int buf = (int)(e & 1u), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stamp(p.ring, trace::EventKind::kChunkSend, kCombineId + blockIdx.x);
  if (p.y != nullptr || g.gin) {
    // Row k of all experts' rows goes to CTA k mod G (as the send's pairs); pre[l]: the rows of
    // the experts before l.
    __shared__ int pre[kEpMaxExperts + 1];
    block_prefix(pre, g.L, [&](int l) { return p.s.rcount[l]; });
    const size_t rb = (size_t)g.hidden * 2;
    for (int k = blockIdx.x + warp * gridDim.x; k < pre[g.L]; k += gridDim.x * kWarps) {
      const int l = find_in_prefix(pre, g.L, k);
      const size_t row = (size_t)l * g.cap + (k - pre[l]);
      char* yb = at<char>(ctx, p.win, g.off_y + row * rb, g.me);
      if (p.y != nullptr) {
        const char* src = p.y + row * rb;
        warp_copy_row(
            (int)(rb / 16), lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
            [&](int c, uint4 v) { ptx::st_v4(yb + (size_t)c * 16, v); });
      }
      const int s = g.gin ? *at<const int>(ctx, p.win, g.meta(0, row), g.me) : g.me;
      if (!dev::is_lsa_peer(ctx, s)) {  // warp-uniform
        __threadfence_system();
        const int t = *at<const int>(ctx, p.win, g.meta(1, row), g.me), j = *at<const int>(ctx, p.win, g.meta(2, row), g.me);
        dev::put_signal(dev::Warp{}, ctx, s, p.win, g.off_cy + g.cyrow(t, j) * rb, p.win, g.off_y + row * rb, rb,
                        g.signal(Geo::kSigCombine, buf, g.me), 1);
      }
    }
  }
  release_to_all(p, g.off_cdone, buf, e);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
}

// combine_send when y is already in the combine block and every peer is an LSA peer: nothing to
// copy or put, so one CTA releases every channel's flag to every peer, as combine_send's G CTAs
// would (each its own channel), and lets the receive's CTAs launch beside it: two full grids in
// a row pay a launch each (the floors in docs/ep.md: 3.9 us for one empty kernel, 6.7 for two
// chained). The G per-CTA counters move together (combine_send's CTA b reads counter b).
__global__ void __launch_bounds__(kThreads) combine_release(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  __shared__ uint64_t e;
  if (threadIdx.x == 0) e = p.s.epochs[2 * g.G] + 1;
  __syncthreads();
  for (int c = threadIdx.x; c < g.G; c += blockDim.x) p.s.epochs[2 * g.G + c] = e;
  const int buf = (int)(e & 1u);
  stamp(p.ring, trace::EventKind::kChunkSend, kCombineId);
  fence_before_flags(g);
  __syncthreads();
  for (int i = threadIdx.x; i < g.P * g.G; i += blockDim.x) {
    const int d = i / g.G, c = i % g.G;
    if (dev::is_lsa_peer(ctx, d)) release_flag(g, at<uint64_t>(ctx, p.win, g.done(g.off_cdone, buf, g.me, c), d), e);
  }
}

// out[t] = sum_j w[t][j] y(t, j) over the slots with an expert, j ascending, fp32, rounded once.
// A thread per 16 bytes of an output row issues the loads of all its slots before the first add
// (from the expert rank's combine block, or this rank's landing rows for a GIN expert rank);
// with kItems 2 it takes two such 16-byte items a grid-stride apart and has both items' loads in
// flight before the first add (a grid of G CTAs covers 128 tokens at H 7168 in 1.7 strides,
// 256 in 3.4, and each stride's loads otherwise wait for the stride before). kTopk bounds the
// slots (8, or kEpMaxTopk with one item: two items of 16 slots would not fit the registers).
template <int kTopk, int kItems>
__device__ __forceinline__ void combine_rows(const Params& p) {
  const Geo& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int vecs = g.hidden / 8, total = p.s.num_tokens * vecs, stride = gridDim.x * blockDim.x;
  const size_t rb = (size_t)g.hidden * 2;
  for (int i0 = blockIdx.x * blockDim.x + threadIdx.x; i0 < total; i0 += kItems * stride) {
    uint4 raw[kItems][kTopk];
    unsigned have[kItems];
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const int i = i0 + u * stride, t = i / vecs, v = i % vecs;
      have[u] = 0;
#pragma unroll
      for (int j = 0; j < kTopk; ++j) {
        if (i >= total || j >= g.topk || p.s.pos[t * g.topk + j] < 0) continue;
        const int2 rt = p.s.route[t * g.topk + j];
        const char* row = dev::is_lsa_peer(ctx, rt.x) ? at<const char>(ctx, p.win, g.off_y + (size_t)rt.y * rb, rt.x)
                                                      : at<const char>(ctx, p.win, g.off_cy + g.cyrow(t, j) * rb, g.me);
        raw[u][j] = ptx::ld_volatile_v4(row + (size_t)v * 16);
        have[u] |= 1u << j;
      }
    }
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const int i = i0 + u * stride, t = i / vecs, v = i % vecs;
      if (i >= total) break;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < kTopk; ++j) {
        if (!(have[u] >> j & 1u)) continue;
        const float w = p.weights[t * g.topk + j];
        const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&raw[u][j]);
        for (int k = 0; k < 8; ++k) acc[k] = __fmaf_rn(w, __bfloat162float(y[k]), acc[k]);
      }
      uint4 o;
      __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
      for (int k = 0; k < 8; ++k) ob[k] = __float2bfloat16_rn(acc[k]);
      *reinterpret_cast<uint4*>(p.out + (size_t)t * g.hidden + (size_t)v * 8) = o;
    }
  }
}

__global__ void __launch_bounds__(kThreads) combine_recv(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  const Geo& g = p.g;
  const uint64_t e = next_epoch(p.s.epochs + 3 * g.G);
  const int buf = (int)(e & 1u);
  wait_every_channel(p, g.off_cdone, buf, e, "ep.ll.combine.rows", kCombineId);
  if (*reinterpret_cast<const volatile int*>(&p.s.status->code) != 0) return;  // the dispatch wrote nothing
  if (g.gin)  // every GIN expert rank put back one row per pair of this rank it received
    wait_gin(p, Geo::kSigCombine, buf, 2 * g.P, [&](int d) { return pairs_to(p, d); }, "ep.ll.combine.rows", kCombineId);
  if (g.topk <= 8) combine_rows<8, 2>(p);
  else combine_rows<kEpMaxTopk, 1>(p);
  stamp(p.ring, trace::EventKind::kKernelEnd, kCombineId + blockIdx.x);
}

// After a receive (stream order: every CTA of it is done): the running totals the next call's
// waits count from. A refused call put no rows and brings nothing back in combine.
__global__ void gin_advance(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  if (*reinterpret_cast<const volatile int*>(&p.s.status->code) != 0) return;
  const int buf = (int)(p.s.epochs[p.g.G] & 1u);  // the receive's buffer (its CTA 0's epoch)
  for (int q = threadIdx.x; q < p.g.P; q += blockDim.x)
    if (!dev::is_lsa_peer(p.ctx, q)) p.s.gin_total[buf * p.g.P + q] += (uint64_t)rows_from(p, buf, q) * row_puts(p.g);
}

__global__ void gin_advance_combine(const __grid_constant__ Params p) {
  ptx::griddep_wait();
  if (*reinterpret_cast<const volatile int*>(&p.s.status->code) != 0) return;
  const int buf = (int)(p.s.epochs[3 * p.g.G] & 1u);  // the combine receive's buffer
  for (int d = threadIdx.x; d < p.g.P; d += blockDim.x)
    if (!dev::is_lsa_peer(p.ctx, d)) p.s.gin_total[(2 + buf) * p.g.P + d] += (uint64_t)pairs_to(p, d);
}

}  // namespace ops::ep::ll

}  // namespace tw
