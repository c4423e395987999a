// The grouped GEMM with the row-targets epilogue (GroupedEpilogue::kRowTargets), bf16, B [L, N, K], on the 64 x 128 ping-pong tile.
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_nk_pp_row_targets(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kNK, 64, 128, 1, true, GroupedEpilogue::kRowTargets>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
