// The grouped GEMM, bf16, B [L, K, N], on the 128 x 256 cooperative tile in 1 x 2 clusters (A multicast to both CTAs).
#include "grouped_sm90.cuh"

namespace tw::grouped_impl {

void launch_bf16_kn_coop(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  run<GroupedGemm<BLayout::kKN, 128, 256, 2, false>>(a, gate, sm_count, stream);
}

}  // namespace tw::grouped_impl
