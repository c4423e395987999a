// tilewire/device/wait.cuh — bounded spinning, the one way tilewire waits on device.
//
// A wait that can outlive its peer ends after ctx.timeout_ns (TILEWIRE_TIMEOUT_MS): it prints
// rank, block, thread, what it waited for, the value expected and the value seen, records the
// same in ctx.fault (host-mapped, read by tw::Comm::check_fault) and traps. A wait whose
// communicator the host aborted (ctx.fault->abort) traps within about a millisecond. No hangs.
#pragma once
#include <cstdint>

#include "tilewire/device/context.hpp"
#include "tilewire/device/ptx.cuh"

namespace tw::dev {

// a >= b on a rolling 64-bit counter (wrap-safe while |a - b| < 2^63).
__device__ __forceinline__ bool rolling_ge(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }

// Print the diagnostic, record it in ctx.fault, trap. Never returns.
[[noreturn]] __device__ void wait_timed_out(const DevCtx& ctx, const char* what, uint64_t expected,
                                            uint64_t seen, uint64_t waited_ns);

// Spin on `load()` until `done(value)`; bounded by ctx.timeout_ns. Returns the value that
// satisfied `done`. Called by the thread(s) that wait; the caller orders the rest of its group.
template <class Load, class Done>
__device__ uint64_t bounded_spin(const DevCtx& ctx, const char* what, uint64_t expected, Load load, Done done);

// Same bound, but on timeout it only records ctx.fault and traps (no printf: the host reports the
// record through Comm::check_fault). For kernels with wgmma (the GEMM hooks): any function call
// there, printf included, makes ptxas serialize the wgmma pipeline of the whole kernel.
template <class Load, class Done>
__device__ uint64_t bounded_spin_silent(const DevCtx& ctx, const char* what, uint64_t expected, Load load, Done done);

}  // namespace tw::dev

#include "tilewire/device/impl/wait__funcs.cuh"
