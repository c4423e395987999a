// tilewire/device/peer.cuh — teams and peer pointers.
//
// The LSA team is the set of ranks whose memory this GPU can load from and store to directly
// (NVLink or PCIe P2P). Peers in it are addressed by their LSA rank; world ranks convert with
// lsa_of_world(). Other peers are reached only through GIN (put.cuh).
#pragma once
#include "tilewire/device/context.hpp"
#include "tilewire/device/coop.cuh"

namespace tw::dev {

// Is world rank `peer` load/store reachable from this rank?
__device__ __forceinline__ bool is_lsa_peer(const DevCtx& ctx, int peer);
// World rank -> LSA rank (only meaningful when is_lsa_peer()).
__device__ __forceinline__ int lsa_of_world(const DevCtx& ctx, int peer);
// Address of byte `offset` of window `w` on LSA peer `lsa_peer` (this rank included): plain
// arithmetic on the handle, no memory access. Debug builds (TILEWIRE_DEVICE_DEBUG) trap when
// lsa_peer is outside the team.
template <class T = void>
__device__ __forceinline__ T* lsa_ptr(const DevCtx& ctx, const DevWindow& w, size_t offset, int lsa_peer);
// This rank's own copy: lsa_ptr(ctx, w, offset, ctx.lsa_rank).
template <class T = void>
__device__ __forceinline__ T* local_ptr(const DevCtx& ctx, const DevWindow& w, size_t offset);
// Address of this rank's signal `index` on LSA peer `lsa_peer`. Debug builds trap when index is
// outside [0, ctx.signal_count).
__device__ __forceinline__ uint64_t* signal_ptr(const DevCtx& ctx, int index, int lsa_peer);

}  // namespace tw::dev

#include "tilewire/device/impl/peer__funcs.cuh"
