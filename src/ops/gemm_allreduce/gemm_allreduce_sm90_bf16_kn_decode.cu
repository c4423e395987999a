// The fused GEMM + all-reduce / reduce-scatter, owner algorithm on the decode tile (128 x 64, no
// cluster; plan.hpp kDecodeBlkN): bf16 A [M, K_local], B as [K_local, N] (kKN), bf16 C,
// M <= kDecodeMaxM (owner_launch.cuh, hook.cuh).
#include "owner_launch.cuh"

namespace tw::gemm_allreduce_impl {

int max_active_clusters_bf16_kn_decode() { return owner::max_active_clusters<__nv_bfloat16, BLayout::kKN, owner::DecodeTile>(); }
void launch_bf16_kn_decode(const LaunchParams& p, cudaStream_t stream) {
  owner::launch<__nv_bfloat16, BLayout::kKN, owner::DecodeTile>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl
