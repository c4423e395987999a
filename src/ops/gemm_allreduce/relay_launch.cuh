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
  fill_common_hook_fields(hook, p);
  hook.c_win = p.c_win;
  hook.c_off = p.c_off;
  hook.consumer_rows = p.relay_consumer_rows;
  hook.poll_ns = p.relay_poll_ns;
  hook.comm_inflight = p.relay_comm_inflight;
  hook.pace_pct = p.relay_pace_pct;
  hook.no_push = p.relay_no_push;
  hook.pull = p.relay_pull;
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
