// src/ops/moe/kernels.hpp — the MoE FFN's own kernels (kernels.cu), between the EP and grouped-GEMM
// calls moe.cpp makes: the high-throughput receive put in expert-major order and back, and the
// activation. Every launch is asynchronous on `stream`; counts are read on the device.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tw::ops::moe {

// High throughput: the received rows in expert-major order. Entry e = r x topk + j of the receive
// (row r < *num_recv, slot j) with local expert l = idx[e] in [0, L) gets the place
//   pos(e) = offsets[l] + (entries of expert l before e, in (row, slot) order)
// so experts' rows are packed one after another, each in receive order: the same on every run.
// Writes counts[l], offsets[l] (L groups), perm[pos] = r, and pos_of[e] = pos (-1 for the others).
// More than max_rows placed entries in all: *overflow = their number, counts 0 and every pos_of
// -1 (the GEMMs compute nothing, the rows go back as zeros); else *overflow = 0.
// max_entries: the most entries a receive holds (capacity x topk), which sizes the grid and the
// scratch (place_chunks(max_entries) x L ints in each array of PlaceScratch).
struct PlaceScratch {
  int* chunk_counts = nullptr;
  int* chunk_base = nullptr;
};
int place_chunks(long long max_entries);
void place_rows(const int32_t* idx, const int* num_recv, int topk, int L, int max_rows, long long max_entries,
                const PlaceScratch& w, int* counts, int* offsets, int* perm, int* pos_of, int* overflow,
                cudaStream_t stream);
// The same placement over a sender's own N tokens (N on the host) and all E experts, for
// EpExpertPlaces::send_pos: idx [N, topk] int32 or int64 global ids (others than [0, E) get -1),
// pos_of [N x topk]; no perm, no overflow (max_rows is every entry). counts and offsets [E].
void place_own_rows(const void* idx, bool idx64, int N, int topk, int E, const PlaceScratch& w, int* counts,
                    int* offsets, int* pos_of, cudaStream_t stream);

// The direct dispatch's receive (EpExpertPlaces): each received row r < *num_recv is at the place
// of its first slot with a place; copy it to its other places: xg[pos_of[r x topk + j]] for the
// later slots j with pos_of >= 0. Rows of H bf16.
void copy_to_places(void* xg, const int* pos_of, const int* num_recv, int topk, int H, int max_recv,
                    cudaStream_t stream);

// xg[pos_of[r x topk + j]] = x[r] for every received row r < *num_recv and slot j with a place
// (pos_of >= 0; place_rows): every place of xg gets its row, each row read once. Rows of H bf16
// (H % 8 == 0). max_recv: the rows the receive holds (the grid covers them; the count decides).
void gather_rows(const void* x, const int* pos_of, const int* num_recv, int topk, int H, int max_recv, void* xg,
                 cudaStream_t stream);

// y[r] = sum over slots j (ascending) with pos_of[r x topk + j] >= 0 of w[r x topk + j] x yg[pos],
// fp32, rounded once to bf16, for r < *num_recv: each received row's experts, weighted.
void scatter_rows(const void* yg, const int* pos_of, const float* w, const int* num_recv, int topk, int H,
                  int max_rows, void* y, cudaStream_t stream);

// act[row][f] = SiLU(h[row][f]) x h[row][F + f] in fp32 (SiLU(g) = g / (1 + e^-g)), rounded once to
// bf16, for the rows of every group: group g's counts[g] rows from first(g) = offsets[g], or
// g x group_rows when offsets is null. h [rows, 2F], act [rows, F], F % 8 == 0. max_count: the
// most rows a group can hold (the grid covers it).
void silu_mul(const void* h, const int* counts, const int* offsets, int group_rows, int L, int F, int max_count,
              void* act, cudaStream_t stream);

// out [L, 2F, H] = w with each expert's gate rows and up rows interleaved in blocks of 8
// (tw::interleave_gate_up, tilewire/ops/moe.hpp). H % 8 == 0, F % 8 == 0.
void interleave_gate_up(const void* w, void* out, int L, int F, int H, cudaStream_t stream);

}  // namespace tw::ops::moe
