#pragma once
#include <cstdio>

namespace tw::dev {

// Inbox slot [index][src] of LSA rank `owner`'s copy of the control window.
__device__ __forceinline__ uint32_t* barrier_slot(const DevCtx& ctx, uint32_t index, int src, int owner) {
  return lsa_ptr<uint32_t>(ctx, ctx.control,
                           ctx.barrier_offset + sizeof(uint32_t) * ((size_t)index * ctx.lsa_size + src), owner);
}

template <class Coop>
__device__ void lsa_barrier(Coop coop, const DevCtx& ctx, uint32_t index, cuda::memory_order order,
                            const char* what) {
  if (ctx.lsa_size <= 1) {
    coop.sync();
    return;
  }
#ifdef TILEWIRE_DEVICE_DEBUG
  if (index >= (uint32_t)ctx.max_blocks) {
    printf("tilewire: rank %d block %d: lsa_barrier index %u >= max_blocks %d\n", ctx.rank, (int)blockIdx.x, index,
           ctx.max_blocks);
    __trap();
  }
#endif
  const bool rel = order == cuda::memory_order_release || order == cuda::memory_order_acq_rel ||
                   order == cuda::memory_order_seq_cst;
  const bool acq = order == cuda::memory_order_acquire || order == cuda::memory_order_acq_rel ||
                   order == cuda::memory_order_seq_cst;
  const int me = ctx.lsa_rank, P = ctx.lsa_size;
  const uint32_t epoch = ctx.barrier_epochs[index] + 1;  // every thread reads it before the sync below
  coop.sync();  // the whole group's earlier writes precede the arrive (cumulativity of the release)
#pragma unroll 1
  for (int i = coop.thread_rank(); i < P - 1; i += coop.size()) {
    const int q = i < me ? i : i + 1;
    uint32_t* slot = barrier_slot(ctx, index, me, q);
    if (rel) ptx::st_release_sys_u32(slot, epoch);
    else ptx::st_relaxed_sys_u32(slot, epoch);
  }
#pragma unroll 1
  for (int i = coop.thread_rank(); i < P - 1; i += coop.size()) {
    const int q = i < me ? i : i + 1;
    const uint32_t* slot = barrier_slot(ctx, index, q, me);
    bounded_spin(
        ctx, what, epoch,
        [&] { return (uint64_t)(acq ? ptx::ld_acquire_sys_u32(slot) : ptx::ld_relaxed_sys_u32(slot)); },
        [&](uint64_t got) { return (int32_t)((uint32_t)got - epoch) >= 0; });
  }
  if (coop.thread_rank() == 0) ctx.barrier_epochs[index] = epoch;
  coop.sync();  // the waiters' acquires order the whole group; the epoch store precedes the next call's reads
}

}  // namespace tw::dev
