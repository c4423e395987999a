// src/ops/gemm/launch.hpp — the GEMM kernels this build instantiates, one translation unit each
// (so a 2-core build compiles them in parallel): gemm_sm90_bf16_nk.cu, gemm_sm90_bf16_kn.cu.
// Arguments are already checked (gemm.cu); num_sms is the device's SM count.
#pragma once
#include <cuda_runtime.h>

#include "scheduler.hpp"
#include "tilewire/ops/gemm.hpp"

namespace tw::gemm_impl {

// The one tile configuration built: (BLK_M, BLK_N) = (128, 256), clusters of 2 CTAs along M.
inline constexpr int kBlkM = 128, kBlkN = 256, kClusterM = 2;

// Epilogue of the bf16 kNK kernel: kStaged is the product; the others exist to be measured
// against it (TILEWIRE_GEMM_EPILOGUE = staged | staged_half | direct | none, read once).
enum class Epilogue { kStaged, kStagedHalf, kDirect, kNone };
Epilogue epilogue_variant();
void launch_bf16_nk_variant(Epilogue e, const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster,
                            cudaStream_t stream);

void launch_bf16_nk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream);
void launch_bf16_kn(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream);

}  // namespace tw::gemm_impl
