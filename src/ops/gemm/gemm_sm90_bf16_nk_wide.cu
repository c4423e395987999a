// The plain GEMM's 256-row cooperative tiles for bf16 A, B [N, K] and C (streamk.cuh launch_wide):
// (256, 160, 64) in 1x1 and 2x1 clusters and (256, 112, 64), stream-K scheduler.
// Their wgmma atoms, 64x160x16 and 64x112x16, are CuTe's "extended" shapes (N in steps of 8), off
// unless this is defined; without it the atom selector falls back to an N that divides the tile
// (64x32x16 for 160: five times the instructions, each re-reading A from shared memory).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_bf16_nk_wide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                         cudaStream_t stream) {
  streamk::launch_wide<cutlass::bfloat16_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
