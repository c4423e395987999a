// One instantiation of the sm90 GEMM: bf16 A [M, K], B as [K, N] (BLayout::kKN), bf16 C, default hook StoreC.
// Runs on H200 (GEMM GPU tests with kKN B; docs/gemm.md).
#include "gemm_sm90.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_bf16_kn(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                    const Gate& gate) {
  using E = typename CutlassElement<__nv_bfloat16>::type;
  StoreC<E> hook{static_cast<E*>(a.C), a.N};
  run_sm90<__nv_bfloat16, BLayout::kKN>(a, cfg, hook, num_sms, raster, /*workspace=*/nullptr, stream, gate);
}

}  // namespace tw::gemm_impl
