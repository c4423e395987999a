// One instantiation of the sm90 GEMM: fp16 A pulled in batches (allgather_gemm), B as [K, N], fp16 C,
// hook StoreCGather: the kernel also writes the gathered A (gather_hook.cuh).
#include "gather_hook.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_f16_kn_gather(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                          const Gate& gate) {
  run_sm90_gather<__half, BLayout::kKN>(a, cfg, num_sms, raster, stream, gate);
}

}  // namespace tw::gemm_impl
