// tilewire/ops/moe.hpp — a whole expert-parallel MoE FFN, from tokens and their routing to the
// combined output: dispatch, the gate-up GEMM, SiLU(gate) x up, the down GEMM, the weighted combine.
//
//   out[t] = sum_j topk_weights[t][j] x W2_e (SiLU(W1g_e x[t]) * W1u_e x[t]),   e = topk_idx[t][j] >= 0
//
// Experts are split as EpBuffer splits them: rank d holds experts [d L, (d + 1) L), L = E / P,
// with this rank's weights
//   w_gate_up  [L, 2F, H] bf16   MoeGateUp::kGateThenUp: rows [0, F) of expert l are the gate
//                                projection, rows [F, 2F) up; kInterleaved8: blocks of 8 rows in
//                                turn (interleave_gate_up below)
//   w_down     [L, H, F]  bf16
// (both [N, K] for their GEMM: the weights' usual layout, as torch's Linear keeps them).
//
// Per call, on `stream` (docs/moe.md has the picture; with MoeConfig::overlap the gate-up GEMM runs
// on a stream of the MoE's own, forked from `stream` and joined back within the call):
//   high throughput  EpBuffer::dispatch (rows deduplicated per rank) -> the received rows put in
//                    expert-major order, one copy per (row, local expert) (direct_dispatch: the
//                    dispatch stores each row at its first place, one copy per further place) -> grouped gate-up ->
//                    SiLU x up -> grouped down -> per received row, its experts' outputs times
//                    their weights summed in fp32 in slot order, rounded once -> EpBuffer::combine
//                    (slot_combine: grouped down storing each row into its token's rank ->
//                    EpBuffer::combine_slots)
//   low latency      dispatch_send / dispatch_recv (rows land expert-major, where the GEMM reads
//                    them) -> grouped gate-up -> SiLU x up -> grouped down, straight into the
//                    buffer's combine block -> combine_send / combine_recv (weights applied by
//                    the source, fp32, slot order)
// The GEMMs are tw::grouped_gemm with the counts on the device: no host synchronization, and a
// low-latency step is CUDA-graph capturable. Every step is deterministic, so the same inputs give
// the same bits on every run.
//
// Rounding: the gate-up output, the activation and the down output are bf16 (fp32 inside each
// step); the combine sums in fp32 and rounds once (high throughput: the per-rank sum of a row's
// experts is rounded to bf16 before it travels). With kInterleaved8 the SwiGLU runs in the gate-up
// GEMM's epilogue on its fp32 sums (GroupedEpilogue::kSwiGlu): no gate-up output in memory, and the
// activation is rounded once from unrounded gate and up values, so its bits differ from
// kGateThenUp's.
//
// Memory (this rank, besides the EpBuffer's window): the gate-up output [R, 2F] (kGateThenUp only)
// and the activation [R, F] bf16, with R = L x capacity (low latency) or max_expert_rows (high throughput; by
// default capacity x topk, capacity = P x max_tokens_per_rank), and in high throughput the expert-major input
// and output [R, H] bf16 and the combine rows [capacity, H] (not with fused_combine). With
// direct_dispatch the expert-major input and the places are in the EpBuffer's window instead, and
// the MoE keeps its own tokens' placement ([max_tokens_per_rank x topk] and its scratch); with
// slot_combine the output rows go to the window's slot rows ([max_tokens_per_rank x topk, H] per
// rank) and the MoE keeps only their addresses ([R] pointers). MoE::bytes() says how much.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "tilewire/ops/ep.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

// How w_gate_up holds each expert's gate and up projections (its 2F rows of H).
enum class MoeGateUp {
  kGateThenUp,   // rows [0, F): gate, rows [F, 2F): up (torch's two Linears stacked)
  kInterleaved8, // rows 16j .. 16j+7: gate rows 8j .. 8j+7, rows 16j+8 .. 16j+15: up rows 8j .. 8j+7
                 // (interleave_gate_up makes it once, at load): the SwiGLU runs in the gate-up GEMM
};

struct MoeConfig {
  EpConfig ep;    // hidden = H, topk, num_experts, max_tokens_per_rank, mode; payload bf16 only
  int ffn = 0;    // F: each expert's intermediate size (a multiple of 8)
  // Both GEMMs. rows_hint 0: the rows an expert gets under uniform routing,
  // nranks x max_tokens_per_rank x topk / num_experts (kAuto's tile follows it).
  // reserved_sms: besides the SMs outside this rank's budget (a virtual team's peers').
  GroupedGemmConfig gemm;
  // High throughput: the (row, local expert) pairs this rank's buffers hold, R below; 0: the worst
  // case, capacity x topk (a token may name an expert twice in this mode). A call that receives more computes nothing for this rank's
  // experts (their rows go back as zeros) and check() throws on this rank, naming the count.
  int max_expert_rows = 0;
  // High throughput, every peer in the LSA team: the gate-up GEMM runs beside the dispatch, each
  // tile starting once the rows it reads have landed (docs/moe.md, "Overlap"): the dispatch's
  // CTAs lay the receive out per expert (EpExpertMajor) source by source, and the grouped GEMM's
  // load warp waits for the sources of each tile. The results are the same bits as without it.
  // Every rank passes the same value. The dispatch runs ep.num_sms <= budget - 1 CTAs (0: the
  // default, capped there). Ignored in the low-latency mode.
  bool overlap = false;
  // High throughput: the combine makes each row it sends from the down GEMM's output rows of that
  // row's experts (EpExpertRows), instead of a scatter writing the summed rows first and the
  // combine reading them back. The same bits either way. Ranks may differ. Ignored in the
  // low-latency mode (its down GEMM already writes into the combine block).
  bool fused_combine = false;
  // High throughput, every peer in the LSA team, not with `overlap`: the dispatch stores each row
  // straight into its first place in the receiver's expert-major rows (EpExpertPlaces; those rows
  // live in the EP window), and the receiver copies it only to the row's other places, so the
  // pass that gathers the receive into expert order is gone. The same places as without it, so
  // the same bits. Every rank passes the same value (and the same max_expert_rows with it).
  // Ignored in the low-latency mode.
  bool direct_dispatch = false;
  // High throughput, with direct_dispatch: the down GEMM's epilogue stores each expert's output row
  // straight into its token's rank, a row per (token, top-k slot) there (GroupedEpilogue::kRowTargets
  // into the window's slot rows, EpConfig::combine_slots), and that rank sums its token's rows
  // (EpBuffer::combine_slots): no output rows in this rank's memory, no pass that reads them back,
  // and the rows leave while the GEMM's later tiles compute. The weights are applied by the source
  // in fp32 in slot order and the sum rounded once, as the low-latency combine does (so the bits
  // differ from the per-rank sums of the other high-throughput paths; the same bits on every run).
  // Every rank passes the same value. Not with gemm.tile 64x256pp. Ignored in the low-latency mode.
  bool slot_combine = false;
  // w_gate_up's layout. kInterleaved8 fuses SiLU(gate) x up into the gate-up GEMM's epilogue (one
  // pass over memory fewer, no [R, 2F] buffer; "Rounding" above). Ranks may differ.
  MoeGateUp gate_up = MoeGateUp::kGateThenUp;
};

// out[l] = w[l] with its 2F rows of H reordered from kGateThenUp to kInterleaved8, on `stream`:
// out row 16j + i = w row 8j + i (gate), out row 16j + 8 + i = w row F + 8j + i (up), i < 8. bf16,
// F % 8 == 0, out and w 16-byte aligned and disjoint. Throws kInvalidArgument on bad arguments.
void interleave_gate_up(const void* w, void* out, int L, int F, int H, cudaStream_t stream);

// Host checks that need no GPU: the EP config (check_ep_config), F, the payload.
Status check_moe_config(const MoeConfig& c, int nranks, int sm_budget);

struct MoeArgs {
  const void* x = nullptr;               // [N, H] bf16 (any device memory, 16-byte aligned)
  int num_tokens = 0;                    // N (0..max_tokens_per_rank); ranks may differ
  const void* topk_idx = nullptr;        // [N, topk] global expert ids, -1: none
  EpIndex index_type = EpIndex::kInt64;
  const float* topk_weights = nullptr;   // [N, topk]
  const void* w_gate_up = nullptr;       // [L, 2F, H] bf16
  const void* w_down = nullptr;          // [L, H, F] bf16
  void* out = nullptr;                   // [N, H] bf16 (null when N = 0)
};

class MoE {
 public:
  // Collective (creates the EpBuffer: every rank the same config). Throws kInvalidArgument with
  // check_moe_config's reason or when the GEMMs' reserved SMs leave fewer than 2; kUnsupported on a
  // device that is not sm_90. No rank returns before every rank has its buffers: a rank whose
  // allocation fails throws its error, and every other rank throws kState naming it.
  MoE(Comm& comm, const MoeConfig& cfg);
  ~MoE();
  MoE(const MoE&) = delete;
  MoE& operator=(const MoE&) = delete;

  const MoeConfig& config() const { return cfg_; }
  EpBuffer& ep() { return *ep_; }
  size_t bytes() const;  // the EpBuffer's plus this object's device memory on this rank

  // Collective. Throws kInvalidArgument, writing nothing, on arguments that can be checked on
  // the host (null pointers, N out of range); bad expert ids are found on the device as
  // EpBuffer finds them (every rank's dispatch writes nothing; check() throws on every rank).
  void forward(const MoeArgs& a, cudaStream_t stream);
  // Eager (synchronizes `stream`): throws kInvalidArgument when the last forward's routing was
  // refused (EpBuffer::check, every rank) or, high throughput, when this rank received more expert
  // rows than max_expert_rows (this rank only).
  void check(cudaStream_t stream);

  // Record events into `ring` from the next forward on (null ring: off): the EpBuffer's
  // (EpBuffer::set_trace; with the overlap, chunk_recv id kEpTracePlaced + q when a dispatch CTA
  // has put its share of source q's rows in place) and, with the overlap, the gate-up GEMM's
  // mma_start per tile when its load warp is past the gate (id = expert << 16 | row tile).
  void set_trace(const trace::Ring& ring);

 private:
  struct Buffers;  // src/ops/moe/moe.cpp
  Comm& comm_;
  MoeConfig cfg_;
  GroupedGemmConfig gemm_;  // cfg_.gemm as the GEMMs run it: rows_hint and reserved SMs resolved
  int local_experts_ = 0;
  std::unique_ptr<EpBuffer> ep_;
  std::unique_ptr<Buffers> buf_;
  trace::Ring trace_{};
  void combine_ht(const MoeArgs& a, const EpRecv& r, const int* pos_of, cudaStream_t stream);
  void forward_direct(const MoeArgs& a, const EpDispatchArgs& d, GroupedGemmArgs& up, GroupedGemmArgs& down,
                      cudaStream_t stream);
  void forward_overlapped(const MoeArgs& a, const EpDispatchArgs& d, GroupedGemmArgs& up, GroupedGemmArgs& down,
                          cudaStream_t stream);
};

// moe_ffn(moe, args, stream) = moe.forward(args, stream).
inline void moe_ffn(MoE& moe, const MoeArgs& a, cudaStream_t stream) { moe.forward(a, stream); }

}  // namespace tw
