// The EP kernels (kernels.cuh). Memory-order argument, once: a source's CTA b writes its rows
// (plain 16-byte stores into the peer's window), fences at system scope, synchronizes the CTA,
// and releases its flag (st.release.sys) to that peer; the peer's CTA b acquires the flag
// (bounded wait) and synchronizes: every thread of it, and after the kernel ends every later
// kernel on its stream, sees the rows. Count slots work the same way. Nothing here uses the
// async proxy (no TMA or bulk copies), so no proxy fence is needed (device/ptx.cuh's rule).
#include <cub/block/block_scan.cuh>

#include "expert_rows.cuh"
#include "kernels.cuh"
#include "tilewire/device/put.cuh"
#include "tilewire/device/signal.cuh"
#include "tilewire/device/wait.cuh"

namespace tw::ops::ep {
namespace {

__device__ __forceinline__ long long topk_at(const void* idx, bool idx64, size_t i) {
  return idx64 ? static_cast<const long long*>(idx)[i] : (long long)static_cast<const int*>(idx)[i];
}

// The GIN counter a source's call e has filled when it reaches sig0 + per_call x e (counters are
// cumulative; sig0 holds their values when the buffer was made).
__device__ __forceinline__ uint64_t gin_target(const Common& p, Geometry::Phase ph, int src, uint64_t per_call,
                                               uint64_t e) {
  return p.sig0[(int)ph * p.g.P + src] + per_call * e;
}

// Every source q (thread q, strided) has finished this channel: an LSA source's flag
// base[q][ch] >= e in this rank's window, a GIN source's counter of phase `ph` reached its
// per_call adds for call e (kChunkRecv, id = id0 + q, when it did); then the whole CTA is ordered
// after those acquires.
__device__ void wait_all(const Common& p, size_t base, int ch, uint64_t e, Geometry::Phase ph,
                         uint64_t per_call, const char* what, const trace::Ring& ring, uint32_t id0) {
  const Geometry& g = p.g;
  for (int q = threadIdx.x; q < g.P; q += blockDim.x) {
    if (dev::is_lsa_peer(p.ctx, q))
      dev::wait_flag(dev::Thread{}, p.ctx, at<uint64_t>(p.ctx, p.win, g.flag(base, q, ch), g.me), e,
                     cuda::memory_order_acquire, what);
    else
      dev::wait_signal(dev::Thread{}, p.ctx, g.signal(ph, q), gin_target(p, ph, q, per_call, e),
                       cuda::memory_order_acquire, what);
    trace::emit(ring, trace::EventKind::kChunkRecv, id0 + q, ptx::globaltimer());
  }
  __syncthreads();
}

// This CTA's stores are published, then flag base[me][ch] = e is released at every LSA peer
// (GIN peers are told by the puts' signals).
__device__ void release_all(const Common& p, size_t base, int ch, uint64_t e) {
  const Geometry& g = p.g;
  __threadfence_system();
  __syncthreads();
  for (int q = threadIdx.x; q < g.P; q += blockDim.x)
    if (dev::is_lsa_peer(p.ctx, q)) ptx::st_release_sys(at<uint64_t>(p.ctx, p.win, g.flag(base, g.me, ch), q), e);
}

// Warp-wide: `puts` GIN puts of this rank's window [src_off + i x bytes) to peer's window, each
// adding 1 to the peer's counter `sig`, then what is missing of `per_call` as one signal (puts of
// nothing are not issued), so the peer's counter always grows by per_call.
struct GinPut {
  size_t dst_off, src_off, bytes;
};
template <int N>
__device__ void gin_puts(const Common& p, int peer, const GinPut (&puts)[N], int sig, int per_call) {
  int issued = 0;
  for (int i = 0; i < N; ++i) {
    if (puts[i].bytes == 0) continue;
    dev::put_signal(dev::Warp{}, p.ctx, peer, p.win, puts[i].dst_off, p.win, puts[i].src_off, puts[i].bytes, sig, 1);
    ++issued;
  }
  if (issued < per_call)
    dev::signal(dev::Warp{}, p.ctx, peer, sig, (uint64_t)(per_call - issued), dev::SignalOp::kAdd,
                cuda::memory_order_release);
}

}  // namespace

// The GIN counters' values now (buffer creation: nothing of the buffer is in flight yet).
__global__ void read_signals(DevCtx ctx, int base, int n, uint64_t* out) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = dev::read_signal(ctx, base + i, cuda::memory_order_relaxed);
}

// ------------------------------------------------------------------------------ layout
// One thread per token: which ranks it goes to, and the per-expert counts (integer atomics: the
// counts are exact whatever the order). Ids outside [-1, E) are recorded and skipped.
// A token's destination ranks are one bit each of `mask` (check_ep_config refuses more ranks).
static_assert(kEpMaxRanks <= 32, "layout_count keeps a token's destination ranks in a 32-bit mask");

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


// ------------------------------------------------------------------ EpExpertMajor (Place)
// Expert l's pairs from every source, and its first place: each CTA computes them from the count
// slots (thread l: expert l) into offsets[] (shared), with the total; the verdict follows.
__device__ int place_offsets(const DispatchParams& p, const char* mine, int* offsets) {
  const Geometry& g = p.g;
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int l = threadIdx.x;
  int n = 0;
  for (int q = 0; l < g.L && q < g.P; ++q) n += reinterpret_cast<const int*>(mine + g.slot(q) + 16)[g.P + l];
  int before = 0, all = 0;
  Scan(tmp).ExclusiveSum(n, before, all);
  if (l < g.L) offsets[l] = before;
  __syncthreads();
  return all;
}

// CTA 0, once every rank's counts are in: the layout the GEMM reads (counts, offsets, bounds, the
// overflow), then, once every rank's dispatch CTAs have started, layout_flag = G. `all`: the pairs.
__device__ void place_layout(const DispatchParams& p, uint64_t e, const char* mine, const int* offsets, int all) {
  const Geometry& g = p.g;
  const Place& pl = p.place;
  const bool over = all > pl.max_rows;
  for (int l = threadIdx.x; l < g.L; l += blockDim.x) {
    int b = 0;
    for (int q = 0; q < g.P; ++q) {
      pl.bounds[l * (g.P + 1) + q] = over ? 0 : b;
      b += reinterpret_cast<const int*>(mine + g.slot(q) + 16)[g.P + l];
    }
    pl.bounds[l * (g.P + 1) + g.P] = over ? 0 : b;
    pl.counts[l] = over ? 0 : b;
    pl.offsets[l] = over ? 0 : offsets[l];
  }
  if (threadIdx.x == 0) *pl.overflow = over ? all : 0;
  for (int i = threadIdx.x; i < g.P * (int)gridDim.x; i += blockDim.x)
    dev::wait_flag(dev::Thread{}, p.ctx, at<uint64_t>(p.ctx, p.win, g.flag(g.off_dstart, i / gridDim.x, i % gridDim.x), g.me),
                   e, cuda::memory_order_relaxed, "ep.dispatch.started");
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ptx::st_release_sys(pl.layout_flag, gridDim.x);
}

// A dispatch that writes no rows (a refused routing): no pairs, and every flag raised.
__device__ void place_nothing(const DispatchParams& p) {
  const Geometry& g = p.g;
  const Place& pl = p.place;
  if (blockIdx.x == 0) {
    for (int l = threadIdx.x; l < g.L; l += blockDim.x) {
      pl.counts[l] = pl.offsets[l] = 0;
      for (int q = 0; q <= g.P; ++q) pl.bounds[l * (g.P + 1) + q] = 0;
    }
    if (threadIdx.x == 0) *pl.overflow = 0;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ptx::st_release_sys(pl.layout_flag, gridDim.x);
  }
  __threadfence();
  __syncthreads();
  for (int q = threadIdx.x; q < g.P; q += blockDim.x) ptx::red_add_release_sys(pl.ready + q, 1);
}

// This CTA's share of every source's pairs, sources in rank order (the order of each expert's
// rows, so the GEMM's first tiles are the first ready): once all of source q's channels have
// landed, its rows [lo, hi) (a 1/G split of q's rows) are placed in (row, slot) order, as
// MoE's chunk placement does (lanes with the same expert by __match_any_sync, earlier warps'
// counts from shared memory, q's earlier rows counted first), copied into xg, and ready[q] += 1.
__device__ void place_sources(const DispatchParams& p, uint64_t e, const char* mine, int* sm, bool over) {
  const Geometry& g = p.g;
  const Place& pl = p.place;
  const int P = g.P, L = g.L, k = g.topk, G = gridDim.x, ch = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int* offsets = sm;  // [L] (place_offsets)
  int* bound = sm + L;      // [L]: source q's first pair within expert l
  int* before = sm + 2 * L; // [L]: q's pairs of expert l placed before this point
  int* per_warp = sm + 3 * L;  // [kWarps][L]
  const auto count_at = [&](int q, int d) { return reinterpret_cast<const int*>(mine + g.slot(q) + 16)[d]; };
  const auto* ridx = reinterpret_cast<const int32_t*>(mine + g.off_ridx);
  const int chunks = (int)(g.row_bytes / 16);
  int rbase = 0;  // q's first receive row
  for (int q = 0; q < P; rbase += count_at(q, g.me), ++q) {
    const int n = count_at(q, g.me);
    const int lo = (int)((long long)n * ch / G), hi = (int)((long long)n * (ch + 1) / G);
    for (int l = threadIdx.x; l < L; l += kThreads) {
      int b = 0;
      for (int r = 0; r < q; ++r) b += count_at(r, P + l);
      bound[l] = b;
      before[l] = 0;
    }
    for (int c = threadIdx.x; c < G; c += kThreads)
      dev::wait_flag(dev::Thread{}, p.ctx, at<uint64_t>(p.ctx, p.win, g.flag(g.off_done, q, c), g.me), e,
                     cuda::memory_order_acquire, "ep.dispatch.place");
    __syncthreads();
    const long long first = (long long)rbase * k, e0 = (long long)(rbase + lo) * k, e1 = (long long)(rbase + hi) * k;
    for (long long x = first + threadIdx.x; x < e0; x += kThreads) {
      const int id = ridx[x];
      if (id >= 0 && id < L) atomicAdd(&before[id], 1);
    }
    __syncthreads();
    for (long long sub = e0; sub < e1; sub += kThreads) {
      for (int i = threadIdx.x; i < kWarps * L; i += kThreads) per_warp[i] = 0;
      __syncthreads();
      const long long x = sub + threadIdx.x;
      const int id = x < e1 ? ridx[x] : -1;
      const bool placed = !over && id >= 0 && id < L;
      const unsigned same = __match_any_sync(0xffffffffu, placed ? id : -1);
      const int rank = __popc(same & ((1u << lane) - 1));
      if (placed && rank == 0) per_warp[warp * L + id] = __popc(same);
      __syncthreads();
      if (x < e1) {
        if (placed) {
          int pos = offsets[id] + bound[id] + before[id] + rank;
          for (int w = 0; w < warp; ++w) pos += per_warp[w * L + id];
          pl.perm[pos] = (int)(x / k);
          pl.pos_of[x] = pos;
        } else {
          pl.pos_of[x] = -1;
        }
      }
      __syncthreads();
      for (int l = threadIdx.x; l < L; l += kThreads) {
        int add = 0;
        for (int w = 0; w < kWarps; ++w) add += per_warp[w * L + l];
        before[l] += add;
      }
      __syncthreads();
    }
    // The rows, a warp per pair (pos_of as this CTA just wrote it).
    for (long long x = e0 + warp; x < e1; x += kWarps) {
      const int pos = pl.pos_of[x];
      if (pos < 0) continue;
      const char* src = mine + g.off_rx + (size_t)(x / k) * g.row_bytes;
      char* dst = pl.xg + (size_t)pos * g.row_bytes;
      warp_copy_row(
          chunks, lane, [&](int c) { return *reinterpret_cast<const uint4*>(src + (size_t)c * 16); },
          [&](int c, uint4 v) { ptx::st_v4(dst + (size_t)c * 16, v); });
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      ptx::red_add_release_sys(pl.ready + q, 1);
      trace::emit(p.ring, trace::EventKind::kChunkRecv, kEpTracePlaced + (uint32_t)q, ptx::globaltimer());
    }
  }
}

// ------------------------------------------------------------- EpExpertPlaces (Direct)
// Every CTA, once every rank's counts are in (slot q's all[E]: rank q's pairs per expert):
//   move[e] = (the first place of expert e at its rank d = e / L) + (this rank's first among the
//             pairs of e there: the pairs of e from lower ranks) - (this rank's own first pair of e
//             in its own expert-major order), so that send_pos + move[e] is the receiver's place;
//   over[d] = 1 when rank d's pairs exceed its area (it gets no rows, and every place -1).
// CTA 0 also writes this rank's counts, offsets and overflow (as the MoE's placement would).
static_assert(kEpMaxExperts <= kThreads, "direct_layout gives each expert a thread");
__device__ void direct_layout(const DispatchParams& p, const char* mine, int* sm) {
  const Geometry& g = p.g;
  const Direct& dr = p.direct;
  int* move = sm;         // [E]
  int* over = sm + g.E;   // [P]
  __shared__ int first[kMaxRanks + 1];  // rank d's experts' first place among all experts' pairs
  const int x = threadIdx.x;            // global expert (E <= kEpMaxExperts <= kThreads)
  const auto all_at = [&](int q, int e) { return reinterpret_cast<const int*>(mine + g.slot(q) + 16)[g.P + g.L + e]; };
  int col = 0, bound = 0, own = 0;
  if (x < g.E) {
    for (int q = 0; q < g.P; ++q) {
      const int c = all_at(q, x);
      col += c;
      if (q < g.me) bound += c;
    }
    own = all_at(g.me, x);
  }
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int before = 0, total = 0, own_before = 0;
  Scan(tmp).ExclusiveSum(col, before, total);
  __syncthreads();
  Scan(tmp).ExclusiveSum(own, own_before);
  if (x < g.E && x % g.L == 0) first[x / g.L] = before;
  if (x == 0) first[g.P] = total;
  __syncthreads();
  if (x < g.E) move[x] = before - first[x / g.L] + bound - own_before;
  for (int d = x; d < g.P; d += blockDim.x) over[d] = first[d + 1] - first[d] > g.xrows ? 1 : 0;
  if (blockIdx.x == 0) {
    const int pairs = first[g.me + 1] - first[g.me];
    const bool o = pairs > g.xrows;
    if (x >= g.me * g.L && x < (g.me + 1) * g.L) {
      dr.counts[x - g.me * g.L] = o ? 0 : col;
      dr.offsets[x - g.me * g.L] = o ? 0 : before - first[g.me];
    }
    if (x == 0) *dr.overflow = o ? pairs : 0;
    for (int d = x; d < g.P; d += blockDim.x) dr.rank_over[d] = over[d];
  }
  __syncthreads();
}

// A dispatch that writes no rows (a refused routing): no pairs here.
__device__ void direct_nothing(const DispatchParams& p) {
  if (blockIdx.x != 0) return;
  for (int l = threadIdx.x; l < p.g.L; l += blockDim.x) p.direct.counts[l] = p.direct.offsets[l] = 0;
  for (int d = threadIdx.x; d < p.g.P; d += blockDim.x) p.direct.rank_over[d] = 0;
  if (threadIdx.x == 0) *p.direct.overflow = 0;
}

// ---------------------------------------------------------------------------- dispatch
// GIN adds per call to a peer's counters: the count slot (1 put), a CTA's rows (6 regions:
// source rank, source token, top-k ids, weights, scales, payload), combine's start (1 signal)
// and a CTA's combined rows (2 regions: rows, weights).
constexpr int kRowPuts = 6, kCombinePuts = 2;

__global__ void __launch_bounds__(kThreads) dispatch(const __grid_constant__ DispatchParams p) {
  const Geometry& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int P = g.P, me = g.me, ch = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t e = next_epoch(p.epochs);
  stamp(p.ring, trace::EventKind::kKernelStart, ch);
  const bool placing = p.place.xg != nullptr;  // EpExpertMajor: every peer is an LSA peer
  const bool direct = p.direct.send_pos != nullptr || p.direct.counts != nullptr;  // EpExpertPlaces: the same
  extern __shared__ int place_sm[];  // place_smem_bytes(L) when placing, direct_smem_bytes(E, P) when direct
  if (placing)  // this CTA runs (place_layout waits for every rank's)
    for (int d = threadIdx.x; d < P; d += blockDim.x)
      ptx::st_release_sys(at<uint64_t>(ctx, p.win, g.flag(g.off_dstart, me, ch), d), e);
  // A dispatch on a reused layout keeps that layout's verdict but not the last combine's.
  if (ch == 0 && threadIdx.x == 0) p.status->no_y_rows = 0;
  __shared__ int base_to[kMaxRanks];  // this rank's first row at rank d
  __shared__ int bad;
  char* const mine = at<char>(ctx, p.win, 0, me);  // this rank's window
  const auto count_at = [&](int q, int d) { return reinterpret_cast<const int*>(mine + g.slot(q) + 16)[d]; };

  // 1. CTA 0 publishes this rank's counts (and its layout's verdict) to every rank: stored into
  //    an LSA peer's slot, or staged here and put to a GIN peer's.
  if (ch == 0) {
    for (int d = warp; d < P; d += kWarps) {
      const bool lsa = dev::is_lsa_peer(ctx, d);
      char* s = lsa ? at<char>(ctx, p.win, g.slot(me), d) : mine + g.off_sslots + (size_t)d * g.slot_bytes;
      if (lane == 0) *reinterpret_cast<int*>(s + 8) = *reinterpret_cast<volatile int*>(&p.status->code) == 1 ? 1 : 0;
      for (int q = lane; q < P; q += 32) reinterpret_cast<int*>(s + 16)[q] = p.r.tokens_per_rank[q];
      for (int l = lane; l < g.L; l += 32) reinterpret_cast<int*>(s + 16)[P + l] = p.r.tokens_per_expert[d * g.L + l];
      if (direct)
        for (int x = lane; x < g.E; x += 32) reinterpret_cast<int*>(s + 16)[P + g.L + x] = p.r.tokens_per_expert[x];
      __threadfence_system();
      __syncwarp();
      if (lsa) {
        if (lane == 0) ptx::st_release_sys(reinterpret_cast<uint64_t*>(s), e);
      } else {
        if (lane == 0) *reinterpret_cast<uint64_t*>(s) = e;
        __syncwarp();
        const GinPut slot[1] = {{g.slot(me), (size_t)(s - mine), g.slot_bytes}};
        gin_puts(p, d, slot, g.signal(Geometry::kSigCounts, me), 1);
      }
    }
  }
  // 2. Every CTA: every rank's counts (this rank's slot q holds rank q's).
  for (int q = threadIdx.x; q < P; q += blockDim.x) {
    if (dev::is_lsa_peer(ctx, q))
      dev::wait_flag(dev::Thread{}, ctx, at<uint64_t>(ctx, p.win, g.slot(q), me), e, cuda::memory_order_acquire,
                     "ep.dispatch.counts");
    else
      dev::wait_signal(dev::Thread{}, ctx, g.signal(Geometry::kSigCounts, q), gin_target(p, Geometry::kSigCounts, q, 1, e),
                       cuda::memory_order_acquire, "ep.dispatch.counts");
  }
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int d = threadIdx.x; d < P; d += blockDim.x) {
    int b = 0;
    for (int q = 0; q < me; ++q) b += count_at(q, d);
    base_to[d] = b;
    if (*reinterpret_cast<const int*>(mine + g.slot(d) + 8) != 0) atomicMax(&bad, d + 1);
  }
  __syncthreads();
  if (bad) {  // some rank's routing was invalid: every rank writes no rows (they all see it)
    if (ch == 0 && threadIdx.x == 0) {
      if (atomicCAS(&p.status->code, 0, 2) == 0) {
        p.status->rank = bad - 1;
        __threadfence_system();
      }
      *p.num_recv = 0;
      // No rows from anyone: a combine after this call sends every GIN source an empty share,
      // not one cut from an earlier call's bases against this call's 0 rows.
      for (int q = 0; q < P; ++q) p.recv_base[q] = 0;
    }
    // Still the done exchange: it keeps every rank's next call from rewriting a count slot that
    // a slower peer is still reading.
    release_all(p, g.off_done, ch, e);
    for (int d = warp; d < P; d += kWarps)
      if (!dev::is_lsa_peer(ctx, d)) {
        const GinPut none[1] = {{0, 0, 0}};
        gin_puts(p, d, none, g.signal(Geometry::kSigRows, me), kRowPuts);
      }
    wait_all(p, g.off_done, ch, e, Geometry::kSigRows, (uint64_t)kRowPuts * gridDim.x, "ep.dispatch.rows", trace::Ring{}, 0);
    if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // the count slots' puts, as below
    if (placing) place_nothing(p);
    if (direct) direct_nothing(p);
    return;
  }
  if (ch == 0) {
    if (threadIdx.x == 0) {
      int n = 0;
      for (int q = 0; q < P; ++q) {
        p.recv_base[q] = n;
        n += count_at(q, me);
      }
      *p.num_recv = n;
    }
    for (int l = threadIdx.x; l < g.L; l += kThreads) {
      int n = 0;
      for (int q = 0; q < P; ++q) n += count_at(q, P + l);
      p.recv_per_expert[l] = (n + p.alignment - 1) / p.alignment * p.alignment;
    }
  }
  __syncthreads();
  int pairs = 0;  // placing: this rank's (row, local expert) pairs
  if (placing) {
    pairs = place_offsets(p, mine, place_sm);
    if (ch == 0) place_layout(p, e, mine, place_sm, pairs);
  }
  if (direct) direct_layout(p, mine, place_sm);
  // Direct: the receiver d's place of token t's pair in slot j (-1: none, or d overflows).
  const auto direct_place = [&](int t, int j, long long id) {
    return id >= 0 && !place_sm[g.E + id / g.L] ? place_sm[id] + p.direct.send_pos[(size_t)t * g.topk + j] : -1;
  };

  // 3. Rows to LSA peers: a warp per token, its row loaded once and stored to every LSA
  //    destination (a token reaches at most top-k ranks).
  stamp(p.ring, trace::EventKind::kChunkSend, ch);
  const int chunks = (int)(g.row_bytes / 16), nsc = (int)(g.scale_bytes / 4);
  const auto row_meta = [&](int t, int d, int row, char* base, size_t off_ridx, size_t off_rw, size_t off_rsrc,
                            size_t off_rtok) {  // lanes < topk: ids and weights; lane 0: source
    if (lane < g.topk) {
      const long long id = topk_at(p.topk_idx, p.idx64, (size_t)t * g.topk + lane);
      const bool here = id >= 0 && id / g.L == d;
      const size_t k = (size_t)row * g.topk + lane;
      *reinterpret_cast<int32_t*>(base + off_ridx + k * 4) = here ? (int32_t)(id % g.L) : -1;
      *reinterpret_cast<float*>(base + off_rw + k * 4) = here ? p.topk_weights[(size_t)t * g.topk + lane] : 0.0f;
      if (direct && !g.gin)  // (direct: every peer is an LSA peer; this is never a staging row)
        *reinterpret_cast<int32_t*>(base + g.off_xpos + k * 4) = here ? direct_place(t, lane, id) : -1;
    }
    if (lane == 0) {
      *reinterpret_cast<int32_t*>(base + off_rsrc + (size_t)row * 4) = me;
      *reinterpret_cast<int32_t*>(base + off_rtok + (size_t)row * 4) = t;
    }
  };
  for (int t = ch * kWarps + warp; t < p.r.num_tokens; t += gridDim.x * kWarps) {
    int dst[kEpMaxTopk], row[kEpMaxTopk], nd = 0;
    for (int d = 0; d < P && nd < kEpMaxTopk; ++d)
      if (p.r.in_rank[(size_t)t * P + d] && dev::is_lsa_peer(ctx, d)) {
        dst[nd] = d;
        row[nd++] = base_to[d] + p.r.send_slot[(size_t)t * P + d];
      }
    if (nd == 0) continue;
    const char* src = p.x + (size_t)t * g.row_bytes;
    char* to[kEpMaxTopk];
    int nt = 0;
    for (int i = 0; i < nd; ++i) {
      if (!direct) {
        to[nt++] = at<char>(ctx, p.win, g.off_rx + (size_t)row[i] * g.row_bytes, dst[i]);
        continue;
      }
      // Direct: once per rank, at the place of the token's first slot with an expert there (the
      // receiver copies it to the others); none to a rank that overflows.
      for (int j = 0; j < g.topk; ++j) {
        const long long id = topk_at(p.topk_idx, p.idx64, (size_t)t * g.topk + j);
        if (id < 0 || id / g.L != dst[i]) continue;
        const int pos = direct_place(t, j, id);
        if (pos >= 0) to[nt++] = at<char>(ctx, p.win, g.off_xg + (size_t)pos * g.row_bytes, dst[i]);
        break;
      }
    }
    if (nt > 0)  // (direct: none where every destination overflows)
      warp_copy_row(
          chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
          [&](int c, uint4 v) {
            for (int i = 0; i < nt; ++i) ptx::st_v4(to[i] + (size_t)c * 16, v);
          });
    for (int c = lane; c < nsc; c += 32) {
      const float v = p.x_scales[(size_t)t * nsc + c];
      for (int i = 0; i < nd; ++i) *at<float>(ctx, p.win, g.off_rscale + ((size_t)row[i] * nsc + c) * 4, dst[i]) = v;
    }
    for (int i = 0; i < nd; ++i)
      row_meta(t, dst[i], row[i], at<char>(ctx, p.win, 0, dst[i]), g.off_ridx, g.off_rw, g.off_rsrc, g.off_rtok);
  }
  // 3b. Rows to GIN peers: this CTA's contiguous tokens [lo, hi), whose rows for rank d are the
  //     contiguous slots [send_slot(lo), send_slot(hi)) of d's block, staged here at
  //     [d][slot] and put in one piece per region.
  if (g.gin) {
    const int N = p.r.num_tokens, lo = (int)((long long)N * ch / gridDim.x), hi = (int)((long long)N * (ch + 1) / gridDim.x);
    for (int t = lo + warp; t < hi; t += kWarps)
      for (int d = 0; d < P; ++d) {
        if (!p.r.in_rank[(size_t)t * P + d] || dev::is_lsa_peer(ctx, d)) continue;
        const int srow = d * g.max_tokens + p.r.send_slot[(size_t)t * P + d];
        const char* src = p.x + (size_t)t * g.row_bytes;
        char* to = mine + g.off_srx + (size_t)srow * g.row_bytes;
        warp_copy_row(
            chunks, lane, [&](int c) { return ptx::ld_nc_v4(src + (size_t)c * 16); },
            [&](int c, uint4 v) { ptx::st_v4(to + (size_t)c * 16, v); });
        for (int c = lane; c < nsc; c += 32)
          *reinterpret_cast<float*>(mine + g.off_srscale + ((size_t)srow * nsc + c) * 4) = p.x_scales[(size_t)t * nsc + c];
        row_meta(t, d, srow, mine, g.off_sridx, g.off_srw, g.off_srsrc, g.off_srtok);
      }
    __threadfence_system();
    __syncthreads();
    for (int d = warp; d < P; d += kWarps) {
      if (dev::is_lsa_peer(ctx, d)) continue;
      const auto slot_of = [&](int t) { return t < N ? p.r.send_slot[(size_t)t * P + d] : p.r.tokens_per_rank[d]; };
      const size_t s0 = (size_t)slot_of(lo), n = (size_t)slot_of(hi) - s0;
      const size_t from = (size_t)d * g.max_tokens + s0, at_d = (size_t)base_to[d] + s0;
      const GinPut puts[kRowPuts] = {
          {g.off_rsrc + at_d * 4, g.off_srsrc + from * 4, n * 4},
          {g.off_rtok + at_d * 4, g.off_srtok + from * 4, n * 4},
          {g.off_ridx + at_d * g.topk * 4, g.off_sridx + from * g.topk * 4, n * g.topk * 4},
          {g.off_rw + at_d * g.topk * 4, g.off_srw + from * g.topk * 4, n * g.topk * 4},
          {g.off_rscale + at_d * g.scale_bytes, g.off_srscale + from * g.scale_bytes, n * g.scale_bytes},
          {g.off_rx + at_d * g.row_bytes, g.off_srx + from * g.row_bytes, n * g.row_bytes}};
      gin_puts(p, d, puts, g.signal(Geometry::kSigRows, me), kRowPuts);
    }
  }
  // 4. This channel's rows are out; then every source's rows of this channel are in (a GIN
  //    source's: all its channels'). Placing, this CTA's share of every source's pairs first.
  release_all(p, g.off_done, ch, e);
  if (placing) place_sources(p, e, mine, place_sm, pairs > p.place.max_rows);
  wait_all(p, g.off_done, ch, e, Geometry::kSigRows, (uint64_t)kRowPuts * gridDim.x, "ep.dispatch.rows", p.ring, 0);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
  stamp(p.ring, trace::EventKind::kKernelEnd, ch);
}

// ----------------------------------------------------------------------------- combine
// Each received row goes back to its source, at the row it has in that source's stream to this
// rank: the source's combine area [this rank][slot]. To an LSA source a warp per row stores it;
// to a GIN source CTA ch stages its contiguous share of that source's rows here and puts them.
__global__ void __launch_bounds__(kThreads) combine_push(const __grid_constant__ CombineParams p) {
  const Geometry& g = p.g;
  const DevCtx& ctx = p.ctx;
  const int ch = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t e = next_epoch(p.epochs);
  stamp(p.ring, trace::EventKind::kKernelStart, kCombineId + ch);
  // Every rank has started this combine, so its combine area is free (the last reduce ran
  // before this kernel on its stream).
  __syncthreads();
  for (int q = threadIdx.x; q < g.P; q += blockDim.x) {
    if (dev::is_lsa_peer(ctx, q))
      ptx::st_release_sys(at<uint64_t>(ctx, p.win, g.flag(g.off_cstart, g.me, ch), q), e);
    else
      dev::signal(dev::Thread{}, ctx, q, g.signal(Geometry::kSigCombineStart, g.me), 1, dev::SignalOp::kAdd,
                  cuda::memory_order_release);
  }
  wait_all(p, g.off_cstart, ch, e, Geometry::kSigCombineStart, gridDim.x, "ep.combine.start", trace::Ring{}, 0);
  stamp(p.ring, trace::EventKind::kChunkSend, kCombineId + ch);
  const int n = *p.num_recv, chunks = (int)(g.hidden * 2 / 16);
  char* const mine = at<char>(ctx, p.win, 0, g.me);
  // No y with rows to return (a caller's error): zero rows go back, and check() says why. Every
  // row carries its weight, 1 when the rank passed none: the source's sum multiplies each row
  // by its own (fma with 1 is the plain add, bit for bit), so no flag has to agree across ranks.
  const bool rows = p.y != nullptr || p.yg != nullptr;
  if (blockIdx.x == 0 && threadIdx.x == 0) p.status->no_y_rows = rows ? 0 : n;  // this combine's, for check()
  // EpExpertRows: before a warp sends row r, list_row(r) puts the row's slots with a place, in slot
  // order, in the warp's list (lanes j < topk read slot j; a ballot orders them).
  __shared__ int list_pos[kWarps][kEpMaxTopk];
  __shared__ float list_w[kWarps][kEpMaxTopk];
  int listed = 0;  // the list's length (the same in every lane)
  const auto list_row = [&](int r) {
    const int j = lane < g.topk ? lane : -1;
    const int pos = j >= 0 ? p.pos_of[(size_t)r * g.topk + j] : -1;
    const unsigned have = __ballot_sync(0xffffffffu, pos >= 0);
    if (pos >= 0) {
      const int at = __popc(have & ((1u << lane) - 1));
      list_pos[warp][at] = pos;
      list_w[warp][at] = p.pair_w[(size_t)r * g.topk + j];
    }
    __syncwarp();
    listed = __popc(have);
  };
  const auto row_vec = [&](int r, int c) {
    if (p.yg) return expert_rows_listed(reinterpret_cast<const uint4*>(p.yg), list_pos[warp], list_w[warp], listed, chunks, c);
    return p.y ? ptx::ld_nc_v4(p.y + (size_t)r * g.hidden * 2 + (size_t)c * 16) : make_uint4(0, 0, 0, 0);
  };
  const auto row_weight = [&](int r) { return !rows ? 0.0f : p.weights ? p.weights[r] : 1.0f; };
  const int32_t* src_rank = reinterpret_cast<const int32_t*>(mine + g.off_rsrc);
  for (int r = ch * kWarps + warp; r < n; r += gridDim.x * kWarps) {
    const int s = src_rank[r];
    if (!dev::is_lsa_peer(ctx, s)) continue;
    const size_t row = (size_t)g.me * g.max_tokens + (r - p.recv_base[s]);
    char* dst = at<char>(ctx, p.win, g.off_cy + row * g.hidden * 2, s);
    if (p.yg) list_row(r);
    warp_copy_row(
        chunks, lane, [&](int c) { return row_vec(r, c); }, [&](int c, uint4 v) { ptx::st_v4(dst + (size_t)c * 16, v); });
    if (lane == 0) *at<float>(ctx, p.win, g.off_cw + row * 4, s) = row_weight(r);
  }
  if (g.gin) {
    const size_t rb = (size_t)g.hidden * 2;
    const auto share = [&](int s, int& lo, int& hi) {  // this CTA's rows of source s's block
      const int b = p.recv_base[s], cnt = (s + 1 < g.P ? p.recv_base[s + 1] : n) - b;
      lo = b + (int)((long long)cnt * ch / gridDim.x), hi = b + (int)((long long)cnt * (ch + 1) / gridDim.x);
    };
    for (int s = 0; s < g.P; ++s) {
      if (dev::is_lsa_peer(ctx, s)) continue;
      int lo, hi;
      share(s, lo, hi);
      for (int r = lo + warp; r < hi; r += kWarps) {
        char* to = mine + g.off_scy + (size_t)r * rb;
        if (p.yg) list_row(r);
        warp_copy_row(
            chunks, lane, [&](int c) { return row_vec(r, c); }, [&](int c, uint4 v) { ptx::st_v4(to + (size_t)c * 16, v); });
        if (lane == 0) *reinterpret_cast<float*>(mine + g.off_scw + (size_t)r * 4) = row_weight(r);
      }
    }
    __threadfence_system();
    __syncthreads();
    for (int s = warp; s < g.P; s += kWarps) {
      if (dev::is_lsa_peer(ctx, s)) continue;
      int lo, hi;
      share(s, lo, hi);
      const size_t at_s = (size_t)g.me * g.max_tokens + (lo - p.recv_base[s]), cnt = (size_t)(hi - lo);
      const GinPut puts[kCombinePuts] = {{g.off_cy + at_s * rb, g.off_scy + (size_t)lo * rb, cnt * rb},
                                         {g.off_cw + at_s * 4, g.off_scw + (size_t)lo * 4, cnt * 4}};
      gin_puts(p, s, puts, g.signal(Geometry::kSigCombineRows, g.me), kCombinePuts);
    }
  }
  release_all(p, g.off_cdone, ch, e);
  wait_all(p, g.off_cdone, ch, e, Geometry::kSigCombineRows, (uint64_t)kCombinePuts * gridDim.x, "ep.combine.rows", p.ring,
           kCombineId);
  if (g.gin) dev::gin_flush(dev::Cta{}, ctx);  // no put of this CTA still reads the window when the kernel ends
  stamp(p.ring, trace::EventKind::kKernelEnd, kCombineId + ch);
}

// out[t] = sum over ranks d = 0..P-1 that token t went to of w_d y_d (w_d = 1 where rank d passed
// no weights), fmas in fp32 in rank order, rounded once.
// A thread per 8 columns of a token.
__global__ void combine_reduce(const __grid_constant__ ReduceParams p) {
  const Geometry& g = p.g;
  if (*reinterpret_cast<const volatile int*>(&p.status->code) != 0) return;  // the dispatch's routing was refused: it wrote nothing
  const int vecs = g.hidden / 8;
  const size_t n = (size_t)p.r.num_tokens * vecs;
  const char* local = p.win.lsa_base + (size_t)p.lsa_rank * p.win.lsa_stride;  // this rank's copy
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / vecs), v = (int)(i % vecs);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int d = 0; d < g.P; ++d) {
      if (!p.r.in_rank[(size_t)t * g.P + d]) continue;
      const size_t row = (size_t)d * g.max_tokens + p.r.send_slot[(size_t)t * g.P + d];
      const uint4 raw = *reinterpret_cast<const uint4*>(local + g.off_cy + row * g.hidden * 2 + (size_t)v * 16);
      const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&raw);
      const float w = *reinterpret_cast<const float*>(local + g.off_cw + row * 4);  // 1: the rank passed no weights
      for (int k = 0; k < 8; ++k) acc[k] = __fmaf_rn(w, __bfloat162float(y[k]), acc[k]);
    }
    uint4 o;
    __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
    for (int k = 0; k < 8; ++k) ob[k] = __float2bfloat16_rn(acc[k]);
    *reinterpret_cast<uint4*>(p.out + (size_t)t * g.hidden + (size_t)v * 8) = o;
  }
}

// ------------------------------------------------------------------------ combine_slots
// Received row r's slot j with place pos: that place's output row goes to the source's row
// (token, slot) = (src_token[r], j). A thread per (row, slot).
__global__ void slot_targets(const __grid_constant__ SlotParams p) {
  const Geometry& g = p.g;
  const char* mine = at<char>(p.ctx, p.win, 0, g.me);
  const int* xpos = reinterpret_cast<const int*>(mine + g.off_xpos);
  const int32_t* src = reinterpret_cast<const int32_t*>(mine + g.off_rsrc);
  const int32_t* tok = reinterpret_cast<const int32_t*>(mine + g.off_rtok);
  const long long n = (long long)*p.num_recv * g.topk;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int pos = xpos[i];
    if (pos < 0 || pos >= p.max_rows) continue;
    const long long r = i / g.topk, j = i % g.topk;
    p.targets[pos] = at<char>(p.ctx, p.win, g.off_sy + ((size_t)tok[r] * g.topk + j) * g.row_bytes, src[r]);
  }
}

// Every rank's stores into this rank's slot rows (made by kernels before this one on its stream)
// are done: the done exchange of dispatch and combine, on flags of its own.
__global__ void __launch_bounds__(kThreads) slots_done(const __grid_constant__ SlotParams p) {
  const uint64_t e = next_epoch(p.epochs);
  release_all(p, p.g.off_sdone, blockIdx.x, e);
  wait_all(p, p.g.off_sdone, blockIdx.x, e, Geometry::kSigCombineRows, 0, "ep.combine_slots.done", trace::Ring{}, 0);
}

// out[t] = sum over slots j (ascending) with an expert on a rank that did not overflow of
// w[t][j] x row(t, j), fmas in fp32, rounded once (expert_rows.cuh's fma and rounding). A thread
// per 8 columns of a token. The slots go in groups of kSlotGroup: a group's ids, then its ranks'
// verdicts, then its weights and rows are each loaded together before the first fma, so a thread
// waits on three loads' latency per group rather than on three per slot.
constexpr int kSlotGroup = 8;
__global__ void slots_reduce(const __grid_constant__ SlotParams p) {
  const Geometry& g = p.g;
  if (*reinterpret_cast<const volatile int*>(&p.status->code) != 0) return;  // the dispatch's routing was refused
  const int vecs = g.hidden / 8;
  const size_t n = (size_t)p.num_tokens * vecs;
  const char* rows = at<char>(p.ctx, p.win, g.off_sy, g.me);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t t = i / vecs, v = i % vecs;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j0 = 0; j0 < g.topk; j0 += kSlotGroup) {
      int rank[kSlotGroup];  // the slot's expert's rank; -1: no expert, so no row
#pragma unroll
      for (int u = 0; u < kSlotGroup; ++u) {
        const long long id = j0 + u < g.topk ? topk_at(p.topk_idx, p.idx64, t * g.topk + j0 + u) : -1;
        rank[u] = id >= 0 && id < g.E ? int(id / g.L) : -1;
      }
#pragma unroll
      for (int u = 0; u < kSlotGroup; ++u)
        if (rank[u] >= 0 && p.rank_over[rank[u]]) rank[u] = -1;
      float w[kSlotGroup];
      uint4 row[kSlotGroup];
#pragma unroll
      for (int u = 0; u < kSlotGroup; ++u)
        if (rank[u] >= 0) {
          w[u] = p.topk_weights[t * g.topk + j0 + u];
          row[u] = ptx::ld_nc_v4(rows + (t * g.topk + j0 + u) * g.row_bytes + v * 16);
        }
#pragma unroll
      for (int u = 0; u < kSlotGroup; ++u)
        if (rank[u] >= 0) expert_rows_fma(acc, w[u], row[u]);
    }
    *reinterpret_cast<uint4*>(p.out + t * g.hidden + v * 8) = pack_bf16x8(acc);
  }
}

}  // namespace tw::ops::ep
