// The plain GEMM's stream-K kernel for bf16 A, B [N, K] and C (streamk.cuh): its four tiles.
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_bf16_nk_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream) {
  streamk::launch<cutlass::bfloat16_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
