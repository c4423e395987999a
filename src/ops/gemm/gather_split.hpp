// src/ops/gemm/gather_split.hpp — which rows of A_gathered a tile of the pulled GEMM copies when
// the GEMM writes the gathered A itself (gather_hook.cuh): a row block's rows split evenly over
// its column tiles, each row to exactly one tile. Host and device (tests/cpu/gemm_scheduler_test.cpp).
#pragma once

#ifndef TW_HD
#if defined(__CUDACC__)
#define TW_HD __host__ __device__
#else
#define TW_HD
#endif
#endif

namespace tw::gemm_impl {

struct RowSpan {
  int lo = 0, hi = 0;  // rows [lo, hi); empty when hi <= lo
};

// Row block [row0, row0 + rows), column tile tile_n of n_tiles >= 1.
TW_HD constexpr RowSpan gather_rows_of_tile(int row0, int rows, int tile_n, int n_tiles) {
  return {row0 + rows * tile_n / n_tiles, row0 + rows * (tile_n + 1) / n_tiles};
}

}  // namespace tw::gemm_impl
