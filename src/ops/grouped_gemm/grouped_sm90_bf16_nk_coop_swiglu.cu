// The grouped GEMM with the SwiGLU epilogue (GroupedEpilogue::kSwiGlu), bf16, B [L, N, K], on the 128 x 256 cooperative tile in 1 x 2 clusters.
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_nk_coop_swiglu(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kNK, 128, 256, 2, false, GroupedEpilogue::kSwiGlu>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
