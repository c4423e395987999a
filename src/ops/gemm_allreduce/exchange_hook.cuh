// src/ops/gemm_allreduce/exchange_hook.cuh — the epilogue hook of the fused GEMM + all-reduce,
// "exchange" algorithm (the default for 2 ranks; docs/gemm_allreduce.md compares it with the
// owner algorithm of hook.cuh).
//
// Every rank sends its bf16 partial of every tile to every rank (itself included), and every rank
// sums the P partials of every tile itself, in rank order, in fp32, then rounds once to bf16:
// the same inputs in the same order on every rank, so C is bit-identical everywhere. For P = 2
// this moves exactly the bytes of reduce-scatter + all-gather (one partial per tile per direction
// instead of a partial one way and the final tile back), with no second hop and no done flags.
// For P > 2 it sends (P - 1) partials per tile instead of 2 (P - 1) / P: the owner algorithm wins.
//
// Nothing on the consumers' path waits for NVLink, and nothing in the TMA unit does either: the
// partials leave through the kernel's idle epilogue-load warp (the "comm warp", producer
// warpgroup warp 2), with plain 16-byte stores, while the consumers run the next mainloop.
// (Bulk TMA copies to the peer, measured in docs/gemm_allreduce.md: the TMA unit serves a 64 KiB copy over NVLink at the link's per-SM share, and the mainloop's TMA
// loads queue behind it: +45% time.)
// For the CTA's valid tiles V_0, V_1, ... (tiles inside C, in its walk order):
//
//   consumers, hook call for V_j:
//     1. wait `freed` (the comm warp has read V_{j-1} out of shared memory);
//     2. stage V_j: accumulators -> bf16 -> shared memory, row-major (rows padded 16 bytes);
//        every thread arrives on `staged`;
//     3. reduce V_{j-2}: wait arrive[V_{j-2}][q] == tag for every q (normally set long ago), sum
//        slot[V_{j-2}][0..P) in fp32 in rank order, store C(V_{j-2}) locally (16-byte stores).
//   comm warp, for V_j:  wait `staged`; copy the tile to slot[V_j][me] of every rank (peers first)
//     with 16-byte stores; arrive on `freed`; fence.sc.sys; st.release.sys arrive[V_j][me] := tag
//     on every rank.
//   consumers after the last tile (tail): reduce V_{n-2} and V_{n-1}, then the last CTA of the
//     rank advances the call counter and tells every peer "done reading" (peer_done[me]).
//
//      consumers  | V_j mainloop |stage| reduce V_j-2 | V_j+1 mainloop |stage| reduce V_j-1 |
//      comm warp                 |copy V_j ==NVLink==> peer, flag |      |copy V_j+1 ==> ...
//
// Deadlock freedom (waits are also bounded by ctx.timeout_ns): every rank runs the same grid and
// walk (no rotation), so CTA c's valid tiles are the same list on every rank. A wait in step 4 of
// V_j needs every peer's step 1 of V_{j-1} (or its tail), which needs only that peer's own earlier
// steps: by induction on j every wait ends, provided every CTA is resident (the launcher checks).
// Across calls: a rank pushes into a peer's slots of call n+1 only after that peer said it
// finished reading call n (peer_done[q] >= tag - 1, checked by the comm warp before its first push).
#pragma once
#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include "../gemm/epilogue_hook.cuh"
#include "../gemm/launch.hpp"
#include "../gemm/scheduler.hpp"
#include "cta_walk.cuh"
#include "hook_params.hpp"
#include "plan.hpp"
#include "tilewire/device.cuh"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_allreduce_impl {

// kTraced = false: the same hook with the trace code compiled out (the kernel tracing-off is
// measured against: testing::set_untraced_kernels, src/testing/measurement.hpp).
template <bool kTraced>
struct ExchangeHookT : HookParams {
  using E = cutlass::bfloat16_t;
  static constexpr int kPitch = kBlkN + 8;  // shared-memory row pitch in elements (+16 bytes)
  static constexpr bool kCommWarp = true;   // HookEpilogue runs comm() in the epilogue-load warp
  struct SharedStorage {
    alignas(128) E buf[kBlkM * kPitch];
    uint64_t staged;  // mbarrier, 256 arrivals per tile: every consumer thread after its writes
    uint64_t freed;   // mbarrier, 32 arrivals per tile: every comm lane after its reads
  };

  // HookParams (hook_params.hpp): ctx, lay (the exchange layout), sched, me, grid_ctas, ws_win /
  // ws_off / ws, C [M, N], ldc, M, N, ring.

  CUTLASS_HOST_DEVICE bool clock_on() const { return tracing(); }
  CUTLASS_HOST_DEVICE bool tracing() const {
    if constexpr (kTraced) return ring.on();
    else return false;
  }

  CUTLASS_DEVICE static void init_smem(SharedStorage& s) {
    cutlass::arch::ClusterBarrier::init(&s.staged, kConsumerThreads);
    cutlass::arch::ClusterBarrier::init(&s.freed, 32);
    cutlass::arch::fence_barrier_init();
  }

  // ---- consumers (256 threads), once per valid tile
  template <class View>
  CUTLASS_DEVICE void operator()(View const& v) const {
    using namespace cute;
    const uint64_t t_mma_end = tracing() ? ptx::globaltimer() : 0;
    const int tid = v.thread_idx;
    const uint64_t tag = call_tag(ws);
    const CtaWalk walk(sched);
    const int step = v.step, j = v.seq;  // V_j
    SharedStorage& sm = *v.smem;

    // 1. the comm warp has read V_{j-1} out of the buffer.
    if (j > 0) wait_mbarrier(ctx, &sm.freed, (j - 1) & 1, "gemm_allreduce.smem_freed");

    // 2. stage V_j.
    E* buf = sm.buf;
    constexpr int kN = decltype(size(v.acc))::value;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kN; i += 2) {
      const int r = get<0>(v.coord(i)), c = get<1>(v.coord(i));
      cute::array_aligned<E, 2, 4> q;
      q[0] = static_cast<E>(v.acc(i));
      q[1] = static_cast<E>(v.acc(i + 1));
      *reinterpret_cast<cute::array_aligned<E, 2, 4>*>(buf + r * kPitch + c) = q;
    }
    // Every thread releases its own writes (no barrier-plus-one-arrive cumulativity to rely on).
    cutlass::arch::ClusterBarrier::arrive(&sm.staged);
    if (tracing() && tid == 0) {
      const uint32_t id = uint32_t(v.tile_m * lay.tiles_n + v.tile_n);
      // The consumers' start (HookEpilogue's constructor) is the first tile's MMA start.
      if (j == 0) trace::emit_at(ring, cta_slot(0), trace::EventKind::kKernelStart, blockIdx.x, v.t_mma_start_ns);
      trace::emit_at(ring, tile_slot(id, trace::EventKind::kMmaStart), trace::EventKind::kMmaStart, id, v.t_mma_start_ns);
      trace::emit_at(ring, tile_slot(id, trace::EventKind::kMmaEnd), trace::EventKind::kMmaEnd, id, t_mma_end);
    }

    // 3. reduce the tile before the previous one.
    const int prev1 = walk.prev_valid(step);
    const int prev2 = prev1 >= 0 ? walk.prev_valid(prev1) : -1;
    if (prev2 >= 0) reduce(walk.tile_at(prev2), tag, tid);
  }

  // ---- comm warp (32 lanes), once per valid tile, in the consumers' order
  CUTLASS_DEVICE void comm(int tile_m, int tile_n, int /*step*/, int j, int lane, SharedStorage* smem) const {
    const uint64_t tag = call_tag(ws);
    // Before the first push of this call: every peer finished reading the previous call's slots.
    if (j == 0 && lane < lay.P && lane != me)
      wait_flag(ctx, ws + lay.peer_done_flag(lane), tag - 1, "gemm_allreduce.peer_done");
    wait_mbarrier(ctx, &smem->staged, j & 1, "gemm_allreduce.staged");

    const int t = lay.tile_index(tile_m, tile_n);
    const int rows = min(M - tile_m * kBlkM, kBlkM), vecs = min(N - tile_n * kBlkN, kBlkN) / 8;
    constexpr int kVecRow = kBlkN / 8;  // 32: one row per warp instruction
    if (tracing() && lane == 0) {
      const uint32_t id = uint32_t(tile_m * lay.tiles_n + tile_n);
      trace::emit_at(ring, tile_slot(id, trace::EventKind::kPartialLeave), trace::EventKind::kPartialLeave, id,
                     ptx::globaltimer());
    }
    const char* src = reinterpret_cast<const char*>(smem->buf);
#pragma unroll 1
    for (int k = 1; k <= lay.P; ++k) {
      const int q = (me + k) % lay.P;  // peers first, own slot last
      const size_t off = lay.slot(t, me);
      char* dst = q == me ? ws + off : dev::lsa_ptr<char>(ctx, ws_win, ws_off + off, q);
      if (lane < vecs) {
#pragma unroll 4
        for (int r = 0; r < rows; ++r) {
          const uint4 w = *reinterpret_cast<const uint4*>(src + ((size_t)r * kPitch + lane * 8) * sizeof(E));
          ptx::st_v4(dst + ((size_t)r * kBlkN + lane * 8) * sizeof(E), w);
        }
      }
      static_assert(kVecRow == 32, "one 16-byte vector per lane per row");
    }
    cutlass::arch::ClusterBarrier::arrive(&smem->freed);  // this lane's reads of buf are done
    // Publish: this lane's stores are performed at system scope, then the flags (release).
    __threadfence_system();
    __syncwarp();
    if (lane < lay.P) {
      const size_t off = lay.arrive_flag(t, me);
      uint64_t* f = lane == me ? reinterpret_cast<uint64_t*>(ws + off) : dev::lsa_ptr<uint64_t>(ctx, ws_win, ws_off + off, lane);
      ptx::st_release_sys(f, tag);
    }
  }

  // After the CTA's last tile (every consumer thread).
  CUTLASS_DEVICE void tail(int tid) const {
    const uint64_t tag = call_tag(ws);
    const CtaWalk walk(sched);
    const int last = walk.prev_valid(walk.steps());
    if (last >= 0) {
      const int prev = walk.prev_valid(last);
      if (prev >= 0) reduce(walk.tile_at(prev), tag, tid);
      reduce(walk.tile_at(last), tag, tid);
    }
    gemm_impl::hook_bar();
    if (tracing() && tid == 0) {
      if (last >= 0) trace::emit_at(ring, cta_slot(1), trace::EventKind::kKernelEnd, blockIdx.x, ptx::globaltimer());
      trace::reserve(ring, (unsigned long long)kTileEvents * lay.T + 2ull * grid_ctas);
    }
    if (tid == 0) {
      // Every CTA of this rank read the tag before arriving here (its comm warp too: the last
      // reduction waited for its flag); the last one advances the call counter and tells the
      // peers this rank's slots may be overwritten by the next call.
      auto* fin = reinterpret_cast<unsigned long long*>(ws + Layout::kFinishedOff);
      __threadfence();
      if (atomicAdd(fin, 1ull) == (unsigned long long)(grid_ctas - 1)) {
        *fin = 0;
        *reinterpret_cast<volatile uint64_t*>(ws + Layout::kEpochOff) = tag;
        __threadfence();
#pragma unroll 1
        for (int q = 0; q < lay.P; ++q)
          if (q != me) ptx::st_release_sys(dev::lsa_ptr<uint64_t>(ctx, ws_win, ws_off + lay.peer_done_flag(me), q), tag);
      }
    }
  }

 private:
  // Trace layout (emit_at, no atomics): six slots per tile (kinds mma_start .. tile_landed), then
  // kernel_start / kernel_end per CTA. Ring capacity >= 6 T + 2 * grid CTAs (else events drop).
  static constexpr int kTileEvents = 6;
  CUTLASS_DEVICE static unsigned long long tile_slot(uint32_t id, trace::EventKind k) {
    return (unsigned long long)id * kTileEvents + (unsigned long long)(int(k) - int(trace::EventKind::kMmaStart));
  }
  CUTLASS_DEVICE unsigned long long cta_slot(int which) const {
    return (unsigned long long)kTileEvents * lay.T + 2ull * blockIdx.x + which;
  }

  // C(u) = round(sum over q in rank order of slot[u][q]), 8 columns per 16-byte vector.
  CUTLASS_DEVICE void reduce(gemm_impl::TileCoord u, uint64_t tag, int tid) const {
    const int t = lay.tile_index(u.m, u.n);
    if (tid < lay.P) wait_flag(ctx, ws + lay.arrive_flag(t, tid), tag, "gemm_allreduce.partial");
    gemm_impl::hook_bar();
    const uint32_t id = uint32_t(u.m * lay.tiles_n + u.n);
    if (tracing() && tid == 0)
      trace::emit_at(ring, tile_slot(id, trace::EventKind::kPartialsSeen), trace::EventKind::kPartialsSeen, id,
                     ptx::globaltimer());
    if (lay.P == 2) reduce_tile<2>(u, t, tid);  // both partials' loads in flight together
    else reduce_tile<0>(u, t, tid);
    if (tracing()) {
      gemm_impl::hook_bar();
      if (tid == 0) {
        const uint64_t now = ptx::globaltimer();
        trace::emit_at(ring, tile_slot(id, trace::EventKind::kReduceDone), trace::EventKind::kReduceDone, id, now);
        trace::emit_at(ring, tile_slot(id, trace::EventKind::kTileLanded), trace::EventKind::kTileLanded, id, now);
      }
    }
  }

  // The tile is 128 x 32 16-byte vectors; thread tid takes vectors tid, tid + 256, ... (16 of
  // them, coalesced rows), in two halves of 8. Latency, not bandwidth, bounds this (the slots are
  // mostly L2-resident): every load of a half is issued before the first is used, so a half costs
  // one round trip for kP = 2 (P round trips otherwise), not one per vector and partial.
  template <int kP>
  CUTLASS_DEVICE void reduce_tile(gemm_impl::TileCoord u, int t, int tid) const {
    constexpr int kVecRow = kBlkN / 8, kHalf = 8;  // 32 vectors per row; 8 vectors per half
    static_assert(kBlkM * kVecRow == 2 * kHalf * kConsumerThreads, "two halves of 8 vectors per thread");
    const int row0 = u.m * kBlkM, col0 = u.n * kBlkN;
    const int rows = min(M - row0, kBlkM), vecs = min(N - col0, kBlkN) / 8;  // N % 8 == 0 (can_implement)
    const int P = kP > 0 ? kP : lay.P;
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      int off[kHalf];
      bool in[kHalf];
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kHalf; ++k) {
        const int i = (h * kHalf + k) * kConsumerThreads + tid, r = i / kVecRow, cv = i % kVecRow;
        in[k] = r < rows && cv < vecs;
        off[k] = (r * kBlkN + cv * 8) * int(sizeof(E));
      }
      float s[kHalf][8];
      auto add = [&](const uint4 (&w)[kHalf], bool first) {
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kHalf; ++k) {
          const uint32_t* hw = &w[k].x;
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&hw[e]));
            s[k][2 * e] = first ? f.x : s[k][2 * e] + f.x;
            s[k][2 * e + 1] = first ? f.y : s[k][2 * e + 1] + f.y;
          }
        }
      };
      auto load = [&](int q, uint4 (&w)[kHalf]) {
        const char* slot = ws + lay.slot(t, q);
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kHalf; ++k) w[k] = in[k] ? ptx::ld_cg_v4(slot + off[k]) : make_uint4(0, 0, 0, 0);
      };
      if constexpr (kP == 2) {
        uint4 w0[kHalf], w1[kHalf];
        load(0, w0);
        load(1, w1);
        add(w0, true);
        add(w1, false);  // rank order: slot 0 then slot 1
      } else {
#pragma unroll 1
        for (int q = 0; q < P; ++q) {
          uint4 w[kHalf];
          load(q, w);
          add(w, q == 0);
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kHalf; ++k) {
        if (!in[k]) continue;
        const int i = (h * kHalf + k) * kConsumerThreads + tid, r = i / kVecRow, cv = i % kVecRow;
        uint4 o;
        uint32_t* ho = &o.x;
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 4; ++e) {
          __nv_bfloat162 b = __floats2bfloat162_rn(s[k][2 * e], s[k][2 * e + 1]);
          ho[e] = *reinterpret_cast<uint32_t*>(&b);
        }
        ptx::st_v4(c_typed<E>() + (long long)(row0 + r) * ldc + col0 + cv * 8, o);
      }
    }
  }
};

using ExchangeHook = ExchangeHookT<true>;
static_assert(std::is_trivially_copyable_v<ExchangeHook>, "hooks travel in the kernel parameters");

}  // namespace tw::gemm_allreduce_impl
