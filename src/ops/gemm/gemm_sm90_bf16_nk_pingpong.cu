// The plain GEMM's ping-pong tiles for bf16 A, B [N, K] and C (streamk.cuh CutlassGemm, kPingpong): the
// swapped (64, 16 | 32 | 64, 64) tiles, data-parallel.
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_bf16_nk_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                             cudaStream_t stream) {
  streamk::launch_pingpong<cutlass::bfloat16_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
