// tilewire/device/barrier.cuh — barrier across the LSA team.
//
// Built on NCCL's LSA barrier resources (ncclDevComm.lsaBarrier, sized at communicator creation
// to ctx.max_blocks barriers) with NCCL's arrive, and a bounded wait in place of NCCL's
// unbounded one: a peer that never arrives ends in the timeout diagnostic, not a hang.
//
// Barrier `index` (usually blockIdx.x) pairs the groups of the same index on every LSA peer;
// concurrent groups must use distinct indices. All threads of `coop` call it.
#pragma once
#include <cuda/atomic>

#include "tilewire/device/coop.cuh"
#include "tilewire/device/wait.cuh"

namespace tw::dev {

// arrive (release: the group's earlier writes become visible to peers that complete the wait)
// + bounded wait (acquire: the group then sees what peers wrote before arriving).
template <class Coop>
__device__ void lsa_barrier(Coop coop, const DevCtx& ctx, uint32_t index,
                            cuda::memory_order order = cuda::memory_order_acq_rel,
                            const char* what = "lsa_barrier");

}  // namespace tw::dev

#include "tilewire/device/impl/barrier__funcs.cuh"
