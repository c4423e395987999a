// One instantiation of the sm90 GEMM: bf16 A pulled in batches (allgather_gemm), B as [N, K], bf16 C,
// hook StoreCGather: the kernel also writes the gathered A (gather_hook.cuh).
#include "gather_hook.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_bf16_nk_gather(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                           const Gate& gate) {
  run_sm90_gather<__nv_bfloat16, BLayout::kNK>(a, cfg, num_sms, raster, stream, gate);
}

}  // namespace tw::gemm_impl
