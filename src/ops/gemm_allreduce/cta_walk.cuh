// src/ops/gemm_allreduce/cta_walk.cuh — what the fused kernels' epilogue hooks (exchange_hook.cuh,
// relay_hook.cuh) share: a CTA's place in the persistent tile walk, the call tag kept in the
// workspace, and the two bounded waits they use.
#pragma once
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include "../gemm/scheduler.hpp"
#include "plan.hpp"
#include "tilewire/device.cuh"

namespace tw::gemm_allreduce_impl {

// The steps of one CTA of the walk (scheduler.hpp: cluster group `group`, position `x` in its
// cluster). A step's tile is "valid" when it lies inside C: the padding CTA of an odd tiles_m has
// steps without a tile, and the hooks get no call for them. The step and valid-tile index of the
// tile a hook is called for come from the kernel (TileView::step/seq, comm's arguments), which
// counts them: recomputing the index here was O(step) per call and measurable (gemm_sm90.cuh).
struct CtaWalk {
  const gemm_impl::TileSchedule& s;
  int group, x;

  CUTLASS_DEVICE explicit CtaWalk(const gemm_impl::TileSchedule& sched)
      : s(sched), group(int(blockIdx.x) / sched.cluster_m), x(int(blockIdx.x) % sched.cluster_m) {}

  CUTLASS_DEVICE int steps() const { return s.units_of_cta(group); }
  CUTLASS_DEVICE gemm_impl::TileCoord tile_at(int step) const { return s.tile_of_work(s.work_of_cta(group, step), x); }
  CUTLASS_DEVICE bool valid(int step) const { return tile_at(step).m < s.tiles_m; }
  // The latest valid step before `step`, or -1.
  CUTLASS_DEVICE int prev_valid(int step) const {
#pragma unroll 1
    for (int k = step - 1; k >= 0; --k)
      if (valid(k)) return k;
    return -1;
  }
  // The first valid step after `step`, or -1.
  CUTLASS_DEVICE int next_valid(int step) const {
    const int n = steps();
#pragma unroll 1
    for (int k = step + 1; k < n; ++k)
      if (valid(k)) return k;
    return -1;
  }
};

// This call's tag: 1 + the calls completed on this workspace (its header; the last CTA of a call
// advances it).
CUTLASS_DEVICE uint64_t call_tag(const char* ws) {
  return *reinterpret_cast<volatile const uint64_t*>(ws + Layout::kEpochOff) + 1;
}

// Bounded wait (ctx.timeout_ns, then the fault record and a trap) until the u64 flag at p reaches
// `want` (acquire, system scope); sleep_ns > 0 sleeps between polls.
CUTLASS_DEVICE void wait_flag(const DevCtx& ctx, const char* p, uint64_t want, const char* what, int sleep_ns = 0) {
  const uint64_t* f = reinterpret_cast<const uint64_t*>(p);
  dev::bounded_spin_silent(
      ctx, what, want,
      [&] {
        const uint64_t v = ptx::ld_acquire_sys(f);
        if (sleep_ns > 0 && !dev::rolling_ge(v, want)) ptx::nanosleep(uint32_t(sleep_ns));
        return v;
      },
      [&](uint64_t v) { return dev::rolling_ge(v, want); });
}

// Bounded wait for phase `parity` of a shared-memory mbarrier (try_wait suspends in hardware for a
// while; sleep_ns > 0 adds a sleep between polls).
CUTLASS_DEVICE void wait_mbarrier(const DevCtx& ctx, uint64_t* bar, int parity, const char* what, int sleep_ns = 0) {
  dev::bounded_spin_silent(
      ctx, what, 1,
      [&] {
        const bool ok = cutlass::arch::ClusterBarrier::try_wait(bar, (uint32_t)parity);
        if (sleep_ns > 0 && !ok) ptx::nanosleep(uint32_t(sleep_ns));
        return (uint64_t)ok;
      },
      [](uint64_t v) { return v != 0; });
}

}  // namespace tw::gemm_allreduce_impl
