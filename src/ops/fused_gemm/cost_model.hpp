// src/ops/fused_gemm/cost_model.hpp — when does fusing the collective into the GEMM pay?
//
// A first-order time model of the three fused tensor-parallel ops against their sequential
// path (the GEMM, then the collective), on H200 NVLink at P = 2, 4, 8. Host-only, no GPU.
// kAuto is meant to take the fused path where the model predicts a win by a margin
// (prefers_fused), and every fused bench prints its predictions (predictions_line). The
// formulas, the constants with their sources and the calibration against the 2 x H200 runs are
// in docs/fused_gemm.md ("The cost model (kAuto)"); tests/cpu/fused_cost_model_test.cpp holds
// the calibration rows and asserts the fit.
//
//   sequential = T_gemm + T_coll             T_coll = latency + f * bytes / busbw(P)
//   fused      = max(G + tail, first tile + flag latency + f * bytes / busbw(P))   (gemm_allreduce,
//                                                                    gemm_reducescatter)
//              = 2 flag latencies + max(G, ceil(N / tile_n) f * bytes / busbw(P))   (allgather_gemm:
//                                                    every column tile's CTA pulls its A tile over the link)
//              = G + 2 flag latencies + f * bytes / busbw(P)   (every op at M <= 256: an all-reduce
//                                   or a reduce after, a gather before the plain GEMM)
//   G          = max(T_gemm, waves * t_tile) * (1 + overhead)   the fused kernel's GEMM
//   tail       = hops * max(one CTA pushing its tile, flag latency + the last wave's bytes / busbw)
//
// f: 2 (P-1)/P for the all-reduce (bytes = C), (P-1)/P for the reduce-scatter (bytes = C) and
// the all-gather (bytes = the gathered A). Shapes are one rank's GEMM, so T_gemm does not
// change with P; only the collective does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tw::fused_gemm {

enum class FusedOp {
  kGemmAllReduce,      // C[M, N] = sum_r A_r[M, K_local] B_r[K_local, N], on every rank
  kGemmReduceScatter,  // the same partials; rank r keeps its M / P rows
  kAllGatherGemm,      // A shards [M / P, K] gathered, C_r = A B_r: [M, N_local]
};
const char* op_name(FusedOp op);  // "gemm_allreduce", "gemm_reducescatter", "allgather_gemm"

// One rank's GEMM: K = K_local for the all-reduce and reduce-scatter, N = N_local for the
// all-gather (whose M is the gathered rows).
struct Shape {
  int64_t M = 0, N = 0, K = 0;
  int dtype_bytes = 2;  // bf16 or fp16 A, B, C and partials: the rates below are 2-byte figures
};

// The fused kernel as the model sees it: its C tile, and the hops a tile's data makes after the
// last wave (the relay: 1, or 2 in a one-wave grid; the owner all-reduce: 2, partial to the
// owner and final back; the reduce-scatter: 1; the all-gather: none, its wait comes first).
// 0: the library's choice (fused_tile(), and the rule above).
struct FusedKernel {
  int tile_m = 0, tile_n = 0;
  int hops = 0;
};

// Link and device constants. Defaults: H200 SXM over NVLink4, the op's own collectives
// (tw::allreduce / reduce_scatter / all_gather, what the sequential path runs). Each value's
// source is in docs/fused_gemm.md; "assumed" marks what no run on record measured.
struct LinkModel {
  const char* name = "H200 NVLink";
  // The sequential collective: latency_us + f * bytes / busbw. Fitted on the (c) - (a) rows of
  // the 2-rank grids and the standalone all-reduce (8.1 us + 366 GB/s); docs/fused_gemm.md has
  // the runs.
  double coll_latency_us = 8.0;
  double busbw_gbps_p2 = 350.0;  // measured (2 x H200, NV18)
  double busbw_gbps_p4 = 350.0;  // assumed: the same per-GPU NVLink port through NVSwitch
  double busbw_gbps_p8 = 350.0;  // assumed, as P = 4
  // The fused kernel's communication.
  double flag_latency_us = 3.0;  // an NVLink store and the peer's poll (one-shot 8 KiB: 3.2 us)
  double cta_push_gbps = 3.3;    // one CTA pushing one finished tile: 64 KiB in ~20 us
  // The device.
  int sms = 132;                  // persistent fused grids: one CTA per SM
  double sm_peak_tflops = 989.0;  // dense bf16 peak of the whole GPU: a tile's floor
  double gemm_tflops = 720.0;     // estimate_gemm_us, compute-bound shapes
  double hbm_tbps = 4.0;          // estimate_gemm_us, memory-bound shapes
  double gemm_fixed_us = 4.0;     // estimate_gemm_us, a kernel's start and drain

  double busbw_gbps(int P) const;  // P = 2 -> _p2, 3..4 -> _p4, 5..8 -> _p8
};

LinkModel h200_nvlink();       // tilewire's collectives: the op's own sequential path
LinkModel h200_nvlink_nccl();  // NCCL 2.28.9 (the benches' baseline (b)): 15 us + 280 GB/s

// The GEMM alone, for callers without a measurement: max(2 M N K / gemm_tflops,
// (M K + K N + M N) e / hbm_tbps) + gemm_fixed_us. Within 15% of cuBLASLt on the 2-rank grid.
double estimate_gemm_us(int64_t M, int64_t N, int64_t K, int dtype_bytes, const LinkModel& link = h200_nvlink());

// What the library runs: 128 x 64 tiles at M <= 256 (the decode tile of the owner kernel and
// of allgather_gemm's gated GEMM), 128 x 256 otherwise.
FusedKernel fused_tile(FusedOp op, const Shape& s);

// The fused kernel's slowdown of the GEMM measured so far (docs/fused_gemm.md), for the kernel
// kAuto runs: the relay all-reduce 0.02 at P = 2 (2 x H200) and 0.14 at P > 2 (4 virtual ranks on
// one H200, against cuBLASLt on the same SM budget); the relay reduce-scatter 0.12 (2 and 4
// virtual ranks, against tilewire's GEMM on the same budget); the all-gather's pulled GEMM 0.04
// (its median over the Llama sweep at M >= 2048 on 2 and 4 virtual ranks, without A_gathered,
// against the GEMM alone in lockstep); at M <= 256, where every op runs the plain GEMM
// (decode_path), 0 for the reduce-scatter and the all-gather, and 0.07 for the all-reduce: its
// in-place kernel against tw::allreduce, (fused - sequential) / GEMM at the 75th percentile of
// the decode sweep at 2 and 4 virtual ranks (the larger C, the more it loses; up to 0.27). The virtual-team figures carry the "link" traffic through the one GPU's HBM;
// pass a measured figure where there is one.
double default_overhead(FusedOp op, const Shape& s, int P);

// Whether the op's fused path at this shape is the plain GEMM with the gather before it or the
// reduce or all-reduce after it (every op at M <= 256) rather than a fused kernel.
bool decode_path(FusedOp op, const Shape& s);

struct Prediction {
  double fused_us = 0;             // the fused op
  double sequential_us = 0;        // T_gemm + coll_us
  double gemm_us = 0;              // G: the fused kernel's GEMM, with its overhead
  double coll_us = 0;              // the sequential collective alone
  double exposed_us = 0;           // fused_us - gemm_us: communication the GEMM does not hide
  double break_even_overhead = 0;  // the overhead at which fused_us == sequential_us
  bool fused_wins = false;         // fused_us < sequential_us (no margin: see prefers_fused)
};

// t_gemm_us: this rank's GEMM alone (measured, or estimate_gemm_us). overhead: the fused
// kernel's slowdown of it (> -1; negative where its mainloop beats the GEMM measured). kernel:
// a fused kernel's tile and hops; none (0) is the library's choice, which at M <= 256 is the
// plain GEMM with a kernel beside it (decode_path), a given kernel is that kernel at every M.
// Throws tw::Error(kInvalidArgument) on a shape, P (2..8) or time the model does not cover.
Prediction predict(FusedOp op, const Shape& s, int P, double t_gemm_us, double overhead,
                   const LinkModel& link = h200_nvlink(), FusedKernel kernel = {});

// kAuto's test: fused only where the model predicts it faster by more than `margin` (3%: about
// the run-to-run spread of the 2-rank benches, docs/gemm_allreduce.md).
inline constexpr double kAutoMargin = 0.03;
inline bool prefers_fused(const Prediction& p, double margin = kAutoMargin) {
  return p.fused_us <= (1.0 - margin) * p.sequential_us;
}

// One line for a bench: "model (H200 NVLink): P=2 fused 766.6 us seq 1136.4 us -> fused | P=4
// ... | P=8 ...". Without `overhead`, default_overhead(op, s, P) at each P.
std::string predictions_line(FusedOp op, const Shape& s, double t_gemm_us,
                             std::optional<double> overhead = std::nullopt, const LinkModel& link = h200_nvlink());

}  // namespace tw::fused_gemm
