// One instantiation of the sm90 GEMM: fp16 A [M, K], B as [N, K] (BLayout::kNK), fp16 C,
// default hook StoreC; fp32 accumulation, one rounding, as the bf16 kernels.
#include "gemm_sm90.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_f16_nk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                   const Gate& gate) {
  using E = typename CutlassElement<__half>::type;
  StoreC<E> hook{static_cast<E*>(a.C), a.N};
  run_sm90<__half, BLayout::kNK>(a, cfg, hook, num_sms, raster, /*workspace=*/nullptr, stream, gate);
}

}  // namespace tw::gemm_impl
