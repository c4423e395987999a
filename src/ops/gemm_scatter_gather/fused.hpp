// src/ops/gemm_scatter_gather/fused.hpp — allgather_gemm's fused path (allgather_fused.cu) and
// its pure host rules (gemm_scatter_gather.cpp; unit-tested on the CPU in
// tests/cpu/gemm_scatter_gather_plan_test.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace tw {
class Comm;
namespace tp_impl {

// The fused path's workspace: the gathered A [P S, K] at 0, then P uint64 arrival flags at
// flags_off (inside the sequential path's padding slot, so the workspace size is unchanged).
struct AgFusedLayout {
  size_t flags_off = 0;
  size_t total = 0;
};
AgFusedLayout ag_fused_layout(int M, int K, DType dtype, int P);

// The push kernel's CTAs for a shard of S rows of K elements: one per MiB of the shard, 1 to 16
// (the same on every rank: from S, not the rank's own rows); at most 2 on a virtual team, where
// the ranks share the device's SMs; at most max_blocks (its entry barrier is per CTA).
int ag_push_ctas(int S, int K, DType dtype, bool virtual_team, int max_blocks);

void fused_allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream);

}  // namespace tp_impl
}  // namespace tw
