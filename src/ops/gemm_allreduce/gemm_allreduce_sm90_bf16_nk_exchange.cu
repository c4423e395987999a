// The fused GEMM + all-reduce, exchange algorithm: bf16 A [M, K_local], B as [N, K_local] (kNK),
// bf16 C, epilogue hook ExchangeHook (exchange_hook.cuh).
#include "../gemm/gemm_sm90.cuh"
#include "exchange_hook.cuh"
#include "launch.hpp"
#include "occupancy.cuh"

namespace tw::gemm_allreduce_impl {

template <bool kTraced>
using GemmX = gemm_impl::Sm90Gemm<__nv_bfloat16, BLayout::kNK, ExchangeHookT<kTraced>>;

int max_active_clusters_bf16_nk_exchange() { return max_active_clusters<GemmX<true>::Kernel>(); }

template <bool kTraced>
static void launch(const LaunchParams& p, cudaStream_t stream) {
  ExchangeHookT<kTraced> hook{};
  static_cast<HookParams&>(hook) = hook_params(p);
  gemm_impl::run_sm90<__nv_bfloat16, BLayout::kNK>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster,
                                                    /*workspace=*/nullptr, stream);
}

// The traced kernel; with TILEWIRE_BENCH_KERNELS (a measurement build) also the one without
// trace code, when asked (to measure tracing off). The launcher refuses p.untraced otherwise.
void launch_bf16_nk_exchange(const LaunchParams& p, cudaStream_t stream) {
#ifdef TILEWIRE_BENCH_KERNELS
  static_assert(sizeof(typename GemmX<true>::Kernel::SharedStorage) == sizeof(typename GemmX<false>::Kernel::SharedStorage),
                "both kernels have the residency the launcher checked");
  if (p.untraced) {
    launch<false>(p, stream);
    return;
  }
#endif
  launch<true>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl
