// The plain GEMM's swapped ping-pong tile whose narrow side covers M = 65..128 in one tile, for
// bf16 A, B [N, K] and C (streamk.cuh CutlassGemm, kPingpong; plan.hpp swapwide_pingpong): the
// swapped (128, 128, 64) tile, data-parallel. A translation unit apart
// from gemm_sm90_bf16_nk_pingpong.cu so the two compile side by side. Programmatic dependent launch
// as there (StreamKPlan::pdl): the define comes before any CUTLASS header.
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_bf16_nk_swapwide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                             cudaStream_t stream) {
  streamk::launch_pingpong_swapwide<cutlass::bfloat16_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
