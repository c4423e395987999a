// The fused GEMM + all-reduce, exchange algorithm: bf16 A [M, K_local], B as [N, K_local] (kNK),
// bf16 C, epilogue hook ExchangeHook (exchange_hook.cuh).
#include "../gemm/gemm_sm90.cuh"
#include "exchange_hook.cuh"
#include "launch.hpp"
#include "occupancy.cuh"

namespace tw::gemm_allreduce_impl {

using GemmX = gemm_impl::Sm90Gemm<__nv_bfloat16, BLayout::kNK, ExchangeHook>;

int max_active_clusters_bf16_nk_exchange() { return max_active_clusters<GemmX::Kernel>(); }

void launch_bf16_nk_exchange(const LaunchParams& p, cudaStream_t stream) {
  ExchangeHook hook{};
  hook.ctx = p.ctx;
  hook.lay = p.lay;
  hook.sched = p.sched;
  hook.me = p.ctx.lsa_rank;
  hook.grid_ctas = p.sched.ctas * p.sched.cluster_m;
  hook.ws_win = p.ws_win;
  hook.ws_off = p.ws_off;
  hook.ws = static_cast<char*>(p.ws);
  hook.C = static_cast<ExchangeHook::E*>(p.gemm.C);
  hook.ldc = p.gemm.N;
  hook.M = p.gemm.M;
  hook.N = p.gemm.N;
  hook.ring = p.ring;
  gemm_impl::run_sm90<__nv_bfloat16, BLayout::kNK>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster,
                                                    /*workspace=*/nullptr, stream);
}

}  // namespace tw::gemm_allreduce_impl
