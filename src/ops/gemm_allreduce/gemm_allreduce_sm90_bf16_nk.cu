// The one instantiation of the fused GEMM + all-reduce: bf16 A [M, K_local], B as [N, K_local]
// (kNK), bf16 C, epilogue hook AllReduceHook: the owner algorithm (both partial precisions,
// chosen at run time).
#include "../gemm/gemm_sm90.cuh"
#include "hook.cuh"
#include "launch.hpp"
#include "occupancy.cuh"

namespace tw::gemm_allreduce_impl {

using Gemm = gemm_impl::Sm90Gemm<__nv_bfloat16, BLayout::kNK, AllReduceHook>;

int max_active_clusters_bf16_nk() { return max_active_clusters<Gemm::Kernel>(); }

void launch_bf16_nk(const LaunchParams& p, cudaStream_t stream) {
  AllReduceHook hook{};
  hook.ctx = p.ctx;
  hook.lay = p.lay;
  hook.sched = p.sched;
  hook.me = p.ctx.lsa_rank;
  hook.final_ctas = p.final_ctas;
  hook.ws_win = p.ws_win;
  hook.ws_off = p.ws_off;
  hook.ws = static_cast<char*>(p.ws);
  hook.c_win = p.c_win;
  hook.c_off = p.c_off;
  hook.C = static_cast<AllReduceHook::E*>(p.gemm.C);
  hook.ldc = p.gemm.N;
  gemm_impl::run_sm90<__nv_bfloat16, BLayout::kNK>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster,
                                                    /*workspace=*/nullptr, stream);
}

}  // namespace tw::gemm_allreduce_impl
