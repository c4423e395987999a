// src/ops/gemm_scatter_gather/fused.hpp — allgather_gemm's fused path (allgather_fused.cu) and
// its pure host rules (gemm_scatter_gather.cpp; unit-tested on the CPU in
// tests/cpu/gemm_scatter_gather_plan_test.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace tw {
class Comm;
struct WindowRef;
namespace tp_impl {

// The fused path's workspace: the gathered A [P S, K] at 0, then P x chunks uint64 arrival flags
// at flags_off (inside the sequential path's padding slot, so the workspace size is unchanged):
// shard q's chunk c is flag q chunks + c, its rows [q S + c S / chunks, ..). chunks divides S / 128
// (whole GEMM tile rows), is at most kMaxChunks, and keeps a chunk at 1 MiB or more where the
// shard allows: a peer's GEMM starts on the first chunk of a shard, and each chunk costs the push
// one fence and one flag per CTA.
struct AgFusedLayout {
  int chunks = 1;
  size_t flags_off = 0;
  size_t total = 0;
};
inline constexpr int kMaxChunks = 32;
AgFusedLayout ag_fused_layout(int M, int K, DType dtype, int P);

// The push kernel's CTAs for a shard of S rows of K elements: one per MiB of the shard, 1 to 16
// (the same on every rank: from S, not the rank's own rows); at most 2 on a virtual team, where
// the ranks share the device's SMs; at most max_blocks (its entry barrier is per CTA).
int ag_push_ctas(int S, int K, DType dtype, bool virtual_team, int max_blocks);

// gemm() enqueues a GEMM on `stream`; the bytes are copied from src to dst on a side stream beside
// it, joined into `stream` when this returns (the copy waits for nothing, so it may share the SMs).
// dst null or bytes 0: gemm() alone.
void gemm_with_copy_beside(const Comm& comm, void* dst, const void* src, size_t bytes, cudaStream_t stream,
                           const std::function<void()>& gemm);

// Whether the fused path's GEMM can load the peers' copies of workspace window w with TMA (its
// offset and LSA stride multiples of 16 bytes).
bool ag_pull_aligned(const WindowRef& w);

void fused_allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream);

// gemm_reducescatter's fused path at M <= 256 on P > 1 ranks (reducescatter_decode.cu): the plain
// GEMM into the workspace, then one kernel that sums this rank's shard of every partial.
void fused_reducescatter_decode(Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg, cudaStream_t stream);

}  // namespace tp_impl
}  // namespace tw
