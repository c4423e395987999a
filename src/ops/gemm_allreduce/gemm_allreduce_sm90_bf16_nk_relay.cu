// The fused GEMM + all-reduce, relay algorithm (2 ranks): bf16 A [M, K_local], B as [N, K_local]
// (kNK), bf16 C, epilogue hook RelayHook (relay_hook.cuh).
#include "../gemm/gemm_sm90.cuh"
#include "launch.hpp"
#include "occupancy.cuh"
#include "relay_hook.cuh"

namespace tw::gemm_allreduce_impl {

template <bool kTraced>
using GemmR = gemm_impl::Sm90Gemm<__nv_bfloat16, BLayout::kNK, RelayHookT<kTraced>>;

int max_active_clusters_bf16_nk_relay() { return max_active_clusters<GemmR<true>::Kernel>(); }

template <bool kTraced>
static void launch(const LaunchParams& p, cudaStream_t stream) {
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
  gemm_impl::run_sm90<__nv_bfloat16, BLayout::kNK>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster,
                                                    /*workspace=*/nullptr, stream);
}

// The traced kernel normally; the one without trace code when asked (to measure tracing off).
void launch_bf16_nk_relay(const LaunchParams& p, cudaStream_t stream) {
  static_assert(sizeof(typename GemmR<true>::Kernel::SharedStorage) == sizeof(typename GemmR<false>::Kernel::SharedStorage),
                "both kernels have the residency the launcher checked");
  if (p.untraced) launch<false>(p, stream);
  else launch<true>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl
