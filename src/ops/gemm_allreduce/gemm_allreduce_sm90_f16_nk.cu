// gemm_reducescatter's fused path in fp16, owner algorithm: fp16 A [M, K_local], B as
// [N, K_local] (kNK), fp16 partials and C (owner_launch.cuh, hook.cuh).
#include "owner_launch.cuh"

namespace tw::gemm_allreduce_impl {

int max_active_clusters_f16_nk() { return owner::max_active_clusters<__half, BLayout::kNK>(); }
void launch_f16_nk(const LaunchParams& p, cudaStream_t stream) { owner::launch<__half, BLayout::kNK>(p, stream); }

}  // namespace tw::gemm_allreduce_impl
