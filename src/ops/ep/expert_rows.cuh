// src/ops/ep/expert_rows.cuh — one received row made from its local experts' output rows: the
// sum the MoE FFN's scatter writes and the combine that takes the experts' rows where they lie
// (EpExpertRows) sends. One function for both, so the two paths give the same bits.
//
//   row r, 16-byte chunk c = sum over slots j = 0..topk-1 (ascending) with pos_of[r x topk + j] >= 0
//                            of w[r x topk + j] x yg[pos][c], fmas in fp32, rounded once to bf16
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "tilewire/device/ptx.cuh"

namespace tw::ops::ep {

// acc += wj x the 8 bf16 of raw (one fma each), and the rounding at the end (8 fp32 to 8 bf16,
// round to nearest even; also the MoE activation's): the two steps every caller shares, so the
// sums agree bit for bit.
__device__ __forceinline__ void expert_rows_fma(float (&acc)[8], float wj, const uint4& raw) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    acc[2 * i] = __fmaf_rn(wj, v.x, acc[2 * i]);
    acc[2 * i + 1] = __fmaf_rn(wj, v.y, acc[2 * i + 1]);
  }
}
__device__ __forceinline__ uint4 pack_bf16x8(const float (&acc)[8]) {
  uint4 out;
  auto* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return out;
}

// A thread per chunk, reading the row's slots itself (the scatter).
__device__ __forceinline__ uint4 expert_rows_chunk(const uint4* yg, const int* pos_of, const float* w, int topk,
                                                   long long r, long long vecs, long long c) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < topk; ++j) {
    const int pos = pos_of[r * topk + j];
    if (pos < 0) continue;
    expert_rows_fma(acc, w[r * topk + j], ptx::ld_nc_v4(reinterpret_cast<const char*>(yg + (long long)pos * vecs + c)));
  }
  return pack_bf16x8(acc);
}

// A warp per row (the combine): the row's n slots with a place, ascending, already in a list
// (pos[i], w[i]), so each chunk costs n loads and no test.
__device__ __forceinline__ uint4 expert_rows_listed(const uint4* yg, const int* pos, const float* w, int n,
                                                    long long vecs, long long c) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i)
    expert_rows_fma(acc, w[i], ptx::ld_nc_v4(reinterpret_cast<const char*>(yg + (long long)pos[i] * vecs + c)));
  return pack_bf16x8(acc);
}

}  // namespace tw::ops::ep
