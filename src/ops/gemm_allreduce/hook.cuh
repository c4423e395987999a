// src/ops/gemm_allreduce/hook.cuh — the epilogue hook of the fused GEMM + all-reduce (contract
// of hooks: src/ops/gemm/epilogue_hook.cuh; the op: include/tilewire/ops/gemm_allreduce.hpp).
// Runs on 2 x H200 (GemmAllReduce tests with algo kOwner; docs/gemm_allreduce.md).
//
// Called once per output tile by the 256 consumer threads of the CTA that computed it, with the
// fp32 accumulators in registers. All 256 threads take the same branches (owner or not, last work
// or not), so the hook's named barrier (kHookBarrierId) is reached by all of them; never
// __syncthreads(): the producer warp is not here.
//
// Memory ordering, per tile t with owner o and this call's tag:
//   pusher q:  each thread stores its partial vectors to staging[t][q] @ o (weak stores through
//              the LSA pointer); named barrier; thread 0 st.release.sys arrive[t][q] @ o := tag.
//              The release is cumulative: the barrier made the other threads' stores precede it.
//   owner o:   thread q (q != o) spins ld.acquire.sys on arrive[t][q] (bounded); named barrier;
//              every thread then reads the staging through L2 (ld.cg: never a stale L1 line),
//              sums, stores C(t) to every rank; named barrier; thread q st.release.sys
//              done[t] @ q := tag.
//   last work of the CTA: each thread of the first warp acquires a share of done[0..T)
//              (bounded, pausing between polls); named barrier.
//              C is then final on this rank for whatever runs after the kernel.
// Tracing (ring on; one uniform branch per tile when off): thread 0 records, at fixed slots
// (kTileEvents per tile, then 2 per CTA), mma_start / mma_end of every tile it computes, then as
// pusher partial_leave (its first store issued), as owner partials_seen and reduce_done. Then
// tile_landed: gemm_allreduce, on every rank, from its final wait (the thread that saw the
// tile's done flag); gemm_reducescatter, whose finals stay on their owner, the owner when it has
// stored the sum and a pusher when it has released its partial's flag (its part is done).
// kernel_start at the CTA's first tile, kernel_end in tail() after its last.
// Waits use dev::bounded_spin_silent: bounded by ctx.timeout_ns, the fault record without printf
// (a call anywhere in a wgmma kernel makes ptxas serialize its wgmma pipeline; ptxas warns C7510).
// Deadlock freedom (every wait is also bounded by ctx.timeout_ns): every rank walks the same work
// list with the same grid shape rule, CTAs take work indices in increasing order, and a wait in
// work w only needs other ranks' work w. By induction on w, all work < w finishes everywhere, so
// every pusher of w reaches its hook and the owner's wait ends. (gemm_reducescatter's rotated
// walk has its own argument: plan.hpp, scatter_rotates.) The final waits come after a
// CTA's last work and nothing waits on them. Both need every CTA resident (the launcher checks
// occupancy), and the final wait is done only at the group's last work so that a cluster partner
// never waits in the hook while its partner's mainloop still needs its pipeline releases.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include "../gemm/epilogue_hook.cuh"
#include "../gemm/scheduler.hpp"
#include "hook_params.hpp"
#include "plan.hpp"
#include "tilewire/device.cuh"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_allreduce_impl {

// Partial element types: round-to-nearest-even conversions, packing into 32-bit words.
template <class PT>
struct PartialIO;
template <>
struct PartialIO<float> {
  static constexpr int kPerVec = 4;  // elements per 16-byte vector
  __device__ static float round(float x) { return x; }
  __device__ static uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
  __device__ static void unpack(uint4 w, float* f) {
    f[0] = __uint_as_float(w.x), f[1] = __uint_as_float(w.y), f[2] = __uint_as_float(w.z), f[3] = __uint_as_float(w.w);
  }
};
// The two 16-bit partial types: RNE conversions through their paired types (H2), 8 per vector.
// Cvt names the conversions (struct members, not function pointers: the CUDA intrinsics have
// internal linkage, which a template argument would give the whole type).
template <class H, class H2, class Cvt>
struct PartialIO16 {
  static constexpr int kPerVec = 8;
  __device__ static float round(float x) { return Cvt::from(Cvt::to(x)); }
  __device__ static uint32_t pack2(float a, float b) {
    H2 h = Cvt::to2(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static uint4 pack(const float* f) {
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
  }
  __device__ static void unpack2(uint32_t w, float* f) {
    const float2 v = Cvt::from2(*reinterpret_cast<H2*>(&w));
    f[0] = v.x, f[1] = v.y;
  }
  __device__ static void unpack(uint4 w, float* f) { unpack2(w.x, f), unpack2(w.y, f + 2), unpack2(w.z, f + 4), unpack2(w.w, f + 6); }
};
struct Bf16Cvt {
  __device__ static __nv_bfloat16 to(float x) { return __float2bfloat16_rn(x); }
  __device__ static float from(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat162 to2(float a, float b) { return __floats2bfloat162_rn(a, b); }
  __device__ static float2 from2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
};
struct HalfCvt {
  __device__ static __half to(float x) { return __float2half_rn(x); }
  __device__ static float from(__half x) { return __half2float(x); }
  __device__ static __half2 to2(float a, float b) { return __floats2half2_rn(a, b); }
  __device__ static float2 from2(__half2 x) { return __half22float2(x); }
};
template <>
struct PartialIO<__nv_bfloat16> : PartialIO16<__nv_bfloat16, __nv_bfloat162, Bf16Cvt> {};
template <>  // gemm_reducescatter in fp16: partials in the output dtype
struct PartialIO<__half> : PartialIO16<__half, __half2, HalfCvt> {};

// ET: C's CUTLASS element (cutlass::bfloat16_t or cutlass::half_t). Two-byte partials are in C's
// dtype, four-byte ones fp32. kTraced = false: the trace code compiled out. The launcher runs that
// kernel whenever the ring is off: the trace code, even behind a uniform branch, costs registers
// in the epilogue (the accumulators are live there): ptxas spilled 3784 bytes with it against 1256
// without, and the fused reduce-scatter ran 4-31% slower on an H200 (docs/gemm_scatter_gather.md).
template <class ET, bool kTraced>
struct AllReduceHookT : HookParams {
  struct SharedStorage {};  // nothing: partials travel from registers, sums land in registers
  using E = ET;
  using Half = std::conditional_t<std::is_same_v<ET, cutlass::half_t>, __half, __nv_bfloat16>;

  // HookParams (hook_params.hpp): ctx, lay, sched, me, grid_ctas, ws_win / ws_off / ws, c_win /
  // c_off, C, ldc, M, N, ring.
  int final_ctas = 0;              // CTAs that run the final wait (plan.hpp final_wait_ctas)

  // The final wait: threads that poll the done flags (one warp) and their pause between two polls
  // of one flag. The measurement build can set every consumer thread polling without a pause
  // (TILEWIRE_OWNER_FINAL_POLL_ALL), to show what that costs.
  int final_pollers = 32;
  uint32_t final_poll_ns = 500;

  CUTLASS_HOST_DEVICE bool clock_on() const { return kTraced && ring.on(); }

  // After the CTA's last tile (every consumer thread; the kernel calls it): kernel_end, for a CTA
  // that recorded a kernel_start (its thread 0 wrote that slot: it reads its own store back),
  // and the ring's counter raised to the end of the layout.
  CUTLASS_DEVICE void tail(int tid) const {
    if (!kTraced || !ring.on() || tid != 0) return;
    const unsigned long long start = (unsigned long long)kTileEvents * lay.T + 2ull * blockIdx.x;
    if (start < ring.capacity && ring.events[start].t_ns != 0) emit_cta(1, trace::EventKind::kKernelEnd, ptx::globaltimer());
    trace::reserve(ring, (unsigned long long)kTileEvents * lay.T + 2ull * grid_ctas);
  }

  template <class View>
  CUTLASS_DEVICE void operator()(View const& v) const {
    if (lay.partial_bytes == 4) tile<float>(v);
    else tile<Half>(v);
  }

 private:
  CUTLASS_DEVICE static void bar() { cutlass::arch::NamedBarrier::sync(kConsumerThreads, gemm_impl::kHookBarrierId); }

  CUTLASS_DEVICE uint64_t* remote_flag(size_t off, int q) const {
    return dev::lsa_ptr<uint64_t>(ctx, ws_win, ws_off + off, q);
  }

  // Trace slots: kind k of tile u at u * kTileEvents + (k - kMmaStart); CTA b's start and end after
  // every tile's (the ring's counter is raised to the end of this layout once per CTA).
  static constexpr int kTileEvents = 6;  // kMmaStart .. kTileLanded
  CUTLASS_DEVICE void emit(int u, trace::EventKind k, uint64_t t) const {
    trace::emit_at(ring, (unsigned long long)u * kTileEvents + (unsigned long long)(int(k) - int(trace::EventKind::kMmaStart)),
                   k, uint32_t(u), t);
  }
  CUTLASS_DEVICE void emit_cta(int which, trace::EventKind k, uint64_t t) const {
    trace::emit_at(ring, (unsigned long long)kTileEvents * lay.T + 2ull * blockIdx.x + which, k, blockIdx.x, t);
  }

  template <class PT, class View>
  CUTLASS_DEVICE void tile(View const& v) const {
    using IO = PartialIO<PT>;
    constexpr int kN = decltype(cute::size(v.acc))::value;  // accumulators per thread (128; 32 on the decode tile)
    constexpr int kE = IO::kPerVec;
    constexpr int kV = kN / kE;                               // 16-byte vectors per thread
    constexpr int kChunk = 4;                                  // vectors summed together
    // One fragment element per tile element, on either tile; lay.slot_bytes is the same tile's
    // (the launcher builds the layout and picks the kernel from owner_tile_is_decode).
    static_assert(kN * kConsumerThreads == kTileElems || kN * kConsumerThreads == kBlkM * kDecodeBlkN,
                  "one fragment element per tile element");
    static_assert(kN % kE == 0 && kV % kChunk == 0, "fragment splits into whole vectors and chunks");

    const int tid = v.thread_idx;
    const int t = lay.tile_index(v.tile_m, v.tile_n);
    const int o = lay.owner(t);
    // The call's tag; the counter changes only after every CTA's last read (see plan.hpp).
    const uint64_t tag = *reinterpret_cast<volatile const uint64_t*>(ws + Layout::kEpochOff) + 1;
    const size_t lane_off = (size_t)tid * 16;  // fragment order: vector i of thread tid at (i*256+tid)*16
    const bool rec = kTraced && ring.on() && tid == 0;
    if (rec) {
      const uint64_t now = ptx::globaltimer();
      if (v.seq == 0) emit_cta(0, trace::EventKind::kKernelStart, v.t_mma_start_ns);
      emit(t, trace::EventKind::kMmaStart, v.t_mma_start_ns);
      emit(t, trace::EventKind::kMmaEnd, now);
      if (me != o) emit(t, trace::EventKind::kPartialLeave, now);
    }

    if (me != o) {
      // ---- push: partial (rounded to PT) into the owner's staging, then the arrive flag.
      char* dst = dev::lsa_ptr<char>(ctx, ws_win, ws_off + lay.staging(t, me), o);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kV; ++i) {
        float f[kE];
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < kE; ++e) f[e] = v.acc(i * kE + e);
        ptx::st_v4(dst + (size_t)i * kConsumerThreads * 16 + lane_off, IO::pack(f));
      }
      bar();
      if (tid == 0) ptx::st_release_sys(remote_flag(lay.arrive_flag(t, me), o), tag);
      // Reduce-scatter: this rank is done with the tile once its partial is at the owner.
      if (rec && lay.shard_tm > 0) emit(t, trace::EventKind::kTileLanded, ptx::globaltimer());
    } else {
      // ---- own: wait for the P-1 partials, sum in rank order, store C(t) everywhere, done flags.
      if (tid < lay.P && tid != me) {
        const uint64_t* f = reinterpret_cast<const uint64_t*>(ws + lay.arrive_flag(t, tid));
        dev::bounded_spin_silent(
            ctx, "gemm_allreduce.partial", tag, [&] { return ptx::ld_acquire_sys(f); },
            [&](uint64_t x) { return dev::rolling_ge(x, tag); });
      }
      bar();
      if (rec) emit(t, trace::EventKind::kPartialsSeen, ptx::globaltimer());
      CUTLASS_PRAGMA_UNROLL
      for (int c0 = 0; c0 < kV; c0 += kChunk) {
        float s[kChunk * kE];
#pragma unroll 1
        for (int q = 0; q < lay.P; ++q) {
          float x[kChunk * kE];
          if (q == me) {
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < kChunk * kE; ++j) x[j] = IO::round(v.acc(c0 * kE + j));
          } else {
            const char* src = ws + lay.staging(t, q) + (size_t)c0 * kConsumerThreads * 16 + lane_off;
            uint4 w[kChunk];
            CUTLASS_PRAGMA_UNROLL
            for (int k = 0; k < kChunk; ++k) w[k] = ptx::ld_cg_v4(src + (size_t)k * kConsumerThreads * 16);
            CUTLASS_PRAGMA_UNROLL
            for (int k = 0; k < kChunk; ++k) IO::unpack(w[k], x + k * kE);
          }
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kChunk * kE; ++j) s[j] = (q == 0) ? x[j] : s[j] + x[j];
        }
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kChunk * kE; ++j) v.acc(c0 * kE + j) = s[j];
      }
      // v.acc now holds the fp32 sum; StoreCDirect rounds it once to bf16 and stores the tile.
      if (lay.shard_tm > 0) {
        // Reduce-scatter: into this rank's C shard only, whose row 0 is row me x shard rows of C.
        gemm_impl::StoreCDirect<E>{c_typed<E>() - (long long)me * lay.shard_tm * kBlkM * ldc, ldc}(v);
      } else {
#pragma unroll 1
        for (int k = 1; k <= lay.P; ++k) {
          const int q = (me + k) % lay.P;  // peers first, own copy last
          E* base = q == me ? c_typed<E>() : dev::lsa_ptr<E>(ctx, c_win, c_off, q);
          gemm_impl::StoreCDirect<E>{base, ldc}(v);
        }
      }
      bar();
      if (tid < lay.P) ptx::st_release_sys(remote_flag(lay.done_flag(t), tid), tag);
      if (rec) {
        const uint64_t now = ptx::globaltimer();
        emit(t, trace::EventKind::kReduceDone, now);
        if (lay.shard_tm > 0) emit(t, trace::EventKind::kTileLanded, now);  // its only copy: here
      }
    }

    // ---- after the group's last work: this rank's C is final once every done flag has the tag.
    const int w = sched.work_of_tile(gemm_impl::TileCoord{v.tile_m, v.tile_n});
    if (w + sched.ctas >= sched.units()) {
      // One warp polls, pausing between polls: a CTA that finishes early would otherwise keep
      // 256 threads issuing acquire loads at L2 for the rest of the call, beside the mainloops
      // and reductions that still need it (on a virtual team, the same L2 as every rank's).
#pragma unroll 1
      for (int u = tid; tid < final_pollers && u < lay.T; u += final_pollers) {
        const uint64_t* f = reinterpret_cast<const uint64_t*>(ws + lay.done_flag(u));
        bool first = true;
        dev::bounded_spin_silent(
            ctx, "gemm_allreduce.done", tag,
            [&] {
              if (!first && final_poll_ns != 0) ptx::nanosleep(final_poll_ns);
              first = false;
              return ptx::ld_acquire_sys(f);
            },
            [&](uint64_t x) { return dev::rolling_ge(x, tag); });
        // All-reduce: tile u is final in this rank's C now (reduce-scatter: the owner recorded it).
        if (kTraced && ring.on() && lay.shard_tm == 0) emit(u, trace::EventKind::kTileLanded, ptx::globaltimer());
      }
      bar();
      if (tid == 0) {
        // The last CTA past its final wait advances the call counter: every CTA of this rank read
        // it before its tiles' done flags were set, which this CTA has just seen.
        auto* fin = reinterpret_cast<unsigned long long*>(ws + Layout::kFinishedOff);
        __threadfence();
        if (atomicAdd(fin, 1ull) == (unsigned long long)(final_ctas - 1)) {
          *fin = 0;
          *reinterpret_cast<volatile uint64_t*>(ws + Layout::kEpochOff) = tag;
          __threadfence();
        }
      }
    }
  }
};

static_assert(std::is_trivially_copyable_v<AllReduceHookT<cutlass::bfloat16_t, true>>, "hooks travel in the kernel parameters");
static_assert(std::is_trivially_copyable_v<AllReduceHookT<cutlass::half_t, true>>, "hooks travel in the kernel parameters");

}  // namespace tw::gemm_allreduce_impl
