// The plain GEMM's ping-pong tiles for fp16 A, B [N, K] and C (streamk.cuh CutlassGemm, kPingpong): the
// swapped (64, 16 | 32 | 64, 64) tiles, data-parallel.
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_f16_nk_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream) {
  streamk::launch_pingpong<cutlass::half_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
