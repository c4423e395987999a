// The fused GEMM + all-reduce / reduce-scatter, owner algorithm on the decode tile (128 x 64, no
// cluster; plan.hpp kDecodeBlkN): fp16 A [M, K_local], B as [K_local, N] (kKN), fp16 C,
// M <= kDecodeMaxM (owner_launch.cuh, hook.cuh).
#include "owner_launch.cuh"

namespace tw::gemm_allreduce_impl {

int max_active_clusters_f16_kn_decode() { return owner::max_active_clusters<__half, BLayout::kKN, owner::DecodeTile>(); }
void launch_f16_kn_decode(const LaunchParams& p, cudaStream_t stream) {
  owner::launch<__half, BLayout::kKN, owner::DecodeTile>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl
