#pragma once
#include <cstdio>

namespace tw::dev {

__device__ __forceinline__ bool is_lsa_peer(const DevCtx& ctx, int peer) {
  int lsa0 = ctx.rank - ctx.lsa_rank;
  return peer >= lsa0 && peer < lsa0 + ctx.lsa_size;
}

__device__ __forceinline__ int lsa_of_world(const DevCtx& ctx, int peer) {
  return peer - (ctx.rank - ctx.lsa_rank);
}

template <class T>
__device__ __forceinline__ T* lsa_ptr(const DevCtx& ctx, const DevWindow& w, size_t offset, int lsa_peer) {
#ifdef TILEWIRE_DEVICE_DEBUG
  if (lsa_peer < 0 || lsa_peer >= ctx.lsa_size) {
    printf("tilewire: rank %d block %d: lsa_ptr peer %d is not in the LSA team (size %d)\n",
           ctx.rank, (int)blockIdx.x, lsa_peer, ctx.lsa_size);
    __trap();
  }
#endif
  return reinterpret_cast<T*>(w.lsa_base + (uint64_t)lsa_peer * w.lsa_stride + offset);
}

template <class T>
__device__ __forceinline__ T* local_ptr(const DevCtx& ctx, const DevWindow& w, size_t offset) {
  return lsa_ptr<T>(ctx, w, offset, ctx.lsa_rank);
}

__device__ __forceinline__ uint64_t* signal_ptr(const DevCtx& ctx, int index, int lsa_peer) {
#ifdef TILEWIRE_DEVICE_DEBUG
  if (index < 0 || index >= ctx.signal_count) {
    printf("tilewire: rank %d block %d: signal index %d is outside [0, %d) (CommConfig::signal_count)\n", ctx.rank,
           (int)blockIdx.x, index, ctx.signal_count);
    __trap();
  }
#endif
  return lsa_ptr<uint64_t>(ctx, ctx.control, ctx.signal_offset + sizeof(uint64_t) * (size_t)index, lsa_peer);
}

}  // namespace tw::dev
