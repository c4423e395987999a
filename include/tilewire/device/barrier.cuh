// tilewire/device/barrier.cuh — barrier across the LSA team.
//
// tilewire's own barrier on its control window (no NCCL barrier state), the same on an NCCL
// communicator and on a virtual team: barrier `index` has one uint32 inbox slot per LSA rank on
// every rank; arriving stores the group's next epoch into slot [index][me] of every peer's
// copy, waiting spins (bounded) until this rank's slots [index][q] reach that epoch for every
// peer q. Barriers 0 .. ctx.max_blocks-1 exist.
//
// Barrier `index` (usually blockIdx.x) pairs the groups of the same index on every LSA peer;
// concurrent groups must use distinct indices, and every rank must make the same sequence of
// calls on an index. All threads of `coop` call it.
#pragma once
#include <cuda/atomic>

#include "tilewire/device/coop.cuh"
#include "tilewire/device/peer.cuh"
#include "tilewire/device/wait.cuh"

namespace tw::dev {

// arrive (release: the group's earlier writes become visible to peers that complete the wait)
// + bounded wait (acquire: the group then sees what peers wrote before arriving).
// memory_order_release: release arrive, relaxed wait; memory_order_acquire: relaxed arrive,
// acquire wait; memory_order_relaxed: synchronizes execution only; acq_rel (default): both.
template <class Coop>
__device__ void lsa_barrier(Coop coop, const DevCtx& ctx, uint32_t index,
                            cuda::memory_order order = cuda::memory_order_acq_rel,
                            const char* what = "lsa_barrier");

}  // namespace tw::dev

#include "tilewire/device/impl/barrier__funcs.cuh"
