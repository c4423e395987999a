// The grouped GEMM, bf16, B [L, K, N], on the 64 x 256 ping-pong tile (one consumer warpgroup per tile, the other's epilogue under its mainloop).
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_kn_pp256(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kKN, 64, 256, 1, true>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
