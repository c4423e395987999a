// The EP kernels (tilewire/ops/ep.hpp): layout, dispatch, combine. docs/ep.md draws who writes
// what where.
//
// Window (one per rank, the same offsets everywhere; Geometry):
//   slots[P]        count slot written by source s: tag, status, s's tokens for every rank,
//                   s's tokens for each of this rank's experts
//   done/cstart/cdone[P][G]  per (source, channel) flags, tagged with the call's epoch
//   recv rows       [capacity] payload rows, scales, local top-k ids and weights, source
//                   (rank, token): rows of source s start at sum_{q < s} count(q -> me)
//   combine rows    [P][max_tokens] bf16 rows (and weights) sent back by each destination, at
//                   the token's row in that destination's receive stream
//
// Trace (EpBuffer::set_trace): per CTA kKernelStart / kKernelEnd (id = CTA), kChunkSend when the
// CTA's first row store is issued (id = CTA), kChunkRecv when a source's rows of this channel have
// landed (id = source rank); combine's ids are offset by kCombineId.
//
// Channels: a kernel runs G CTAs on every rank; CTA b handles tokens (rows) b, b + G, ... in
// warps and exchanges its flags with the CTAs b of the peers, so every rank's G CTAs must be
// resident at once (G <= comm.sm_count(), the SM budget).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "tilewire/ops/ep.hpp"

#include "tilewire/device/context.hpp"
#include "tilewire/device/peer.cuh"
#include "tilewire/device/ptx.cuh"
#include "tilewire/device/signal.cuh"
#include "tilewire/trace/event.hpp"
#include "geometry.hpp"

namespace tw::ops::ep {

// A CTA's call counter (next_epoch). 64 bits, so it never wraps: a 32-bit one would after 2^32
// calls (about 20 days at 2,500 calls per second), and a wait for call 0 would then pass on any
// earlier call's flag (EpEpoch.* cross that point).
using Epoch = uint64_t;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRanks = 64;  // shared arrays per rank in the kernels; the LSA team is at most 8 of them
constexpr uint32_t kCombineId = kEpTraceCombine;
constexpr uint32_t kLayoutId = kEpTraceLayout;  // the low-latency send's phases (tilewire/ops/ep.hpp)
constexpr uint32_t kCountsId = kEpTraceCounts;

// What layout found wrong, in device memory (EpBuffer::check copies it back).
// kStatusDuplicate: low latency, topk_idx[token][slot] = value repeats an expert of that token's
// row (the dispatch writes nothing on any rank, as for an id out of range).
constexpr int kStatusDuplicate = 4;
struct Status {
  int code;   // the routing's verdict: 0 ok; 1 this rank's topk_idx had an id outside [-1, E);
              // 2 a peer's was refused (rank = peer); kStatusDuplicate
  int rank, token, slot;
  long long value;
  int no_y_rows;  // the last combine had no y on this rank, which received this many rows (0: fine)
};


// ---------------------------------------------------------- device helpers of both modes
// World rank `peer`'s copy of byte `off` of window `w` (every EP peer is in the LSA team).
template <class T>
__device__ __forceinline__ T* at(const DevCtx& ctx, const DevWindow& w, size_t off, int peer) {
  return dev::lsa_ptr<T>(ctx, w, off, dev::lsa_of_world(ctx, peer));
}

// This CTA's call number for its channel (every rank's CTA b counts the same calls): the tag of
// every flag this call writes and waits for.
__device__ __forceinline__ uint64_t next_epoch(Epoch* epochs) {
  __shared__ uint64_t e;
  if (threadIdx.x == 0) {
    const Epoch n = epochs[blockIdx.x] + 1;
    epochs[blockIdx.x] = n;
    e = n;
  }
  __syncthreads();
  return e;
}

// One trace event of this CTA (thread 0), now.
__device__ __forceinline__ void stamp(const trace::Ring& ring, trace::EventKind k, uint32_t id) {
  if (threadIdx.x == 0) trace::emit(ring, k, id, ptx::globaltimer());
}

// A warp copies a row of `chunks` 16-byte chunks: each lane keeps kRowUnroll loads in flight
// before it stores (one load at a time leaves a warp waiting on memory latency per chunk; with
// 8, a 7168-wide bf16 row is 4 round trips).
// `load(c)` reads chunk c, `store(c, v)` writes it (to one or several destinations).
constexpr int kRowUnroll = 8;
template <class Load, class Store>
__device__ __forceinline__ void warp_copy_row(int chunks, int lane, Load&& load, Store&& store) {
  for (int c0 = lane; c0 < chunks; c0 += 32 * kRowUnroll) {
    uint4 v[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (c0 + 32 * u < chunks) v[u] = load(c0 + 32 * u);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (c0 + 32 * u < chunks) store(c0 + 32 * u, v[u]);
  }
}

struct Routing {  // this rank's layout (local device memory)
  uint8_t* in_rank;        // [max_tokens, P]
  int* send_slot;          // [max_tokens, P]: the token's index among those going to rank d
  int* tokens_per_rank;    // [P]
  int* tokens_per_expert;  // [E]
  int num_tokens;
};

struct Common {  // what every high-throughput kernel of a rank shares
  DevCtx ctx;
  DevWindow win;
  Geometry g;
  const uint64_t* sig0;  // [4P]: the GIN counters' values when the buffer was made (g.gin only)
};

// EpExpertMajor on the device (xg null: off). dispatch needs place_smem_bytes(L) of dynamic shared
// memory with it.
struct Place {
  char* xg;
  int max_rows;
  int *counts, *offsets, *bounds, *perm, *pos_of, *overflow;
  uint64_t* layout_flag;
  uint64_t* ready;
};
constexpr size_t place_smem_bytes(int L) { return (size_t)(3 + kWarps) * L * sizeof(int); }

// EpExpertPlaces on the device (send_pos null: off). dispatch needs direct_smem_bytes(E, P) of
// dynamic shared memory with it: per expert e the term that makes a sender's own place of a pair
// its place at the receiver, and per rank whether its pairs overflow its area.
struct Direct {
  const int* send_pos;
  int *counts, *offsets, *overflow;
  int* rank_over;  // [P] out (CTA 0): 1 where rank d's pairs exceed its area (combine_slots skips its slots)
};
constexpr size_t direct_smem_bytes(int E, int P) { return (size_t)(E + P) * sizeof(int); }

struct DispatchParams : Common {
  Routing r;
  const char* x;
  const float* x_scales;
  const void* topk_idx;
  bool idx64;
  const float* topk_weights;
  Epoch* epochs;         // [G]
  int* num_recv;         // out
  int* recv_per_expert;  // out [L]
  int* recv_base;        // out [P]: first row of each source
  int alignment;
  Status* status;
  trace::Ring ring;
  Place place;
  Direct direct;
};

struct CombineParams : Common {
  const char* y;           // null and yg null: no rows to return (with rows: zeros go back, Status::no_y_rows)
  // EpExpertRows (yg null: off): each row made from its experts' rows as it is sent
  // (expert_rows.cuh), in place of y.
  const char* yg;
  const int* pos_of;
  const float* pair_w;
  const float* weights;    // null: every row's weight is 1
  Status* status;
  Epoch* epochs;           // [G]
  const int* num_recv;
  const int* recv_base;
  trace::Ring ring;
};

struct ReduceParams {
  DevWindow win;
  int lsa_rank;  // this rank's index in the LSA team: its copy of win (not its world rank)
  Geometry g;
  Routing r;
  __nv_bfloat16* out;
  const Status* status;  // a dispatch whose routing was invalid: combine writes nothing either
};

// EpConfig::combine_slots (EpBuffer::slot_targets / combine_slots).
struct SlotParams : Common {
  void** targets;         // slot_targets: out [max_rows]
  int max_rows;
  const int* num_recv;    // slot_targets: the last dispatch's rows
  Epoch* epochs;          // slots_done: [G]
  const void* topk_idx;   // slots_reduce: [N, topk]
  bool idx64;
  const float* topk_weights;
  const int* rank_over;   // [P] (Direct::rank_over)
  int num_tokens;
  __nv_bfloat16* out;
  const Status* status;   // a refused routing: nothing written
};

__global__ void layout_count(const void* topk_idx, bool idx64, int N, int topk, int E, int L, int P, Routing r, int me,
                             Status* status);
__global__ void layout_scan(Routing r, int P);
__global__ void read_signals(DevCtx ctx, int base, int n, uint64_t* out);
__global__ void dispatch(const __grid_constant__ DispatchParams p);
__global__ void combine_push(const __grid_constant__ CombineParams p);
__global__ void combine_reduce(const __grid_constant__ ReduceParams p);
__global__ void slot_targets(const __grid_constant__ SlotParams p);
__global__ void slots_done(const __grid_constant__ SlotParams p);
__global__ void slots_reduce(const __grid_constant__ SlotParams p);

// ------------------------------------------------------------------ low latency (ll.cu)
namespace ll {


struct Local {  // this rank's device state
  int* pos;       // [max_tokens, topk]: the token's row in its expert's block, -1 for no expert
  int* cnt;       // [E]
  Epoch* epochs;     // [4][G]: send, recv, combine send, combine recv
  int2* route;       // [max_tokens, topk]: (rank, row in its receive block) of each pair the send placed
  int* rcount;       // [L] (each row's source, token and slot are in the window: Geo::meta)
  Status* status;
  int num_tokens;
  // GIN only (null otherwise): the signals' values at creation [6P: phase, parity, source], and
  // the running totals [4P: rows by parity, then combine rows by parity, per source] of what
  // each source has put so far, advanced after each receive by gin_advance / gin_advance_combine.
  const uint64_t* sig0;
  uint64_t* gin_total;
};

struct Params {
  DevCtx ctx;
  DevWindow win;
  Geo g;
  Local s;
  const char* x;          // send: bf16 rows
  const void* topk_idx;   // layout
  bool idx64;
  bool fp8;
  int parts;              // send: warps per (token, expert) pair (1 with GIN peers)
  const char* y;          // combine send: [L, cap, H] bf16 to copy into the combine block (null: it is there)
  const float* weights;   // combine recv: [N, topk]
  __nv_bfloat16* out;     // combine recv
  // send, send_tma, combine_send: let the next kernel on the stream launch once every CTA has
  // started (griddepcontrol.launch_dependents; it waits in griddepcontrol.wait for this one's
  // end). Only on a team with a GPU per rank: on a virtual team a CTA waiting there could hold
  // the room a peer's grid needs on the one GPU, and the ranks' grids must all be resident.
  // (combine_release always does: it is one CTA that waits for nothing, so the waiting CTAs are
  // freed within microseconds wherever they run.)
  bool early;
  trace::Ring ring;
};

// The send's dynamic shared memory for the layout of N tokens (ll.cu layout_in_smem): the bits
// and their prefix counts [ceil(N / 32)][E] (uint32 + int16), the places and the ids [N topk] int16.
__host__ __device__ constexpr size_t layout_smem(int E, int N, int topk) {
  const size_t words = (size_t)E * (((size_t)N + 31) / 32);
  return words * (sizeof(uint32_t) + sizeof(int16_t)) + 2 * (size_t)N * topk * sizeof(int16_t);
}

// send_tma's shared memory: the layout, then (128-byte aligned) per token of the CTA its bf16
// row [2H] and, fp8, the quantized row [H] and its scales [H / 128] fp32 (H a multiple of 512
// there: every region a multiple of 16 bytes, as bulk copies need). The quantized row has a
// region of its own: the CTA's warps quantize a row's groups in any order, and in place a group's
// bytes would land on another group's unread input.
constexpr int kTmaTokens = 16;  // a warp per token
static_assert(kTmaTokens <= kWarps, "send_tma: a warp per token");
__host__ __device__ constexpr size_t tma_rows_offset(int E, int N, int topk) { return (layout_smem(E, N, topk) + 127) / 128 * 128; }
__host__ __device__ constexpr size_t tma_row_smem(int H, bool fp8) { return 2 * (size_t)H + (fp8 ? (size_t)H + (size_t)H / 128 * 4 : 0); }
__host__ __device__ constexpr size_t tma_send_smem(int E, int N, int topk, int G, int H, bool fp8) {
  return tma_rows_offset(E, N, topk) + (size_t)((N + G - 1) / G) * tma_row_smem(H, fp8);
}

__global__ void send(const __grid_constant__ Params p);
__global__ void send_tma(const __grid_constant__ Params p);
__global__ void recv(const __grid_constant__ Params p);
__global__ void combine_send(const __grid_constant__ Params p);
__global__ void combine_release(const __grid_constant__ Params p);
__global__ void combine_recv(const __grid_constant__ Params p);
__global__ void gin_advance(const __grid_constant__ Params p);
__global__ void gin_advance_combine(const __grid_constant__ Params p);

}  // namespace ll

}  // namespace tw::ops::ep
