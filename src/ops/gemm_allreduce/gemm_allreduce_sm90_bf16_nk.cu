// The fused GEMM + all-reduce, owner algorithm: bf16 A [M, K_local], B as [N, K_local] (kNK),
// bf16 C (owner_launch.cuh, hook.cuh).
#include "owner_launch.cuh"

namespace tw::gemm_allreduce_impl {

int max_active_clusters_bf16_nk() { return owner::max_active_clusters<__nv_bfloat16, BLayout::kNK>(); }
void launch_bf16_nk(const LaunchParams& p, cudaStream_t stream) { owner::launch<__nv_bfloat16, BLayout::kNK>(p, stream); }

}  // namespace tw::gemm_allreduce_impl
