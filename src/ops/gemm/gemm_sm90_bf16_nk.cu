// The sm90 GEMM for bf16 A [M, K], B as [N, K] (BLayout::kNK), bf16 C with the default hook StoreC
// (shared memory + bulk copies). The epilogue variants measured against it live in
// gemm_sm90_bf16_nk_variants.cu (TILEWIRE_GEMM_EPILOGUE), in the measurement build only.
#include "gemm_sm90.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {

void launch_bf16_nk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                    const Gate& gate) {
  using E = typename CutlassElement<__nv_bfloat16>::type;
#ifdef TILEWIRE_BENCH_KERNELS
  if (const Epilogue e = epilogue_variant(); e != Epilogue::kStaged && gate.flags == nullptr) {
    launch_bf16_nk_variant(e, a, cfg, num_sms, raster, stream);
    return;
  }
#endif
  StoreC<E> hook{static_cast<E*>(a.C), a.N};
  run_sm90<__nv_bfloat16, BLayout::kNK>(a, cfg, hook, num_sms, raster, /*workspace=*/nullptr, stream, gate);
}

}  // namespace tw::gemm_impl
