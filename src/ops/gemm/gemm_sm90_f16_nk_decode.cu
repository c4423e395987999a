// The sm90 hook kernel on its decode tile (128 x 64, no cluster; plan.hpp kDecodeBlkN) with StoreC:
// fp16 A [M, K], B as [N, K] (BLayout::kNK), fp16 C. allgather_gemm's gated GEMM at
// M <= kHookDecodeMaxM (gemm_gated).
#include "gemm_sm90.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_f16_nk_decode(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                          const Gate& gate) {
  using E = typename CutlassElement<__half>::type;
  StoreC<E, kDecodeBlkN, kDecodeBlkN> hook{static_cast<E*>(a.C), a.N};
  run_sm90<__half, BLayout::kNK, HookTileT<kDecodeBlkN, kDecodeClusterM>>(a, cfg, hook, num_sms, raster,
                                                                          /*workspace=*/nullptr, stream, gate);
}

}  // namespace tw::gemm_impl
