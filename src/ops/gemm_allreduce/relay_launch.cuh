// src/ops/gemm_allreduce/relay_launch.cuh — the relay algorithm's kernel launch (2 ranks; hook:
// relay_hook.cuh) for one B layout. Each layout is instantiated in its own translation unit
// (gemm_allreduce_sm90_bf16_{nk,kn}_relay.cu), so the two compile in parallel.
#pragma once
#include "../gemm/gemm_sm90.cuh"
#include "launch.hpp"
#include "occupancy.cuh"
#include "relay_hook.cuh"

namespace tw::gemm_allreduce_impl::relay {

template <BLayout kLayout, bool kTraced>
using Gemm = gemm_impl::Sm90Gemm<__nv_bfloat16, kLayout, RelayHookT<kTraced>>;

template <BLayout kLayout>
int max_active_clusters() {
  return gemm_allreduce_impl::max_active_clusters<typename Gemm<kLayout, true>::Kernel>();
}

template <BLayout kLayout, bool kTraced>
void launch_kernel(const LaunchParams& p, cudaStream_t stream) {
  RelayHookT<kTraced> hook{};
  static_cast<HookParams&>(hook) = hook_params(p);
  static_cast<RelayKnobs&>(hook) = p.relay;
  gemm_impl::run_sm90<__nv_bfloat16, kLayout>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster, /*workspace=*/nullptr,
                                               stream);
}

// The traced kernel; with TILEWIRE_BENCH_KERNELS (a measurement build) also the one without
// trace code, when asked (to measure tracing off). The launcher refuses p.untraced otherwise.
template <BLayout kLayout>
void launch(const LaunchParams& p, cudaStream_t stream) {
#ifdef TILEWIRE_BENCH_KERNELS
  static_assert(sizeof(typename Gemm<kLayout, true>::Kernel::SharedStorage) ==
                    sizeof(typename Gemm<kLayout, false>::Kernel::SharedStorage),
                "both kernels have the residency the launcher checked");
  if (p.untraced) {
    launch_kernel<kLayout, false>(p, stream);
    return;
  }
#endif
  launch_kernel<kLayout, true>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl::relay
