// src/ops/gemm/launch.hpp — the GEMM kernels this build instantiates, one translation unit each
// (so a 2-core build compiles them in parallel): gemm_sm90_bf16_nk.cu, gemm_sm90_bf16_kn.cu and
// gemm_sm90_f16_{nk,kn}.cu (the hook kernel), gemm_sm90_{bf16,f16}_nk_streamk.cu (the stream-K
// kernel, kNK plain GEMM only), gemm_sm90_{bf16,f16}_nk_pingpong.cu (its ping-pong tiles) and
// gemm_sm90_{bf16,f16}_nk_wide.cu (its 256-row tiles).
// Arguments are already checked (gemm.cu); num_sms is the device's SM count.
#pragma once
#include <cuda_runtime.h>

#include "plan.hpp"  // kBlkM, kBlkN, kClusterM: the hook kernel's tile; StreamKPlan
#include "scheduler.hpp"
#include "tilewire/device/context.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_impl {

// Where the GEMM's A comes from, and when (allgather_gemm's fused path; a default Gate is the
// plain GEMM reading A at a.A):
//   * batches > 1, A pulled where it lies: the logical A [m_total, K] is `batches` blocks of
//     batch_rows rows (a multiple of kBlkM), block l at a.A + l batch_stride elements (a peer's
//     copy of the workspace: the LSA stride). The kernel runs one CUTLASS batch per block (A's
//     TMA descriptor has the batch as its third mode, B's batch stride is 0) and stores block l's
//     rows at rows l batch_rows.. of C, none at m_total or beyond.
//   * flags set, a gate on A's row blocks: before a CTA loads the tile at M-tile tm, its mainloop
//     load warp waits until flags[src] >= want (acquire, polled with pauses, bounded by
//     ctx.timeout_ns), src = tm * kBlkM / rows_per_src, except src == skip (the rows already
//     local; -1: none), then orders its TMA loads after it (fence.proxy.async).
// With either, the work list starts at the unit holding row first_row (the local rows first,
// then the rows after them, wrapping).
// ring (tracing on): the scheduler records, with trace::emit, per tile mma_start when the
// mainloop's load warp has the tile (past its gate) and mma_end when the consumers ask for their
// next tile (the tile's epilogue issued), and per CTA kernel_start / kernel_end (id = CTA).
struct Gate {
  const uint64_t* flags = nullptr;
  int rows_per_src = 0;
  int skip = -1;
  uint64_t want = 0;
  int first_row = 0;
  int batches = 1;
  int batch_rows = 0;
  long long batch_stride = 0;
  int m_total = 0;
  DevCtx ctx{};
  trace::Ring ring{};
  TW_HD bool orders() const { return flags != nullptr || batches > 1; }  // first_row sets the walk's start
};

// Epilogue of the bf16 kNK kernel: kStaged is the product; the others exist to be measured
// against it (TILEWIRE_GEMM_EPILOGUE = staged | staged_half | direct | none, read once), in the
// measurement build only (-DTILEWIRE_BENCH_KERNELS=ON); elsewhere epilogue_variant() is kStaged.
enum class Epilogue { kStaged, kStagedHalf, kDirect, kNone };
Epilogue epilogue_variant();
void launch_bf16_nk_variant(Epilogue e, const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster,
                            cudaStream_t stream);

void launch_bf16_nk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                    const Gate& gate = {});
void launch_bf16_nk_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream);
void launch_f16_nk_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                           cudaStream_t stream);
// The ping-pong tiles of the same kernel family (plan.tile with tile_shape(..).pingpong).
void launch_bf16_nk_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                             cudaStream_t stream);
void launch_f16_nk_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream);
// The swapped ping-pong tiles of swapwide_pingpong (gemm_sm90_{bf16,f16}_nk_swapwide.cu).
void launch_bf16_nk_swapwide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                             cudaStream_t stream);
void launch_f16_nk_swapwide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream);
// The 256-row cooperative tiles (k256x*, CuTe's extended wgmma atoms; gemm_sm90_{bf16,f16}_nk_wide.cu).
void launch_bf16_nk_wide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                         cudaStream_t stream);
void launch_f16_nk_wide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                        cudaStream_t stream);
void launch_bf16_kn(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                    const Gate& gate = {});
void launch_f16_nk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                   const Gate& gate = {});
void launch_f16_kn(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                   const Gate& gate = {});

// The hook kernel on its decode tile (plan.hpp kDecodeBlkN, no clusters) with StoreC, for
// allgather_gemm's gated GEMM at M <= kHookDecodeMaxM (gemm_sm90_{bf16,f16}_{nk,kn}_decode.cu).
void launch_bf16_nk_decode(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                           const Gate& gate);
void launch_bf16_kn_decode(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                           const Gate& gate);
void launch_f16_nk_decode(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                          const Gate& gate);
void launch_f16_kn_decode(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                          const Gate& gate);

// tw::gemm with A gated or pulled in batches (Gate above): the hook kernel (never stream-K; on its
// decode tile at M <= kHookDecodeMaxM, gated_tile_is_decode; M is the logical rows, m_total).
// Gated, rows are walked along N (raster kAlongN, in bands of cfg.swizzle row units: with 1, a
// row block's tiles together); pulled, on the plain GEMM's raster; either way from the gate's
// first_row. Arguments as tw::gemm's, already checked by the caller.
void gemm_gated(const GemmArgs& a, const GemmConfig& cfg, const Gate& gate, cudaStream_t stream);
inline bool gated_tile_is_decode(int M) { return M <= kHookDecodeMaxM; }

// TILEWIRE_GEMM_KERNEL = auto | hook | streamk, read once (gemm.cu).
KernelPref kernel_pref();

}  // namespace tw::gemm_impl
