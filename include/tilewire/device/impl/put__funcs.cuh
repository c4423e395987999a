#pragma once

namespace tw::dev {

template <class Coop>
__device__ __forceinline__ void lsa_copy(Coop coop, char* dst, const char* src, size_t bytes) {
  const int t = coop.thread_rank(), n = coop.size();
  if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 15) == 0) {
    const size_t nv = bytes / 16;
    size_t i = t;
    // Four vectors in flight per thread before the first store.
    for (; i + 3 * (size_t)n < nv; i += 4 * (size_t)n) {
      uint4 v0 = ptx::ld_cg_v4(src + 16 * i);
      uint4 v1 = ptx::ld_cg_v4(src + 16 * (i + n));
      uint4 v2 = ptx::ld_cg_v4(src + 16 * (i + 2 * n));
      uint4 v3 = ptx::ld_cg_v4(src + 16 * (i + 3 * n));
      ptx::st_v4(dst + 16 * i, v0);
      ptx::st_v4(dst + 16 * (i + n), v1);
      ptx::st_v4(dst + 16 * (i + 2 * n), v2);
      ptx::st_v4(dst + 16 * (i + 3 * n), v3);
    }
    for (; i < nv; i += n) ptx::st_v4(dst + 16 * i, ptx::ld_cg_v4(src + 16 * i));
  } else {
    for (size_t i = t; i < bytes; i += n) dst[i] = src[i];
  }
}

template <class Coop>
__device__ void put(Coop coop, const DevCtx& ctx, int peer, const DevWindow& dst, size_t dst_off, const DevWindow& src,
                    size_t src_off, size_t bytes) {
  if (is_lsa_peer(ctx, peer)) {
    char* d = lsa_ptr<char>(ctx, dst, dst_off, lsa_of_world(ctx, peer));
    const char* s = lsa_ptr<const char>(ctx, src, src_off, ctx.lsa_rank);
    coop.sync();  // the group's writes to src before the call are part of the put
    lsa_copy(coop, d, s, bytes);
    return;
  }
  if (ctx.gin_contexts == 0) {
    if (coop.thread_rank() == 0)
      printf("tilewire: rank %d: put to rank %d needs GIN (peer outside the LSA team); unavailable\n", ctx.rank, peer);
    __trap();
  }
  coop.sync();
  if (coop.thread_rank() == 0) {
    if (gin_emulated(ctx)) {
      gin_emu_post(ctx, peer, local_ptr<const char>(ctx, src, src_off), gin_emu_peer_ptr(ctx, dst, dst_off, peer), bytes,
                   -1, 0);
    } else {
      ncclGin gin(ctx.comm, 0);
      gin.put(ncclTeamWorld(ctx.comm), peer, dst.nccl, dst_off, src.nccl, src_off, bytes, ncclGin_None{},
              ncclGin_None{}, ncclCoopThread{});
    }
  }
  coop.sync();
}

template <class Coop>
__device__ void put_signal(Coop coop, const DevCtx& ctx, int peer, const DevWindow& dst, size_t dst_off,
                           const DevWindow& src, size_t src_off, size_t bytes, int index, uint64_t add) {
  if (is_lsa_peer(ctx, peer)) {
    put(coop, ctx, peer, dst, dst_off, src, src_off, bytes);
    signal(coop, ctx, peer, index, add, SignalOp::kAdd, cuda::memory_order_release);
    return;
  }
  if (ctx.gin_contexts == 0) {
    if (coop.thread_rank() == 0)
      printf("tilewire: rank %d: put_signal to rank %d needs GIN; unavailable\n", ctx.rank, peer);
    __trap();
  }
  coop.sync();
  if (coop.thread_rank() == 0) {
    if (gin_emulated(ctx)) {
      gin_emu_post(ctx, peer, local_ptr<const char>(ctx, src, src_off), gin_emu_peer_ptr(ctx, dst, dst_off, peer), bytes,
                   index, add);
    } else {
      ncclGin gin(ctx.comm, 0);
      gin.put(ncclTeamWorld(ctx.comm), peer, dst.nccl, dst_off, src.nccl, src_off, bytes,
              ncclGin_SignalAdd{(ncclGinSignal_t)index, add}, ncclGin_None{}, ncclCoopThread{});
    }
  }
  coop.sync();
}

// NCCL's flush(coop) covers the puts of any thread of `coop`: a kernel whose warps each put (the
// EP kernels: lane 0 of each warp issues its group's puts) flushes them all with its CTA. The
// emulated flush covers every op of the rank.
template <class Coop>
__device__ void gin_flush(Coop coop, const DevCtx& ctx) {
  coop.sync();
  if (ctx.gin_contexts > 0) {
    if (!gin_emulated(ctx)) ncclGin(ctx.comm, 0).flush(coop);
    else if (coop.thread_rank() == 0) gin_emu_flush(ctx);
  }
  coop.sync();
}

}  // namespace tw::dev
