// src/ops/gemm/epilogue_hook.cuh — the per-tile epilogue hook of the sm90 GEMM (contract:
// include/tilewire/ops/gemm.hpp, "Epilogue hook contract") and the default hook StoreC.
//
// A hook is a trivially copyable struct (it travels in the kernel's parameters) with
//   using SharedStorage = ...;                     // its shared memory (an empty struct if none)
//   template <class View> __device__ void operator()(View const& v) const;
// The kernel calls operator() once per output tile, from all 256 consumer threads, with a TileView:
//   v.tile_m, v.tile_n      tile indices (rows tile_m*BLK_M .., cols tile_n*BLK_N ..)
//   v.row0, v.col0          first row / column of the tile in C
//   v.rows, v.cols          rows / columns of the tile inside C (BLK_M, BLK_N except at the edges)
//   v.thread_idx            0..255: this thread's index among the consumer threads
//   v.acc                   this thread's fp32 accumulators (cute register tensor), final
//   v.coord(i)              (row, col) *within the tile* of v.acc(i); compile-time layout
//   v.smem                  Hook::SharedStorage of this CTA (not shared with the mainloop)
// Element i of this thread is inside C iff get<0>(v.coord(i)) < v.rows && get<1>(v.coord(i)) < v.cols.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

namespace tw::gemm_impl {

// Named barrier id a hook may use for its 256 consumer threads, in CUTLASS's *user* numbering:
// cutlass::arch::NamedBarrier(256, kHookBarrierId) adds ReservedNamedBarrierCount (8 in CUTLASS
// 4.2), so this is hardware barrier 8 of 16. Neither the cooperative kernel nor its mainloop uses
// user barriers.
inline constexpr int kHookBarrierId = 0;
static_assert(kHookBarrierId + static_cast<int>(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier) < 16,
              "named barrier ids end at 15");

template <class AccTensor, class CoordTensor, class SharedStorage>
struct TileView {
  int tile_m, tile_n;
  int row0, col0;
  int rows, cols;
  int thread_idx;
  AccTensor& acc;
  CoordTensor coord;
  SharedStorage* smem;
};

// The default hook: round the accumulators to Element and store them to C[M, N] (row-major,
// leading dimension ldc). Pairs of adjacent columns go out as one 4-byte store (the wgmma
// fragment holds (r, c), (r, c+1) in consecutive registers); anything else, one element at a time.
template <class Element>
struct StoreC {
  struct SharedStorage {};
  Element* C = nullptr;
  long long ldc = 0;

  template <class View>
  CUTLASS_DEVICE void operator()(View const& v) const {
    using namespace cute;
    using Pair = cute::array_aligned<Element, 2, 4>;
    Element* tile = C + (long long)v.row0 * ldc + v.col0;
    constexpr int kN = decltype(size(v.acc))::value;
    static_assert(kN % 2 == 0, "wgmma fragments hold column pairs");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kN; i += 2) {
      const int r = get<0>(v.coord(i)), c = get<1>(v.coord(i));
      const int r1 = get<0>(v.coord(i + 1)), c1 = get<1>(v.coord(i + 1));
      if (r1 == r && c1 == c + 1 && (c % 2) == 0) {  // a column pair (always, for wgmma fragments)
        if (r >= v.rows || c >= v.cols) continue;
        Element* p = tile + (long long)r * ldc + c;
        if (c + 1 < v.cols) {  // 4-byte aligned: C, ldc*2 and col0*2 are multiples of 16
          Pair q;
          q[0] = static_cast<Element>(v.acc(i));
          q[1] = static_cast<Element>(v.acc(i + 1));
          *reinterpret_cast<Pair*>(p) = q;
        } else {
          *p = static_cast<Element>(v.acc(i));
        }
      } else {
        if (r < v.rows && c < v.cols) tile[(long long)r * ldc + c] = static_cast<Element>(v.acc(i));
        if (r1 < v.rows && c1 < v.cols) tile[(long long)r1 * ldc + c1] = static_cast<Element>(v.acc(i + 1));
      }
    }
  }
};

}  // namespace tw::gemm_impl
