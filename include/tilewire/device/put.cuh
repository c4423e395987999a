// tilewire/device/put.cuh — one-sided put and put-with-signal.
//
// put() copies bytes from this rank's window into a peer's window. For LSA peers the group
// stores 16-byte vectors through the peer pointer (no NIC, no proxy); for other peers it issues
// a GIN put (GPU-initiated networking): NCCL's ncclGin, which needs a NIC with GIN, or on a
// virtual team in nodes the emulated backend (device/impl/gin_emu__funcs.cuh), which delivers
// with GIN's weakest ordering.
//
// Completion: a put is visible at the peer only after a later signal with release from the same
// group (or put_signal, or a barrier). put_signal() is put + release add on the peer's signal
// `index`: when the peer sees the new value, it sees the data.
#pragma once
#include "tilewire/device/peer.cuh"
#include "tilewire/device/signal.cuh"

namespace tw::dev {

// All threads of `coop` call it. The source is read after a coop.sync(), so whatever the group
// wrote to it before the call is sent (data from other groups must be ordered before the call by
// the caller: a barrier or an acquire). Offsets and bytes should be multiples of 16 for the
// vector path; any other size falls back to a byte loop (LSA). `peer` is a world rank.
template <class Coop>
__device__ void put(Coop coop, const DevCtx& ctx, int peer, const DevWindow& dst, size_t dst_off,
                    const DevWindow& src, size_t src_off, size_t bytes);

template <class Coop>
__device__ void put_signal(Coop coop, const DevCtx& ctx, int peer, const DevWindow& dst, size_t dst_off,
                           const DevWindow& src, size_t src_off, size_t bytes, int index, uint64_t add = 1);

// GIN flush: every put this group issued to peers outside the LSA team has read its source, which
// may be written again. It says nothing of their arrival (a signal does). LSA puts are done when
// put() returns. All threads of `coop` call it; no-op without GIN.
template <class Coop>
__device__ void gin_flush(Coop coop, const DevCtx& ctx);

}  // namespace tw::dev

#include "tilewire/device/impl/put__funcs.cuh"
