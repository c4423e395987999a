// tilewire/ops/grouped_gemm.hpp — C_g = A_g B_g for L groups (the experts of an MoE layer) whose
// row counts live in device memory, on Hopper (sm_90a), bf16 in and out, fp32 accumulation.
//
//   A   [rows, K] row-major        the rows of every group: group g's counts[g] rows from row first(g)
//   B   [L, N, K] (kNK) or         group g's matrix at B + g N K elements
//       [L, K, N] (kKN) row-major
//   C   [rows, N] row-major        group g's rows at the same first(g) as A's
//
//   first(g) = g * group_rows      padded: every group owns a block of group_rows rows, filled
//                                  from its start (the low-latency EP receive: [L, R x maxT, H])
//            = offsets[g]          packed: offsets in device memory, ascending, groups disjoint
//                                  (the high-throughput EP receive: rows per expert, one after another)
//
//            rows:   0 .......... first(1) ....... first(2) ..............
//   A, C           | group 0 |pad| group 1 |   pad  | group 2 | ...
//                    counts[0]     counts[1]          counts[2]
//
// The device reads counts (and offsets): the call never synchronizes, and a CUDA graph that
// captured it computes with the counts it finds at each replay. Rows of C outside every group
// (padding, rows past the last group) are never written.
//
// Counts that break the layout (a count < 0 or above group_rows, a group past `rows`, packed groups
// that overlap or descend) are found on the device before the GEMM: then nothing is written, and
// `status` (when given) holds the first bad group g as -(g + 1); 0 after a good call. Counts the
// host knows to be right need no status.
//
// Implementation: CUTLASS 4.2's sm90 grouped GEMM (the ptr-array TMA warp-specialized kernels with
// GroupProblemShape and no host problem shapes: each persistent CTA reads the group sizes on the
// device and replaces its TMA descriptors per group), behind a small kernel that turns counts and
// offsets into CUTLASS's per-group sizes, pointers and strides. Three tiles (GroupedTile below).
// Design, measurements and what is still missing: docs/grouped_gemm.md.
#pragma once
#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "tilewire/ops/gemm.hpp"  // BLayout
#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

// What the epilogue writes.
//   kStore   C = A B: [rows, N].
//   kSwiGlu  the SwiGLU of a gate-up projection, fused: B's N rows hold the gate's and the up
//            projection's rows interleaved in blocks of 8 (rows 16j .. 16j+7 of B_g are gate rows
//            8j .. 8j+7, rows 16j+8 .. 16j+15 are up rows 8j .. 8j+7: interleave_gate_up(),
//            ops/moe.hpp), and C is [rows, N / 2]:
//              C[r][8j + i] = bf16(silu(g) u),  g = (A B)[r][16j + i],  u = (A B)[r][16j + 8 + i]
//            in fp32 (g and u are not rounded to bf16 first), silu(g) = g / (1 + e^-g).
//            N % 16 == 0; B [N, K] (kNK) only. Saves writing A B and reading it back.
//   kRowTargets  C is a table of row addresses, void* [rows]: row p of A B (p = first(g) + the row
//            within group g, as C's rows would be) is stored at C[p], N bf16 (16-byte aligned;
//            any memory the GPU can store to, a peer's window included; null: not stored). The
//            same bits as kStore. B [N, K] (kNK) only, on the 64x128pp and 128x256coop tiles (the
//            tile rule's). An MoE's down GEMM stores each expert's output row straight into the
//            row its token's rank sums (EpBuffer::combine_slots).
enum class GroupedEpilogue { kStore, kSwiGlu, kRowTargets };
const char* grouped_epilogue_name(GroupedEpilogue e);                        // "store", "swiglu", "row_targets"
std::optional<GroupedEpilogue> parse_grouped_epilogue(const std::string& s);  // exactly those names

struct GroupedGemmArgs {
  const void* A = nullptr;       // [rows, K]
  const void* B = nullptr;       // [groups, N, K] (kNK) or [groups, K, N] (kKN)
  void* C = nullptr;             // [rows, N] ([rows, N / 2] with kSwiGlu; void* [rows] with kRowTargets);
                                 // must not overlap A or B
  const int* counts = nullptr;   // device [groups]: the rows of each group
  const int* offsets = nullptr;  // device [groups]: packed layout's first rows; null: padded layout
  int groups = 0;                // L >= 1
  int N = 0, K = 0;
  int rows = 0;                  // rows A and C hold (0: no rows on this rank; every count must be 0)
  int group_rows = 0;            // padded layout: rows per group's block (rows >= groups * group_rows);
                                 // packed layout: 0
  DType dtype = DType::kBFloat16;
  BLayout b_layout = BLayout::kNK;
  int* status = nullptr;         // device int or null: 0, or -(g + 1) for the first bad group g
  GroupedEpilogue epilogue = GroupedEpilogue::kStore;
};

// The CTA tile: rows x columns of C per tile (CUTLASS's kernels, grouped_sm90.cuh).
enum class GroupedTile {
  kAuto,         // by the rows a group is expected to hold (GroupedGemmConfig::rows_hint)
  k64x128pp,     // ping-pong: one consumer warpgroup per 64 x 128 tile; groups of a few rows (decode)
  k64x256pp,     // ping-pong on 64 x 256 tiles: twice the weights' columns per stage and tile
  k128x256coop,  // cooperative: two consumer warpgroups on a 128 x 256 tile, 1 x 2 clusters (A multicast)
};
const char* grouped_tile_name(GroupedTile t);                        // "auto", "64x128pp", "64x256pp", "128x256coop"
std::optional<GroupedTile> parse_grouped_tile(const std::string& s);  // exactly those names

struct GroupedGemmConfig {
  GroupedTile tile = GroupedTile::kAuto;
  int rows_hint = 0;     // rows per group the caller expects (kAuto picks the tile by it); 0: the
                         // layout's own: rows / groups
  int reserved_sms = 0;  // SMs left free (0 .. num_sms - 2): the grid is num_sms - reserved_sms CTAs
};

// The tile kAuto runs for these arguments (pure host logic).
GroupedTile grouped_tile_for(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg = {});

// Why a call cannot run; pure host logic (no GPU, counts unread). Rejects, each with its reason:
// groups < 1; N, K <= 0; rows < 0; null A, B, C or counts; rows TMA cannot address (K and N
// multiples of 8: 16-byte rows); pointers not 16-byte aligned; a padded layout whose groups do
// not fit in rows; group_rows set with offsets; C overlapping A or B; a dtype other than bf16; a
// bad config; kSwiGlu with N % 16 != 0 or B [K, N].
Status can_implement(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg = {});

// Enqueue the grouped GEMM on `stream` (current device). Throws tw::Error(kInvalidArgument) with
// can_implement()'s reason and writes nothing on bad arguments; kUnsupported on a device that is
// not sm_90; kCuda when a launch or the scratch allocation fails. Device memory: per-group
// arrays and CUTLASS's descriptors in the library's per-stream scratch (ops/gemm.hpp, "Device
// memory"), a few KiB per SM.
void grouped_gemm(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg, cudaStream_t stream);

}  // namespace tw
