// The grouped GEMM with the SwiGLU epilogue (GroupedEpilogue::kSwiGlu), bf16, B [L, N, K], on the 64 x 256 ping-pong tile.
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_nk_pp256_swiglu(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kNK, 64, 256, 1, true, GroupedEpilogue::kSwiGlu>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
