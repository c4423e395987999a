// src/ops/gemm_allreduce/relay_hook.cuh — the epilogue hook of the fused GEMM + all-reduce and
// GEMM + reduce-scatter, "relay" algorithm (P >= 2 ranks; docs/gemm_allreduce.md compares it
// with exchange and owner).
//
// The ranks walk the tiles in the same order but start 1/P of the way apart (scheduler.hpp rank
// rotation: rank r starts at segment (r + walk_shift) % P, a segment being `split` = floor(units
// / P) unit order indices; plan.hpp relay_position). So every tile is computed at position 0 of
// some rank's walk, at position 1 of the next rank down (r - 1), .., and at position P - 1 of the
// rank that owns it: a tile's partial sum travels down the ring r -> r - 1 -> .. -> owner, one
// hop per segment, a whole segment (units / P work indices) after it left. On the interleaved
// walk (scheduler.hpp, TILEWIRE_RELAY_WAVES) the ranks visit the segments in chunks, round by
// round: the same chains, a hop one chunk (a wave or two of tiles) after the last. Per tile t, in
// the CTA that computed it:
//
//   position 0:         accumulators -> bf16 -> shared memory -> LSA stores into rank me - 1's
//                       staging[t] -> fence -> arrive[t] @ me - 1 := tag
//   position 1..P-2:    (staging[t] was loaded into shared memory while the tile's mainloop ran)
//                       accumulators + partial sum in fp32 -> bf16 -> on to rank me - 1 as above
//   owner (P - 1):      accumulators + partial sum in fp32, rounded once -> C(t) locally (bulk
//                       copies); all-reduce: into every peer's C(t) (LSA stores) -> fence ->
//                       done[t] @ each peer := tag
//   reduce-scatter:     a rank that read rank me + 1's partial sum out of staging[t] (position >= 1)
//                       tells it: done[t] @ me + 1 := tag
//   every CTA after its last tile: wait done[t] >= tag for the tiles it passed on (all-reduce: the
//                       finals the owners store into this rank's C; reduce-scatter: the slot its
//                       partial sum went to is read), so when the kernel ends C is final and no
//                       staging slot of this call is still to be read.
//
// The result is the same bits on every rank: each final is computed once (the chain's order per
// tile is fixed) and copied. The partial sum is rounded to bf16 at each hop (P - 1 roundings, as a
// ring reduce-scatter in bf16 does); the owner adds its own partial in fp32 and rounds once.
// Bytes per rank and direction: one bf16 tile per tile it passes on ((P - 1) / P of the tiles),
// and for the all-reduce P - 1 finals per owned tile: a ring reduce-scatter's, plus an
// all-gather's. The reduction is an add in registers, not a pass over global memory.
//
// Who does what (the CUTLASS cooperative kernel: 2 consumer warpgroups, 1 producer warp, and the
// epilogue-load warp that tilewire's HookEpilogue turns into the "comm warp"):
//   consumers, tile V_j: wait ready(j) [the comm warp's shared buffer is free, and at position >= 1
//     holds the incoming partial sum]; add and write the bf16 tile into the buffer; push its first
//     consumer_rows rows (the whole tile when it is the CTA's last) to where the tile goes next;
//     arrive staged.
//   comm warp, tile V_j: wait staged(j); owned: bulk-copy the rows to the local C (TMA);
//     16-byte loads from shared memory, 16-byte stores to the next rank's staging or to the peers'
//     C for the other rows, paced over pace_pct % of the last tile period (see comm()); wait for
//     the bulk copies to have read the buffer; fence.sys; release-store the flags; then prepare
//     V_{j+1}: position >= 1 -> wait arrive[V_{j+1}] (rank me + 1 computed it a segment, or a
//     chunk, ago: normally set by then) and bulk-load staging[V_{j+1}] into the buffer (completes ready(j+1) by
//     bytes), else arrive on ready(j+1).
// Flags are stored before the next wait. A wait at work index w (the arrive wait) needs only rank
// me + 1's work index w - relay_gap (or less): by induction on w every such wait ends, and the final
// done waits need only finished work. No cycle. Every wait is bounded by ctx.timeout_ns (the
// timeout diagnostic, then a trap).
//
// Across calls (same stream, tag = calls completed + 1): rank me + 1 writes staging[t] of call
// n+1 only after its call n ended, i.e. after it saw done[t] for every tile it passed on, which
// comes after this rank read its staging of call n (all-reduce: the owner's final follows every
// hop of the chain; reduce-scatter: this rank's own done[t] store). The peers write this rank's
// C only with finals of the current call, after this rank's part of that tile arrived.
#pragma once
#include <cuda_bf16.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "../gemm/epilogue_hook.cuh"
#include "../gemm/launch.hpp"
#include "../gemm/scheduler.hpp"
#include "cta_walk.cuh"
#include "hook_params.hpp"
#include "plan.hpp"
#include "tilewire/device.cuh"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_allreduce_impl {

// Bulk copies with an L2 cache policy (.L2::cache_hint). kL2EvictFirst: the lines are evicted
// before others (the encoding CUTLASS's TMA loads use, cute::TMA::CacheHintSm90::EVICT_FIRST), for
// data this GPU's SMs will not read again soon, so that it does not push out what they will.
inline constexpr uint64_t kL2EvictFirst = 0x12F0000000000000ull;
CUTLASS_DEVICE void bulk_copy_s2g_hint(void* gmem, const void* smem, uint32_t bytes, uint64_t policy) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(gmem),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))), "r"(bytes), "l"(policy)
               : "memory");
}
// Global -> this CTA's shared memory, completing `bytes` on the mbarrier at `mbar`.
CUTLASS_DEVICE void bulk_copy_g2s_hint(void* smem, const void* gmem, uint32_t bytes, uint64_t* mbar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(gmem), "r"(bytes), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(mbar))), "l"(policy)
      : "memory");
}

template <bool kTraced>
struct RelayHookT : HookParams, RelayKnobs {
  using E = cutlass::bfloat16_t;
  static constexpr int kPitch = kBlkN + 8;  // shared-memory row pitch in elements (+16 bytes: no bank conflicts)
  static constexpr int kRowBytes = kBlkN * 2;
  static_assert(kPitch * 2 == kRelaySlotPitch, "a padded staging row is the shared-memory row");
  static constexpr bool kCommWarp = true;  // HookEpilogue runs comm() in the epilogue-load warp
  struct SharedStorage {
    alignas(128) E buf[kBlkM * kPitch];
    uint64_t staged;    // mbarrier, 256 arrivals per tile: every consumer thread after its writes
    uint64_t ready;     // mbarrier, 1 arrival (+ bytes of the partial for owned tiles) per tile
    uint64_t tag;       // the call's tag, read by the comm warp before its first tile
    uint64_t t_staged;  // comm warp, lane 0: when the previous tile was staged (kernel start for tile 0)
    uint64_t t_waited;  // consumer thread 0: how long the consumers waited for `ready` on the tile staged last
  };

  // HookParams (hook_params.hpp): ctx, lay (make_relay_layout), sched (with this rank's
  // rotation), me, grid_ctas, ws_win / ws_off / ws, c_win / c_off, C (reduce-scatter: its shard
  // [S, N]), ldc, M, N, ring; RelayKnobs: consumer_rows, poll_ns, pace_pct, comm_inflight,
  // bulk_push, no_push, pull.
  static constexpr uint64_t kMaxPaceNs = 1000000;  // no tile's pushes are spread over more than 1 ms

  CUTLASS_HOST_DEVICE bool clock_on() const { return tracing(); }
  CUTLASS_HOST_DEVICE bool tracing() const {
    if constexpr (kTraced)
      return ring.on();
    else
      return false;
  }

  CUTLASS_DEVICE static void init_smem(SharedStorage& s) {
    cutlass::arch::ClusterBarrier::init(&s.staged, kConsumerThreads);
    cutlass::arch::ClusterBarrier::init(&s.ready, 1);
    cutlass::arch::fence_barrier_init();
  }

  // ---- consumers (256 threads), once per valid tile
  template <class View>
  CUTLASS_DEVICE void operator()(View const& v) const {
    using namespace cute;
    const uint64_t t_mma_end = tracing() ? ptx::globaltimer() : 0;
    const CtaWalk walk(sched);
    const int step = v.step, j = v.seq;
    const int pos = position(v.tile_m, v.tile_n);
    const bool own = pos == lay.P - 1, incoming = pos > 0;
    SharedStorage& sm = *v.smem;
    E* buf = sm.buf;

    // Thread 0 times the wait for `ready` (the comm warp still pushing the last tile or loading this
    // one's partial sum), so the comm warp's pacing can leave it out of the period it paces over.
    const bool timed = tracing() || (pace_pct > 0 && v.thread_idx == 0);
    const uint64_t t_wait0 = timed ? ptx::globaltimer() : 0;
    wait_mbarrier(ctx, &sm.ready, j & 1, "gemm_allreduce.relay_ready");
    const uint64_t t_seen = timed ? ptx::globaltimer() : 0;
    if (pace_pct > 0 && v.thread_idx == 0) sm.t_waited = t_seen - t_wait0;  // read after `staged` (below)
    constexpr int kN = decltype(size(v.acc))::value;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kN; i += 2) {
      const int r = get<0>(v.coord(i)), c = get<1>(v.coord(i));
      auto* p = reinterpret_cast<__nv_bfloat162*>(buf + r * kPitch + c);
      float a0 = v.acc(i), a1 = v.acc(i + 1);
      if (incoming) {  // + the partial sum of rank me + 1 (bf16), in fp32; one rounding below
        const float2 q = __bfloat1622float2(*p);
        a0 += q.x;
        a1 += q.y;
      }
      *p = __floats2bfloat162_rn(a0, a1);
    }
    const uint64_t t_done = tracing() ? ptx::globaltimer() : 0;
    cute::tma_store_fence();  // the comm warp's bulk copies (async proxy) read these writes
    // The CTA's last tile goes out from the consumers entirely: nothing else is left for them, and
    // it is what the kernel's end waits for.
    // An all-reduce's final goes to P - 1 peers: the comm warp takes the first (as it takes the one
    // target of every other tile), and with 16-byte stores the consumers the others whole, so that
    // the comm warp's share per tile stays one tile whatever P (the finals all come in the walk's
    // last segment); with bulk copies the comm warp only issues, and takes them all.
    const int push_rows = walk.next_valid(step) < 0 ? kBlkM : consumer_rows;
    // With bulk pushes the comm warp sends every peer's copy (the TMA unit moves them); the
    // consumers keep target 0's first rows.
    const int targets = bulk_push ? min(push_targets(own), 1) : push_targets(own);
    if ((push_rows > 0 || targets > 1) && !no_push && (own || !pull) && targets > 0) {
      // The first rows go on from the consumers: 16-byte loads from the buffer (after every
      // consumer's writes), 16-byte stores, all in flight before the first completes. The comm
      // warp's fence and flag after `staged` publish them (the consumers' arrive releases their
      // stores to it).
      gemm_impl::hook_bar();
      const int tile_rows = min(M - v.row0, kBlkM), vecs = min(N - v.col0, kBlkN) / 8;
#pragma unroll 1
      for (int d = 0; d < targets; ++d) {
        const int rows = d == 0 ? min(tile_rows, push_rows) : tile_rows;
        long long pitch;
        char* dst = peer_dst(v.tile_m, v.tile_n, own, d, &pitch);
        // Four vectors per thread at a time (32 rows a pass; the default is 16 rows, the last tile
        // 128): the accumulators stay live through the epilogue (the next tile's first wgmma names
        // them), so the vectors in flight are kept to a bounded few.
        constexpr int kVecRow = kBlkN / 8, kPass = 4, kPer = kBlkM * kVecRow / kConsumerThreads;  // 16
#pragma unroll 1
        for (int k0 = 0; k0 < kPer; k0 += kPass) {
          if ((k0 * kConsumerThreads) / kVecRow >= rows) break;  // rows below this pass: none
          uint4 w[kPass];
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < kPass; ++k) {
            const int i = (k0 + k) * kConsumerThreads + v.thread_idx, r = i / kVecRow, cv = i % kVecRow;
            if (r < rows && cv < vecs) w[k] = *reinterpret_cast<const uint4*>(buf + r * kPitch + cv * 8);
          }
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < kPass; ++k) {
            const int i = (k0 + k) * kConsumerThreads + v.thread_idx, r = i / kVecRow, cv = i % kVecRow;
            if (r < rows && cv < vecs) ptx::st_v4(dst + (long long)r * pitch + cv * 16, w[k]);
          }
        }
      }
    }
    cutlass::arch::ClusterBarrier::arrive(&sm.staged);
    if (tracing() && v.thread_idx == 0) {
      const uint32_t id = uint32_t(v.tile_m * lay.tiles_n + v.tile_n);
      if (j == 0) trace::emit_at(ring, cta_slot(0), trace::EventKind::kKernelStart, blockIdx.x, v.t_mma_start_ns);
      emit(id, trace::EventKind::kMmaStart, v.t_mma_start_ns);
      emit(id, trace::EventKind::kMmaEnd, t_mma_end);
      if (own) {  // this rank's partial enters the sum at MMA end; the incoming one was in the buffer
        if (lay.shard_tm == 0)
          emit(id, trace::EventKind::kPartialLeave, t_mma_end);  // reduce-scatter: owners send nothing
        emit(id, trace::EventKind::kPartialsSeen, t_seen > t_mma_end ? t_seen : t_mma_end);
        emit(id, trace::EventKind::kReduceDone, t_done);
      }
    }
  }

  // ---- comm warp (32 lanes), once per valid tile, in the consumers' order
  // (step, j: the tile's work step and valid-tile index in this CTA's walk, counted by the kernel)
  CUTLASS_DEVICE void comm(int tile_m, int tile_n, int step, int j, int lane, SharedStorage* smem) const {
    const CtaWalk walk(sched);
    if (j == 0) {
      if (lane == 0) {
        smem->tag = call_tag(ws);
        smem->t_staged = ptx::globaltimer();  // the consumers' first mainloop starts about now
      }
      __syncwarp();
      prepare(gemm_impl::TileCoord{tile_m, tile_n}, smem->tag, lane, smem);
    }
    const uint64_t tag = smem->tag;
    wait_mbarrier(ctx, &smem->staged, j & 1, "gemm_allreduce.relay_staged", poll_ns);
    // Pacing: this tile's pushes are spread over pace_pct % of the last tile's working period
    // (staged to staged, less the consumers' wait for `ready`: relay_pace_budget_ns), i.e. of
    // about one mainloop. Unpaced, every CTA pushes at its warp's full rate right after its
    // epilogue; at the start of the kernel all CTAs are in phase, so the link saturates in bursts
    // and the backed-up stores stall the mainloops (traced on 2 x H200: the first five tiles of
    // each CTA took 54-67 us instead of 50.5; docs/gemm_allreduce.md). Paced, 132 CTAs ask ~190
    // GB/s of a link that carries ~360. Priced on the whole period, a wait would feed back into
    // the next budget.
    uint64_t t_push = 0, budget_ns = 0;
    if (pace_pct > 0) {
      if (lane == 0) {
        t_push = ptx::globaltimer();
        budget_ns = relay_pace_budget_ns(t_push - smem->t_staged, smem->t_waited, pace_pct, kMaxPaceNs);
        smem->t_staged = t_push;
      }
      t_push = __shfl_sync(0xffffffffu, t_push, 0);
      budget_ns = __shfl_sync(0xffffffffu, budget_ns, 0);
    }

    const int pos = position(tile_m, tile_n);
    const bool own = pos == lay.P - 1;
    const int next = walk.next_valid(step);  // -1: the CTA's last tile
    const int t = lay.tile_index(tile_m, tile_n);
    const int row0 = tile_m * kBlkM, col0 = tile_n * kBlkN;
    const int rows = min(M - row0, kBlkM), vecs = min(N - col0, kBlkN) / 8;
    const E* buf = smem->buf;
    const uint32_t id = uint32_t(tile_m * lay.tiles_n + tile_n);
    if (tracing() && lane == 0 && !own) emit(id, trace::EventKind::kPartialLeave, ptx::globaltimer());
    if (own) {  // the final into the local C: bulk copies, one row per lane at a time
      E* c = c_typed<E>() + (long long)(row0 - shard_row0()) * ldc + col0;
#pragma unroll 1
      for (int r = lane; r < rows; r += 32) s2g(buf + r * kPitch, c + (long long)r * ldc, vecs * 16);
      cute::tma_store_arrive();
    } else if (pull) {  // the partial into this rank's own staging slot, where the owner loads it from
      char* slot = ws + lay.relay_slot(t);
      if (padded_slots) {  // the whole partial sum, padding included, in one copy
        if (lane == 0) s2g(buf, slot, rows * kRelaySlotPitch);
      } else {
#pragma unroll 1
        for (int r = lane; r < rows; r += 32) s2g(buf + r * kPitch, slot + (size_t)r * kRowBytes, vecs * 16);
      }
      cute::tma_store_arrive();
      ptx::bulk_wait_all_writes();  // written (not only read out of shared memory) before the flag
    }
    // The tile on to where it goes next: rank me - 1's staging slot (a partial sum; rows packed, or padded),
    // or the first peer's C (an all-reduce's final); the rows the consumers did not push.
    const int targets = push_targets(own);
    if (!no_push && (own || !pull) && targets > 0) {  // stores: target 0 (the consumers push the others); bulk: all
      const int first = next < 0 ? rows : min(consumer_rows, rows);  // as the consumers
      long long pitch;
      char* dst = peer_dst(tile_m, tile_n, own, 0, &pitch);
      if (bulk_push) {  // every target, target d's batches in the d-th share of the budget
        const uint64_t share = budget_ns / (uint64_t)targets;
#pragma unroll 1
        for (int d = 0; d < targets; ++d) {
          char* to = d == 0 ? dst : peer_dst(tile_m, tile_n, own, d, &pitch);
          push_rows_bulk(buf, to, pitch, d == 0 ? first : 0, rows, vecs * 16, lane, t_push + d * share, share,
                         l2_evict_first, padded_slots && !own);  // a staging slot: whole batches when padded
        }
        cute::tma_store_arrive();
        ptx::bulk_wait_all_writes();
      } else if (lane < vecs && comm_inflight == 2)
        push_rows<2>(buf, dst, pitch, first, rows, lane, t_push, budget_ns);
      else if (lane < vecs && comm_inflight == 8)
        push_rows<8>(buf, dst, pitch, first, rows, lane, t_push, budget_ns);
      else if (lane < vecs)
        push_rows<4>(buf, dst, pitch, first, rows, lane, t_push, budget_ns);
    }
    if (own) cute::tma_store_wait<0>();  // this lane's bulk copies have read the buffer
    // Publish this lane's stores at system scope, then the flags (release).
    __threadfence_system();
    __syncwarp();
    if (lane < targets) {
      const int q = own ? (me + 1 + lane) % lay.P : (me + lay.P - 1) % lay.P;
      const size_t f = own ? lay.done_flag(t) : lay.relay_arrive_flag(t);
      ptx::st_release_sys(dev::lsa_ptr<uint64_t>(ctx, ws_win, ws_off + f, q), tag);
    }
    // Reduce-scatter: the partial sum rank me + 1 sent is read (its bulk loads completed `ready`
    // before the consumers used the buffer), so its slot may take the next call's.
    if (lay.shard_tm > 0 && pos > 0 && lane == 0)
      ptx::st_release_sys(dev::lsa_ptr<uint64_t>(ctx, ws_win, ws_off + lay.done_flag(t), (me + 1) % lay.P), tag);
    // tile_landed: an owned tile's final is here; in a reduce-scatter also a tile passed on (this
    // rank's part of it is done, as the owner kernel records it: docs/tracing.md).
    if (tracing() && (own || lay.shard_tm > 0) && lane == 0)
      emit(id, trace::EventKind::kTileLanded, ptx::globaltimer());
    // The buffer is free: prepare the CTA's next valid tile.
    if (next >= 0) prepare(walk.tile_at(next), tag, lane, smem);
  }

  // After the CTA's last tile (every consumer thread): the finals of the tiles this CTA sent.
  CUTLASS_DEVICE void tail(int tid) const {
    const uint64_t tag = call_tag(ws);
    const CtaWalk walk(sched);
    const int steps = walk.steps();
#pragma unroll 1
    for (int s = tid; s < steps; s += kConsumerThreads) {
      const gemm_impl::TileCoord u = walk.tile_at(s);
      if (u.m >= sched.tiles_m || owns(u.m, u.n)) continue;
      const int t = lay.tile_index(u.m, u.n);
      wait_flag(ctx, ws + lay.done_flag(t), tag, "gemm_allreduce.relay_done", poll_ns);
      if (tracing() && lay.shard_tm == 0) {  // all-reduce: the final of a tile this rank passed on is here
        const uint32_t id = uint32_t(u.m * lay.tiles_n + u.n);
        const uint64_t now = ptx::globaltimer();
        emit(id, trace::EventKind::kPartialsSeen, now);
        emit(id, trace::EventKind::kReduceDone, now);
        emit(id, trace::EventKind::kTileLanded, now);
      }
    }
    gemm_impl::hook_bar();
    if (tracing() && tid == 0) {
      if (steps > 0 && walk.prev_valid(steps) >= 0)
        trace::emit_at(ring, cta_slot(1), trace::EventKind::kKernelEnd, blockIdx.x, ptx::globaltimer());
      trace::reserve(ring, (unsigned long long)kTileEvents * lay.T + 2ull * grid_ctas);
    }
    if (tid == 0) {
      // The last CTA of this rank advances the call counter. Every comm warp read the tag before
      // its CTA's consumers could finish (they wait for ready(0), which it completes after).
      auto* fin = reinterpret_cast<unsigned long long*>(ws + Layout::kFinishedOff);
      __threadfence();
      if (atomicAdd(fin, 1ull) == (unsigned long long)(grid_ctas - 1)) {
        *fin = 0;
        *reinterpret_cast<volatile uint64_t*>(ws + Layout::kEpochOff) = tag;
        __threadfence();
      }
    }
  }

 private:
  // Rows [first, rows) of the buffer to dst (row pitch `pitch` bytes), this lane's 16 bytes of
  // each, kU rows in flight. This warp runs on the producer warpgroup's 40 registers: pointers
  // advance instead of being recomputed.
  // With budget_ns > 0, batch b of the nb batches starts no earlier than t0 + b * budget_ns / nb.
  template <int kU>
  CUTLASS_DEVICE static void push_rows(const E* buf, char* dst, long long pitch, int first, int rows, int lane,
                                       uint64_t t0, uint64_t budget_ns) {
    const E* src = buf + first * kPitch + lane * 8;
    char* d = dst + first * pitch + lane * 16;
    const int nb = (rows - first + kU - 1) / kU;
    int b = 0;
#pragma unroll 1
    for (int left = rows - first; left > 0; left -= kU, ++b) {
      if (budget_ns > 0 && b > 0) {
        const uint64_t due = t0 + budget_ns * (uint64_t)b / (uint64_t)nb, now = ptx::globaltimer();
        if (now < due) ptx::nanosleep(uint32_t(due - now));  // all lanes: the same t0, budget, b
      }
      uint4 w[kU];
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < kU; ++u)
        if (u < left) w[u] = *reinterpret_cast<const uint4*>(src + u * kPitch);
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < kU; ++u)
        if (u < left) ptx::st_v4(d + u * pitch, w[u]);
      src += kU * kPitch;
      d += kU * pitch;
    }
  }

  // Rows [first, rows) of the buffer to dst (row pitch `pitch`, `bytes` a row) by bulk copies: the
  // TMA unit moves them and the warp only issues, kBatch rows a batch (lanes 0..kBatch-1 one row
  // each; with `whole_batches`, dst rows at the buffer's pitch (a padded staging slot,
  // RelayKnobs::padded_slots), lane 0 the batch's rows, padding included, in one copy), batch b no
  // earlier than t0 + b * budget_ns / nb as push_rows paces. push_rows' 16-byte stores, issued by a
  // warp on the producer warpgroup's registers, can outlast a short mainloop (K_local 2048:
  // docs/fused_gemm.md, "The reduce-scatter relay's drag"); a peer's window is global memory to
  // the TMA unit as to the stores. Issues only: the caller commits the group and completes the
  // writes before its fence and flags (bulk_wait_all_writes).
  CUTLASS_DEVICE static void push_rows_bulk(const E* buf, char* dst, long long pitch, int first, int rows, int bytes,
                                            int lane, uint64_t t0, uint64_t budget_ns, bool evict_first,
                                            bool whole_batches) {
    constexpr int kBatch = 16;
    const int nb = (rows - first + kBatch - 1) / kBatch;
#pragma unroll 1
    for (int b = 0; b < nb; ++b) {
      if (budget_ns > 0 && b > 0) {
        const uint64_t due = t0 + budget_ns * (uint64_t)b / (uint64_t)nb, now = ptx::globaltimer();
        if (now < due) ptx::nanosleep(uint32_t(due - now));  // all lanes: the same t0, budget, b
      }
      const int r0 = first + b * kBatch, r = r0 + lane;
      if (whole_batches) {
        if (lane == 0)
          s2g(buf + r0 * kPitch, dst + (long long)r0 * kRelaySlotPitch, min(kBatch, rows - r0) * kRelaySlotPitch,
              evict_first);
      } else if (lane < kBatch && r < rows) {
        s2g(buf + r * kPitch, dst + (long long)r * pitch, bytes, evict_first);
      }
    }
  }

  // One row's bulk copy out of shared memory, with the evict-first L2 hint when asked (RelayKnobs).
  CUTLASS_DEVICE static void s2g(const E* src, void* dst, int bytes, bool evict_first) {
    if (evict_first)
      bulk_copy_s2g_hint(dst, src, uint32_t(bytes), kL2EvictFirst);
    else
      cute::SM90_BULK_COPY_S2G::copy(src, dst, bytes);
  }
  CUTLASS_DEVICE void s2g(const E* src, void* dst, int bytes) const { s2g(src, dst, bytes, l2_evict_first); }

  // Where a tile goes on: an owned tile's final to every peer's C (all-reduce; the reduce-scatter's
  // stays here), any other tile's partial sum to rank me - 1's staging slot.
  CUTLASS_DEVICE int push_targets(bool own) const { return own ? (lay.shard_tm > 0 ? 0 : lay.P - 1) : 1; }
  // Target d (< push_targets(own)) of tile (tile_m, tile_n): peer me + 1 + d's C (a final) or rank
  // me - 1's staging slot (a partial sum: rows packed, or at kRelaySlotPitch with padded_slots);
  // *pitch = the row pitch there in bytes.
  CUTLASS_DEVICE char* peer_dst(int tile_m, int tile_n, bool own, int d, long long* pitch) const {
    if (own) {
      *pitch = ldc * (long long)sizeof(E);
      return dev::lsa_ptr<char>(ctx, c_win,
                                c_off + ((size_t)tile_m * kBlkM * (size_t)ldc + (size_t)tile_n * kBlkN) * sizeof(E),
                                (me + 1 + d) % lay.P);
    }
    *pitch = padded_slots ? kRelaySlotPitch : kRowBytes;
    return dev::lsa_ptr<char>(ctx, ws_win, ws_off + lay.relay_slot(lay.tile_index(tile_m, tile_n)),
                              (me + lay.P - 1) % lay.P);
  }
  // The first row of this rank's C: 0, or its shard's first row (reduce-scatter).
  CUTLASS_DEVICE int shard_row0() const { return lay.shard_tm * kBlkM * me; }

  static constexpr int kTileEvents = 6;
  CUTLASS_DEVICE void emit(uint32_t id, trace::EventKind k, uint64_t t) const {
    trace::emit_at(
        ring, (unsigned long long)id * kTileEvents + (unsigned long long)(int(k) - int(trace::EventKind::kMmaStart)), k,
        id, t);
  }
  CUTLASS_DEVICE unsigned long long cta_slot(int which) const {
    return (unsigned long long)kTileEvents * lay.T + 2ull * blockIdx.x + which;
  }

  // This rank's position in tile (tile_m, tile_n)'s chain (plan.hpp relay_position); P - 1: it owns it.
  CUTLASS_DEVICE int position(int tile_m, int tile_n) const {
    return lay.relay_position(sched.order_of_unit(gemm_impl::TileCoord{tile_m / sched.cluster_m, tile_n}), me);
  }
  CUTLASS_DEVICE bool owns(int tile_m, int tile_n) const { return position(tile_m, tile_n) == lay.P - 1; }
  // Ready the buffer for tile u: at position >= 1 the incoming partial sum (once rank me + 1's flag
  // says it is in staging) arrives by bulk loads that complete the `ready` phase by bytes;
  // otherwise one arrive.
  CUTLASS_DEVICE void prepare(gemm_impl::TileCoord u, uint64_t tag, int lane, SharedStorage* smem) const {
    if (position(u.m, u.n) == 0) {
      if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&smem->ready);
      return;
    }
    const int t = lay.tile_index(u.m, u.n);
    const int rows = min(M - u.m * kBlkM, kBlkM), bytes = min(N - u.n * kBlkN, kBlkN) * 2;
    const uint32_t expect = uint32_t(rows * (padded_slots ? kRelaySlotPitch : bytes));
    if (lane == 0) {
      wait_flag(ctx, ws + lay.relay_arrive_flag(t), tag, "gemm_allreduce.relay_partial");
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem->ready, expect);
    }
    __syncwarp();
    // Lane 0 acquired the flag through the generic proxy; the bulk loads read through the async
    // proxy: each issuing lane fences between the two (the proxy rule, ptx.cuh).
    ptx::fence_proxy_async_global();
    // Pushed partials sit in this rank's staging; pulled ones are loaded from rank me + 1's.
    const char* src = pull ? dev::lsa_ptr<const char>(ctx, ws_win, ws_off + lay.relay_slot(t), (me + 1) % lay.P)
                           : ws + lay.relay_slot(t);
    if (padded_slots) {  // the whole slot, padding included, in one copy
      if (lane == 0) {
        if (l2_evict_first)
          bulk_copy_g2s_hint(smem->buf, src, expect, &smem->ready, kL2EvictFirst);
        else
          cute::SM90_BULK_COPY_G2S::copy(src, &smem->ready, smem->buf, int(expect));
      }
      return;
    }
#pragma unroll 1
    for (int r = lane; r < rows; r += 32)
      if (l2_evict_first)
        bulk_copy_g2s_hint(smem->buf + r * kPitch, src + (size_t)r * kRowBytes, bytes, &smem->ready, kL2EvictFirst);
      else
        cute::SM90_BULK_COPY_G2S::copy(src + (size_t)r * kRowBytes, &smem->ready, smem->buf + r * kPitch, bytes);
  }
};

using RelayHook = RelayHookT<true>;
static_assert(std::is_trivially_copyable_v<RelayHook>, "hooks travel in the kernel parameters");

}  // namespace tw::gemm_allreduce_impl
