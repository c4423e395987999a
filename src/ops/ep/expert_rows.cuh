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

__device__ __forceinline__ uint4 expert_rows_chunk(const uint4* yg, const int* pos_of, const float* w, int topk,
                                                   long long r, long long vecs, long long c) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < topk; ++j) {
    const int pos = pos_of[r * topk + j];
    if (pos < 0) continue;
    const float wj = w[r * topk + j];
    const uint4 raw = ptx::ld_nc_v4(reinterpret_cast<const char*>(yg + (long long)pos * vecs + c));
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(h[i]);
      acc[2 * i] = __fmaf_rn(wj, v.x, acc[2 * i]);
      acc[2 * i + 1] = __fmaf_rn(wj, v.y, acc[2 * i + 1]);
    }
  }
  uint4 out;
  auto* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return out;
}

}  // namespace tw::ops::ep
