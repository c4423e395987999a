// src/ops/grouped_gemm/launch.hpp — the grouped GEMM kernels this build instantiates, one
// translation unit each (grouped_sm90_bf16_{nk,kn}_{pp,pp256,coop}.cu; grouped_sm90.cuh): bf16, B as
// [N, K] or [K, N], on the 64 x 128 or 64 x 256 ping-pong tiles or the 128 x 256 cooperative tile
// in 1 x 2 clusters. Arguments already checked (grouped_gemm.cpp); sm_count: the CTAs of the persistent grid;
// gate: the row gate (gate.hpp), off by default.
#pragma once
#include <cuda_runtime.h>

#include "gate.hpp"
#include "tilewire/ops/grouped_gemm.hpp"

namespace tw::grouped_impl {

using Launch = void (*)(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);

void launch_bf16_nk_pp(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_kn_pp(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_nk_pp256(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_kn_pp256(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_nk_coop(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_kn_coop(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
// GroupedEpilogue::kSwiGlu (B [N, K] only: the gate-up weights of an MoE FFN)
void launch_bf16_nk_pp_swiglu(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_nk_pp256_swiglu(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_nk_coop_swiglu(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);

// GroupedEpilogue::kRowTargets (B [N, K] only: the down weights of an MoE FFN; the tiles the tile rule picks)
void launch_bf16_nk_pp_row_targets(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
void launch_bf16_nk_coop_row_targets(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream);
// grouped_gemm() with a row gate: the same checks and tile rule; throws as grouped_gemm() does.
void grouped_gemm_gated(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg, const RowGate& gate,
                        cudaStream_t stream);

}  // namespace tw::grouped_impl
