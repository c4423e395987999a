// tilewire/ops/ep.hpp — MoE expert parallelism: dispatch tokens to the ranks of their top-k
// experts and combine the experts' outputs back, from inside kernels (LSA stores into peers'
// windows; docs/ep.md).
//
// One EpBuffer per communicator and MoE layer shape. It owns one symmetric window, sized once
// from the config for the worst case (every rank sending all its tokens to one rank), and the
// routing of the last dispatch (the "handle"). Experts are split evenly: rank d holds experts
// [d x L, (d + 1) x L), L = num_experts / nranks.
//
//   layout(topk_idx)  on the device: tokens per rank, tokens per expert, token-in-rank mask,
//                     and each token's row in every destination's receive stream (a prefix sum:
//                     no atomics, so the order is deterministic).
//   dispatch          every rank sends each token once per destination rank (deduplicated),
//                     with its top-k ids (as the destination's local ids, -1 elsewhere) and
//                     weights. Received rows are in (source rank, source token) order.
//   combine           each received row y[r] (the sum over that rank's experts, weighted by the
//                     caller, as with DeepEP) goes back to its source; the source sums its
//                     rows in ascending rank order in fp32 (optionally times a per-row weight)
//                     and rounds once: bitwise deterministic.
//
// Synchronization: none on the host. Outputs live in the buffer (device pointers, valid until
// the next dispatch); counts are on the device. num_recv() and check() are the eager calls that
// synchronize the stream (to size a host-side allocation, or to surface bad routing). Every
// call is collective (all ranks, same order) and CUDA-graph capturable; waits are bounded
// (TILEWIRE_TIMEOUT_MS) and name the phase ("ep.dispatch.counts" ...; the waiting thread's index
// is the peer waited for, the block the channel).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tilewire/runtime/errors.hpp"  // tw::Status
#include "tilewire/runtime/comm.hpp"
#include "tilewire/trace/event.hpp"

namespace tw {

// What a token row carries: bf16, or fp8 e4m3 with an fp32 scale per 128 columns.
enum class EpPayload { kBFloat16, kFp8E4M3 };
// "bf16", "fp8". parse_ep_payload accepts exactly bf16|bfloat16 and fp8: the union of the CLI's
// --payload (bf16, fp8) and Python's payload (bfloat16, fp8).
const char* ep_payload_name(EpPayload p);
std::optional<EpPayload> parse_ep_payload(const std::string& s);

enum class EpIndex { kInt64, kInt32 };  // topk_idx element type; -1 = no expert
const char* ep_index_name(EpIndex i);                        // "int64", "int32"
std::optional<EpIndex> parse_ep_index(const std::string& s);  // exactly those

// High throughput (prefill, training): rows deduplicated per rank, rank-major. Low latency
// (decode, 1 to 256 tokens per rank): a row per (token, expert), stored once, straight into the
// expert-major block the expert reads; send and receive split.
enum class EpMode { kHighThroughput, kLowLatency };
const char* ep_mode_name(EpMode m);                        // "ht" (high throughput), "ll" (low latency)
std::optional<EpMode> parse_ep_mode(const std::string& s);  // exactly ht|ll (the CLI's --mode)

constexpr int kEpMaxTopk = 16;
constexpr int kEpMaxRanks = 32;  // ranks of an EP communicator (a token's destinations are a 32-bit mask)
constexpr int kEpMaxExperts = 512;
constexpr int kEpMaxTokens = 32768;
constexpr int kEpMaxLowLatencyTokens = 1024;
constexpr int kEpDefaultSms = 24;  // high throughput; low latency takes the SM budget (ep_default_sms)

// Trace event ids (EpBuffer::set_trace; docs/ep.md): dispatch's are the CTA or the source rank;
// combine's are offset by kEpTraceCombine; the low-latency send's setup phases by kEpTraceLayout
// (mma_start / mma_end around each CTA's layout) and kEpTraceCounts (chunk_send: CTA 0's counts
// left; chunk_recv + CTA: the CTA has every rank's counts).
constexpr uint32_t kEpTraceCombine = 1u << 16;
constexpr uint32_t kEpTraceLayout = 1u << 17;
constexpr uint32_t kEpTraceCounts = 1u << 18;
constexpr uint32_t kEpTracePlaced = 1u << 19;  // chunk_recv + source: a CTA's share of that source is in xg (EpExpertMajor)

struct EpConfig {
  int max_tokens_per_rank = 0;  // the most tokens any rank dispatches in one call (1..32768)
  int hidden = 0;               // H; a payload row is a multiple of 16 bytes (fp8: H % 128 == 0)
  int topk = 0;                 // 1..16
  int num_experts = 0;          // a multiple of nranks, at most 512
  EpPayload payload = EpPayload::kBFloat16;  // low latency: fp8 rows are quantized by the send
  EpMode mode = EpMode::kHighThroughput;
  int num_sms = 0;              // CTAs of each kernel (0: ep_default_sms)
  int expert_alignment = 1;     // recv_tokens_per_expert rounded up to a multiple of this
  // High throughput, bf16, every peer in the LSA team: the window also holds an expert-major
  // area of this many rows (and the places of each received row's slots), which
  // dispatch(EpExpertPlaces) stores rows into directly (0: none). Every rank passes the same value.
  int expert_major_rows = 0;
  // High throughput, bf16, every peer in the LSA team, with expert_major_rows > 0: the window also
  // holds a row per (token, top-k slot) of this rank's tokens [max_tokens_per_rank x topk, H] bf16,
  // where the ranks of the experts store each expert's output row (slot_targets gives the
  // addresses; tw::MoE's down GEMM stores into them from its epilogue), and combine_slots() sums
  // them. Every rank passes the same value.
  bool combine_slots = false;
};

// Host checks that need no GPU (tests/cpu/ep_plan_test.cpp).
Status check_ep_config(const EpConfig& c, int nranks, int sm_budget);
size_t ep_row_bytes(const EpConfig& c);    // payload bytes per token row
size_t ep_scale_bytes(const EpConfig& c);  // fp8: H / 128 x 4; bf16: 0
// CTAs per kernel when num_sms is 0: high throughput min(kEpDefaultSms, budget); low latency
// the whole budget (comm.sm_count()).
int ep_default_sms(const EpConfig& c, int sm_budget);

// The routing of the last layout() on this rank (device memory owned by the buffer).
struct EpLayoutView {
  int num_tokens = 0;                  // N of the layout
  const int* tokens_per_rank = nullptr;    // [nranks]: tokens with at least one expert on rank d
  const int* tokens_per_expert = nullptr;  // [num_experts]: tokens that selected expert e
  const uint8_t* token_in_rank = nullptr;  // [N, nranks]: 1 when token t goes to rank d
  const int* send_slot = nullptr;          // [N, nranks]: t's place among this rank's tokens for rank d
};

struct EpDispatchArgs {
  const void* x = nullptr;             // [N, H] payload (16-byte aligned), any device memory
  const float* x_scales = nullptr;     // fp8: [N, H / 128]
  EpPayload payload = EpPayload::kBFloat16;  // must be the buffer's
  int num_tokens = 0;                  // N (0..max_tokens_per_rank); ranks may differ
  const void* topk_idx = nullptr;      // [N, topk]
  EpIndex index_type = EpIndex::kInt64;
  const float* topk_weights = nullptr;  // [N, topk]
  // Dispatch again with the routing of the last layout (computed from this same topk_idx): the
  // backward pass, or a second payload; the layout kernels are skipped.
  bool reuse_layout = false;
};

// Where dispatch put this rank's rows (device pointers into the buffer's window, valid until the
// next dispatch). Rows [0, *num_recv) are filled, ordered by source rank, then source token.
struct EpRecv {
  void* x = nullptr;                  // [capacity, H] payload
  float* x_scales = nullptr;          // fp8: [capacity, H / 128]
  int32_t* topk_idx = nullptr;        // [capacity, topk] local expert id, or -1
  float* topk_weights = nullptr;      // [capacity, topk] (0 where the id is -1)
  int32_t* src_rank = nullptr;        // [capacity]
  int32_t* src_token = nullptr;       // [capacity]
  int* num_recv = nullptr;            // device: rows received
  int* tokens_per_expert = nullptr;   // device [num_experts / nranks], padded to expert_alignment
  int capacity = 0;                   // nranks x max_tokens_per_rank
  // EpConfig::expert_major_rows > 0 only (else null): the expert-major area [rows, H] bf16 and
  // each received row's slots' places [capacity, topk] (dispatch(EpExpertPlaces) writes them).
  void* expert_x = nullptr;
  int* expert_pos = nullptr;
};

struct EpLowLatencyArgs {
  const void* x = nullptr;             // [N, H] bf16 (quantized to fp8 by the send when the payload is fp8)
  int num_tokens = 0;                  // N (0..max_tokens_per_rank)
  const void* topk_idx = nullptr;      // [N, topk]; an expert twice in a token's row: check() throws, nothing written
  EpIndex index_type = EpIndex::kInt64;
};

// Low-latency receive, expert-major: expert l's rows are [l, 0 .. count[l]), in (source rank,
// source token) order. The pointers are fixed for the buffer's life (CUDA graphs may keep them);
// the contents are valid until this rank's next dispatch_send.
struct EpLowLatencyRecv {
  void* x = nullptr;                  // [L, capacity, H] payload: where the sends stored the rows (the window)
  // fp8: [L, capacity, H / 128], per 128 columns scale = amax / 448 (x ~ q x scale; the send
  // quantizes q = e4m3(x x (448 / amax)), each step rounded in fp32)
  float* x_scales = nullptr;
  int* count = nullptr;               // device [L]
  int32_t* src_rank = nullptr;        // [L, capacity] (the window: the senders store them with the rows)
  int32_t* src_token = nullptr;       // [L, capacity] (the window)
  // [L, capacity, H] bf16, the combine block: an expert that writes its output rows here (row
  // for row as x) passes y to combine_send, which then copies nothing; its sources read it.
  void* y = nullptr;
  int capacity = 0;                   // rows per expert: nranks x max_tokens_per_rank
};

// High throughput: the receive also laid out per local expert, for a grouped GEMM that starts
// while the rows are still landing (tw::MoE's overlapped FFN; docs/moe.md). Every (row, local
// expert) pair of the receive gets a place in xg, expert by expert, each expert's rows by source
// rank, each source's in (row, slot) order: the places MoE's unfused placement gives. After its
// own rows are out, each of the dispatch's G CTAs (num_sms()) takes a 1/G share of every source's
// rows, sources in rank order (the order of each expert's rows): once all of that source's rows
// have landed it places its share, copies those rows into xg and adds 1 to ready[source].
//   counts, offsets   [L]: expert l's pairs, first place (packed: offsets ascending)
//   bounds            [L][P + 1]: source q's pairs of expert l are its places
//                     [offsets[l] + bounds[l][q], offsets[l] + bounds[l][q + 1])
//   perm, pos_of      perm[place] = the receive row; pos_of[row x topk + slot] = its place or -1
//   overflow          more pairs than max_rows: their number, and nothing placed (counts 0,
//                     pos_of -1); else 0
//   layout_flag       raised to G once counts, offsets, bounds and overflow are written and the
//                     dispatch CTAs of every rank are running (a GEMM launched after it cannot
//                     take the SMs they need)
//   ready             [P]: reaches G once all of source q's pairs are in xg
// layout_flag and ready must read 0 when the dispatch starts (the caller zeroes them, in stream
// order before anything that waits for them). Every peer in the LSA team, bf16 payload.
struct EpExpertMajor {
  void* xg = nullptr;  // [max_rows, H] bf16
  int max_rows = 0;
  int* counts = nullptr;
  int* offsets = nullptr;
  int* bounds = nullptr;
  int* perm = nullptr;    // [max_rows]
  int* pos_of = nullptr;  // [capacity x topk]
  int* overflow = nullptr;
  uint64_t* layout_flag = nullptr;
  uint64_t* ready = nullptr;  // [P]
};

// High throughput with EpConfig::expert_major_rows = R > 0: the dispatch stores each row straight
// into the receiver's expert-major area (in its window), at the place of the row's first slot
// with an expert of that rank, and writes the places of all the row's slots beside it; so no
// pass over the receive puts rows in expert order. Places (receiver d, local expert l):
//   expert l's pairs start at offsets[l] = the pairs of d's experts < l from every source; within
//   them source q's pairs come before source q + 1's, each source's in its (token, slot) order.
// That is the order the MoE's placement gives the receive (ops/moe kernels place_rows), so every
// place is the same. The sender knows every rank's per-expert counts (the count slots carry all
// E), and its own entries' ranks:
//   send_pos   [N x topk] device: entry (t, j) with expert e >= 0 -> the entries of experts < e,
//              plus those of e before (t, j) in (token, slot) order, over this rank's N tokens
//              (its own expert-major order over all E experts); other entries are not read
//   counts, offsets [L], overflow [1]: out, this rank's layout (a rank whose pairs exceed R:
//              overflow = their number, counts 0, offsets 0, and every place -1: no rows sent
//              to it; else overflow 0)
// The rows land at EpRecv::expert_x; the places at EpRecv::expert_pos [capacity x topk] (-1: the
// slot's expert is on another rank, or none, or an overflow). The row is stored once per rank:
// the receiver copies it to its row's other places (the MoE does). Rows of the receive area
// (EpRecv::x) are not written; the metadata are.
struct EpExpertPlaces {
  const int* send_pos = nullptr;
  int* counts = nullptr;
  int* offsets = nullptr;
  int* overflow = nullptr;
};

// High throughput: what combine() sends, taken from the experts' output rows where they lie
// instead of from rows summed beforehand. Received row r is made as it is sent:
//   sum over slots j = 0..topk-1 (ascending) with pos_of[r x topk + j] >= 0 of
//   weights[r x topk + j] x yg[pos_of[r x topk + j]], fmas in fp32, rounded once to bf16
// (the same bits as summing into y first with those fmas and calling combine(y, nullptr, ...)).
// tw::MoE's fused FFN passes its down GEMM's output, the placement's pos_of and the receive's
// top-k weights, so the summed rows are never written.
struct EpExpertRows {
  const void* yg = nullptr;         // [rows, H] bf16, 16-byte aligned
  const int* pos_of = nullptr;      // [capacity x topk]: a row of yg, or -1
  const float* weights = nullptr;   // [capacity x topk]
};

class EpBuffer {
 public:
  // Collective: allocates the window and device state. Every rank passes the same config: the
  // fields that shape the protocol are compared first, and one that differs throws
  // kInvalidArgument on every rank, naming it. Throws kInvalidArgument on a bad config
  // (check_ep_config's reason); kUnsupported when a peer is outside the LSA team and the
  // communicator has no GIN. With GIN peers the buffer takes signals (Comm::reserve_signals:
  // 4 x nranks high throughput, 6 x nranks low latency) and staging regions in its window
  // (docs/ep.md).
  EpBuffer(Comm& comm, const EpConfig& cfg);
  ~EpBuffer();
  EpBuffer(const EpBuffer&) = delete;
  EpBuffer& operator=(const EpBuffer&) = delete;

  const EpConfig& config() const { return cfg_; }
  size_t bytes() const;  // window + device state of this rank
  int num_sms() const { return sms_; }

  // Routing of topk_idx [num_tokens, topk] on the device; the next dispatch uses it. Ids outside
  // [-1, num_experts) are recorded (check() reports them) and make the next dispatch write nothing
  // on any rank. Not collective.
  void layout(const void* topk_idx, EpIndex type, int num_tokens, cudaStream_t stream);
  EpLayoutView layout_view() const;

  // Collective. Runs layout() first unless a.reuse_layout.
  EpRecv dispatch(const EpDispatchArgs& a, cudaStream_t stream);
  // The same, with the receive also laid out per expert (EpExpertMajor). Throws kInvalidArgument
  // on a buffer with GIN peers or an fp8 payload, or a null pointer in `em`.
  EpRecv dispatch(const EpDispatchArgs& a, const EpExpertMajor& em, cudaStream_t stream);
  // The same, each row stored straight into its expert-major place (EpExpertPlaces). Throws
  // kInvalidArgument on a buffer made with expert_major_rows 0 or with GIN peers, or a null
  // pointer in `ep` (send_pos may be null with num_tokens 0).
  EpRecv dispatch(const EpDispatchArgs& a, const EpExpertPlaces& ep, cudaStream_t stream);
  // Collective. y: [*num_recv, H] bf16 rows in the last dispatch's receive order (any device
  // memory; null on a rank that received no rows, else check() throws and zero rows go back);
  // weights: optional [*num_recv] fp32, each row's weight (null: 1), so ranks may differ in
  // passing them; out: [N, H] bf16 for the last layout's N tokens = the fp32 sum over the ranks
  // its rows went to, in rank order, of weight x row, rounded once (tokens that went nowhere
  // get zeros).
  void combine(const void* y, const float* weights, void* out, cudaStream_t stream);
  // The same, each row made from its experts' rows as it is sent (EpExpertRows; every pointer
  // non-null, else kInvalidArgument).
  void combine(const EpExpertRows& rows, void* out, cudaStream_t stream);

  // High throughput with EpConfig::combine_slots, after a dispatch(EpExpertPlaces): each expert
  // row's output goes back as a row of its own, to the (token, slot) it was computed for, and the
  // source sums them (the low-latency combine's rule), so no rank sums its experts' rows first.
  //   slot_targets  not collective: targets[p] for every place p of this rank's expert-major area
  //                 that the last dispatch filled = the address of its (token, slot) row in the
  //                 source's window (16-byte aligned, H bf16); places past the filled ones are
  //                 not written. targets: [max_rows] device pointers, max_rows >= expert_major_rows.
  //   combine_slots collective: once every rank's stores into those rows are done (stream order:
  //                 whatever stored them ran before this call on every rank), out[t] = sum over
  //                 slots j = 0..topk-1 (ascending) whose expert e = topk_idx[t][j] is >= 0 and
  //                 whose rank e / L did not overflow its area, of topk_weights[t][j] x row(t, j),
  //                 fmas in fp32, rounded once to bf16 (tokens with no such slot: zeros). topk_idx
  //                 and topk_weights are the last dispatch's ([N, topk]).
  // Stores into a source's rows may begin once that source's dispatch of the same call has begun:
  // a rank's next dispatch waits for every source's, which follows that source's last
  // combine_slots on its stream, so no store lands on a row a source still reads.
  void slot_targets(void** targets, int max_rows, cudaStream_t stream);
  void combine_slots(const void* topk_idx, EpIndex type, const float* topk_weights, void* out, cudaStream_t stream);

  // Low latency (EpMode::kLowLatency), in this order per step: dispatch_send, dispatch_recv, then
  // optionally combine_send, combine_recv. The send kernel waits for every rank's counts of the
  // same step (they place its rows: every rank's send has begun), then stores its rows; the
  // receives wait for every peer's send of the same step (call the receive later to overlap the
  // transfer with compute). Out-of-order calls are refused (kInvalidArgument).
  void dispatch_send(const EpLowLatencyArgs& a, cudaStream_t stream);
  EpLowLatencyRecv dispatch_recv(cudaStream_t stream);
  // y: [L, capacity, H] bf16, expert l's rows in dispatch_recv's order; EpLowLatencyRecv::y (the
  // combine block) sends without a copy, any other memory is copied into it first.
  void combine_send(const void* y, cudaStream_t stream);
  // out: [N, H] bf16 = sum over j = 0..topk-1 with topk_idx[t][j] >= 0 of topk_weights[t][j] x
  // y(t, j), in fp32 in that order, rounded once.
  void combine_recv(const float* topk_weights, void* out, cudaStream_t stream);

  // Record the kernels' events into `ring` from the next call on (a null ring: off): per CTA its
  // start and end, when its first row leaves, and when each source's rows have landed (event ids
  // in docs/ep.md; the tracer's format, tilewire/trace/trace.hpp).
  void set_trace(const trace::Ring& ring);

  // Eager: `stream` waits for the last call on this communicator (whatever stream it was made
  // on) and is synchronized; then the rows the last dispatch received (high throughput only) /
  // throw kInvalidArgument if the last dispatch was refused (on every rank: an expert id out of
  // range on any rank, or in the low-latency mode an expert repeated in a token's row; low
  // latency: only after dispatch_recv, which brings every rank's verdict) or if this rank's last
  // combine had no y for the rows it received (this rank only).
  int num_recv(cudaStream_t stream);
  void check(cudaStream_t stream);

 private:
  struct State;       // src/ops/ep/state.cuh
  struct LowLatency;  // src/ops/ep/state.cuh
  friend struct EpAccess;  // src/ops/ep/state.cuh: the EP sources' and tests' access to the state
  // Both combines: rows null sends y (weights per row), else each row made from rows' expert rows.
  void combine_impl(const char* op, const void* y, const float* weights, const EpExpertRows* rows, void* out,
                    cudaStream_t stream);
  Comm& comm_;
  EpConfig cfg_;
  int sms_ = 0;
  std::unique_ptr<State> st_;
  std::unique_ptr<LowLatency> ll_;
  void init_low_latency();
  EpRecv dispatch_impl(const EpDispatchArgs& a, const EpExpertMajor* em, const EpExpertPlaces* ex, cudaStream_t stream);
  LowLatency& low_latency(const char* op);  // ll.cu
};

}  // namespace tw
