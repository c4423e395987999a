// The grouped GEMM, bf16, B [L, N, K], on the 64 x 256 ping-pong tile (one consumer warpgroup per tile, the other's epilogue under its mainloop).
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_nk_pp256(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kNK, 64, 256, 1, true>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
