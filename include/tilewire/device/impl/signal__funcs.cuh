#pragma once
#include <cstdio>
#include <type_traits>

#include "tilewire/device/impl/gin_emu__funcs.cuh"

namespace tw::dev {

__device__ __forceinline__ bool is_release(cuda::memory_order o) {
  return o == cuda::memory_order_release || o == cuda::memory_order_acq_rel || o == cuda::memory_order_seq_cst;
}
__device__ __forceinline__ bool is_acquire(cuda::memory_order o) {
  return o == cuda::memory_order_acquire || o == cuda::memory_order_acq_rel || o == cuda::memory_order_seq_cst ||
         o == cuda::memory_order_consume;
}

template <class Coop>
__device__ void signal(Coop coop, const DevCtx& ctx, int peer, int index, uint64_t value, SignalOp op,
                       cuda::memory_order order) {
  coop.sync();
  if (coop.thread_rank() != 0) return;
  if (is_lsa_peer(ctx, peer)) {
    uint64_t* p = signal_ptr(ctx, index, lsa_of_world(ctx, peer));
    if (op == SignalOp::kAdd) {
      if (is_release(order)) ptx::red_add_release_sys(p, value);
      else ptx::red_add_relaxed_sys(p, value);
    } else {
      if (is_release(order)) ptx::st_release_sys(p, value);
      else ptx::st_relaxed_sys(p, value);
    }
    return;
  }
  if (op != SignalOp::kAdd || ctx.gin_contexts == 0) {
    printf("tilewire: rank %d: signal to rank %d needs GIN (peer outside the LSA team) and an add; "
           "GIN %s\n", ctx.rank, peer, ctx.gin_contexts ? "present" : "unavailable");
    __trap();
  }
  if (gin_emulated(ctx)) {
    if (is_release(order)) __threadfence_system();
    gin_emu_post(ctx, peer, nullptr, nullptr, 0, index, value);
    return;
  }
  ncclGin gin(ctx.comm, 0);
  if (is_release(order)) __threadfence_system();
  gin.signal(ncclTeamWorld(ctx.comm), peer, ncclGin_SignalAdd{(ncclGinSignal_t)index, value});
}

__device__ __forceinline__ uint64_t read_signal(const DevCtx& ctx, int index, cuda::memory_order order) {
  const uint64_t* p = signal_ptr(ctx, index, ctx.lsa_rank);
  uint64_t v = is_acquire(order) ? ptx::ld_acquire_sys(p) : ptx::ld_relaxed_sys(p);
  if (ctx.gin_contexts > 0 && gin_emulated(ctx)) {
    v += gin_emu_signal(ctx, index, is_acquire(order));
  } else if (ctx.gin_contexts > 0) {
    ncclGin gin(ctx.comm, 0);
    v += gin.readSignal((ncclGinSignal_t)index, 64,
                        is_acquire(order) ? cuda::memory_order_acquire : cuda::memory_order_relaxed);
  }
  return v;
}

template <class Coop>
__device__ uint64_t wait_signal(Coop coop, const DevCtx& ctx, int index, uint64_t expected,
                                cuda::memory_order order, const char* what) {
  uint64_t seen = 0;
  if (coop.thread_rank() == 0) {
    seen = bounded_spin(ctx, what, expected, [&] { return read_signal(ctx, index, order); },
                        [&](uint64_t v) { return rolling_ge(v, expected); });
  }
  if constexpr (std::is_same_v<Coop, ncclCoopThread>) {
    return seen;  // a lone thread: no broadcast (a full-warp shuffle would need the other lanes)
  } else {
    coop.sync();  // orders the group after the waiter's acquire
    return ncclCoopBcast(coop, seen, 0, /*entrySync=*/false);
  }
}

template <class Coop>
__device__ uint64_t wait_flag(Coop coop, const DevCtx& ctx, const uint64_t* flag, uint64_t expected,
                              cuda::memory_order order, const char* what) {
  uint64_t seen = 0;
  if (coop.thread_rank() == 0) {
    seen = bounded_spin(
        ctx, what, expected,
        [&] { return is_acquire(order) ? ptx::ld_acquire_sys(flag) : ptx::ld_relaxed_sys(flag); },
        [&](uint64_t v) { return rolling_ge(v, expected); });
  }
  if constexpr (std::is_same_v<Coop, ncclCoopThread>) {
    return seen;  // a lone thread: no broadcast (a full-warp shuffle would need the other lanes)
  } else {
    coop.sync();  // orders the group after the waiter's acquire
    return ncclCoopBcast(coop, seen, 0, /*entrySync=*/false);
  }
}

}  // namespace tw::dev
