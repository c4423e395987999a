#pragma once
#include <cstdio>

namespace tw::dev {

// First timed-out waiter writes the record (host-mapped) that Comm::check_fault reports.
__device__ __forceinline__ void record_fault(const DevCtx& ctx, const char* what, uint64_t expected, uint64_t seen,
                                             uint64_t waited_ns) {
  if (ctx.fault != nullptr && atomicCAS(&ctx.fault->flag, 0u, 2u) == 0u) {
    DeviceFault* f = ctx.fault;
    f->rank = ctx.rank;
    f->block = (int)blockIdx.x;
    f->thread = (int)threadIdx.x;
    f->expected = expected;
    f->seen = seen;
    f->waited_ns = waited_ns;
    int i = 0;
    for (; what[i] != 0 && i < (int)sizeof(f->what) - 1; ++i) f->what[i] = what[i];
    f->what[i] = 0;
    __threadfence_system();
    atomicExch(&f->flag, 1u);  // published: the record is complete
    __threadfence_system();
  }
}

// Defined inline (not out-of-line) so header-only users need no device linking.
[[noreturn]] __device__ __noinline__ inline void wait_timed_out(const DevCtx& ctx, const char* what,
                                                                uint64_t expected, uint64_t seen,
                                                                uint64_t waited_ns) {
  printf("tilewire: TIMEOUT rank %d block %d thread %d: '%s' waited %llu ms for >= %llu, saw %llu "
         "(a peer never arrived: mismatched calls across ranks, a dead peer, or too short "
         "TILEWIRE_TIMEOUT_MS)\n",
         ctx.rank, (int)blockIdx.x, (int)threadIdx.x, what, (unsigned long long)(waited_ns / 1000000),
         (unsigned long long)expected, (unsigned long long)seen);
  record_fault(ctx, what, expected, seen, waited_ns);
  __trap();
  __builtin_unreachable();
}

// The host aborted the communicator (Comm::abort, e.g. another rank of run_local failed): the
// wait will never complete, so end it now rather than after the timeout. Checked at the timeout
// check's cadence (every 1024 polls): one read of host-mapped memory per ~millisecond of waiting.
__device__ __forceinline__ bool comm_aborted(const DevCtx& ctx) {
  return ctx.fault != nullptr && *static_cast<volatile const uint32_t*>(&ctx.fault->abort) != 0u;
}

// The one spin loop. kPrint = false keeps printf out of the kernel (a printf call site in a
// wgmma kernel makes ptxas serialize wgmma, C7510); the record in ctx.fault is written either way.
template <bool kPrint, class Load, class Done>
__device__ __forceinline__ uint64_t bounded_spin_impl(const DevCtx& ctx, const char* what, uint64_t expected,
                                                      Load load, Done done) {
  uint64_t v = load();
  if (done(v)) return v;
  const uint64_t t0 = ptx::globaltimer();
  uint32_t iter = 0;
#pragma unroll 1
  while (true) {
    v = load();
    if (done(v)) return v;
    if ((++iter & 1023u) == 0) {
      if (comm_aborted(ctx)) __trap();  // Comm::check_fault reports it (kState)
      const uint64_t waited = ptx::globaltimer() - t0;
      if (waited > ctx.timeout_ns) {
        if constexpr (kPrint) {
          wait_timed_out(ctx, what, expected, v, waited);
        } else {
          record_fault(ctx, what, expected, v, waited);
          __trap();
        }
      }
    }
  }
}

template <class Load, class Done>
__device__ __forceinline__ uint64_t bounded_spin(const DevCtx& ctx, const char* what, uint64_t expected,
                                                 Load load, Done done) {
  return bounded_spin_impl<true>(ctx, what, expected, load, done);
}

template <class Load, class Done>
__device__ __forceinline__ uint64_t bounded_spin_silent(const DevCtx& ctx, const char* what, uint64_t expected,
                                                        Load load, Done done) {
  return bounded_spin_impl<false>(ctx, what, expected, load, done);
}

}  // namespace tw::dev
