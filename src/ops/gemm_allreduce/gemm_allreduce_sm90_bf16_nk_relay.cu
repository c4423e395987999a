// The fused GEMM + all-reduce, relay algorithm (2 ranks): bf16 A [M, K_local], B as [N, K_local]
// (kNK), bf16 C (relay_launch.cuh, relay_hook.cuh).
#include "relay_launch.cuh"

namespace tw::gemm_allreduce_impl {

int max_active_clusters_bf16_nk_relay() { return relay::max_active_clusters<BLayout::kNK>(); }
void launch_bf16_nk_relay(const LaunchParams& p, cudaStream_t stream) { relay::launch<BLayout::kNK>(p, stream); }

}  // namespace tw::gemm_allreduce_impl
