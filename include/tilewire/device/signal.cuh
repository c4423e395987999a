// tilewire/device/signal.cuh — one-sided signals and bounded waits on them.
//
// A signal is a 64-bit counter, `ctx.signal_count` of them per rank, indexed 0..count-1.
// LSA peers update a rank's counter with system-scope stores/atomics into its control window;
// GIN peers with ncclGin SignalAdd. wait_signal() waits on the sum of both, so a waiter need not
// know which path its signaller took. Counters compare "rolling" (wrap-safe).
#pragma once
#include <cuda/atomic>

#include "tilewire/device/coop.cuh"
#include "tilewire/device/peer.cuh"
#include "tilewire/device/wait.cuh"

namespace tw::dev {

enum class SignalOp { kSet, kAdd };

// Signal world rank `peer`'s counter `index`: add `value` (any peer) or set it (LSA peers only;
// a set towards a GIN peer traps). All threads of `coop` call it; after coop.sync() one thread
// issues it. memory_order_release (default) makes the group's earlier writes to that peer
// visible before the signal; memory_order_relaxed orders nothing.
template <class Coop>
__device__ void signal(Coop coop, const DevCtx& ctx, int peer, int index, uint64_t value,
                       SignalOp op = SignalOp::kAdd,
                       cuda::memory_order order = cuda::memory_order_release);

// This rank's counter `index` as seen now (LSA part + GIN part). acquire or relaxed.
__device__ uint64_t read_signal(const DevCtx& ctx, int index,
                                cuda::memory_order order = cuda::memory_order_acquire);

// Wait until read_signal(index) >= expected (rolling). Bounded: see wait.cuh. All threads of
// `coop` call it; one waits, then coop.sync(); with memory_order_acquire the whole group sees
// what the signallers released. Returns the value seen.
template <class Coop>
__device__ uint64_t wait_signal(Coop coop, const DevCtx& ctx, int index, uint64_t expected,
                                cuda::memory_order order = cuda::memory_order_acquire,
                                const char* what = "wait_signal");

// Same for any 64-bit flag in device-visible memory (e.g. inside a window).
template <class Coop>
__device__ uint64_t wait_flag(Coop coop, const DevCtx& ctx, const uint64_t* flag, uint64_t expected,
                              cuda::memory_order order = cuda::memory_order_acquire,
                              const char* what = "wait_flag");

}  // namespace tw::dev

#include "tilewire/device/impl/signal__funcs.cuh"
