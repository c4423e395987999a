// The one instantiation of the fused GEMM + all-reduce: bf16 A [M, K_local], B as [N, K_local]
// (kNK), bf16 C, epilogue hook AllReduceHook (both partial precisions, chosen at run time).
// Compiled, not yet run on a GPU.
#include <cutlass/device_kernel.h>

#include "../gemm/gemm_sm90.cuh"
#include "hook.cuh"
#include "launch.hpp"

namespace tw::gemm_allreduce_impl {

using Gemm = gemm_impl::Sm90Gemm<__nv_bfloat16, BLayout::kNK, AllReduceHook>;

int max_active_clusters_bf16_nk() {
  using K = Gemm::Kernel;
  auto* fn = cutlass::device_kernel<K>;
  const int smem = static_cast<int>(K::SharedStorageSize);
  TW_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t lc{};
  lc.gridDim = dim3(gemm_impl::kClusterM, 1, 1);
  lc.blockDim = dim3(K::MaxThreadsPerBlock, 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(smem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = gemm_impl::kClusterM;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  int clusters = 0;
  TW_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, fn, &lc));
  return clusters;
}

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
