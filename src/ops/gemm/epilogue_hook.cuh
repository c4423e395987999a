// src/ops/gemm/epilogue_hook.cuh — the per-tile epilogue hook of the sm90 GEMM and the default
// hook StoreC. Internal to the library: the fused ops are its only users.
//
// The contract (the plain GEMM uses StoreC, which writes the tile to C):
//   * called exactly once per output tile that intersects [0, M) x [0, N), by all 256 consumer
//     threads of the CTA that computed it, after the last wgmma of that tile has retired
//     (accumulators final, fp32, in registers, in the wgmma C-fragment layout);
//   * it gets the tile coordinates (tile_m, tile_n), the first row/column, how many rows/columns
//     are inside C (edge tiles are partial), the fragment, the identity (row, col) of every
//     fragment element, and a pointer to the hook's own shared memory (Hook::SharedStorage, carved
//     out of the mainloop's stages; empty for StoreC);
//   * in flight meanwhile: the producer warp is already TMA-loading the *next* tiles' A/B into the
//     mainloop stages (the hook must not touch them); other CTAs run other tiles; nothing is
//     ordered against other ranks;
//   * barriers: none is held. The hook may synchronise the 256 consumer threads with
//     cutlass::arch::NamedBarrier(256, tw::gemm_impl::kHookBarrierId); never __syncthreads() (the
//     producer warp does not take part). Tiles that lie wholly outside C (the padding CTA of a
//     2x1 cluster on the last M tile) do not call the hook, and all consumer threads of a CTA
//     take the same branch;
//   * the hook's global stores are ordinary weak stores: they are visible to the next kernel on
//     the stream; making them visible to a peer earlier is the hook's job (release fence +
//     signal, tilewire/device/signal.cuh).
//
// A hook is a trivially copyable struct (it travels in the kernel's parameters) with
//   using SharedStorage = ...;                     // its shared memory (an empty struct if none)
//   template <class View> __device__ void operator()(View const& v) const;
// The kernel calls operator() once per output tile, from all 256 consumer threads, with a TileView:
//   v.tile_m, v.tile_n      tile indices (rows tile_m*BLK_M .., cols tile_n*BLK_N ..)
//   v.row0, v.col0          first row / column of the tile in C
//   v.rows, v.cols          rows / columns of the tile inside C (BLK_M, BLK_N except at the edges)
//   v.thread_idx            0..255: this thread's index among the consumer threads
//   v.step                  this CTA's work step of the tile (0, 1, .. over the scheduler's work
//                           list, counting the padding CTA's steps that have no tile and no call)
//   v.seq                   how many hook calls this CTA made before this one (0, 1, ..)
//   v.acc                   this thread's fp32 accumulators (cute register tensor), final
//   v.coord(i)              (row, col) *within the tile* of v.acc(i); compile-time layout
//   v.smem                  Hook::SharedStorage of this CTA (not shared with the mainloop)
//   v.t_mma_start_ns        %globaltimer when this CTA's consumers began the tile's mainloop (the end
//                           of the previous hook call, or consumer start), when the hook asks for
//                           clocks (bool clock_on() const returning true); else 0
// Element i of this thread is inside C iff get<0>(v.coord(i)) < v.rows && get<1>(v.coord(i)) < v.cols.
// Optional: `CUTLASS_DEVICE void tail(int thread_idx) const`, called once by every consumer thread
// after the CTA's last tile (drain asynchronous stores, flush deferred work).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cute/arch/copy_sm90_tma.hpp>

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
  int step, seq;
  uint64_t t_mma_start_ns;
  AccTensor& acc;
  CoordTensor coord;
  SharedStorage* smem;
};

// Register-direct store of the tile: round the accumulators to Element and store them to C[M, N]
// (row-major, leading dimension ldc) straight from the wgmma fragment. Pairs of adjacent columns go
// out as one 4-byte store (the fragment holds (r, c), (r, c+1) in consecutive registers). Simple,
// no shared memory, but each warp store touches 8 rows x 16 bytes and the consumers wait for the
// stores to issue before the next tile: measured 0.89-0.92x cuBLAS at K = 4096 (docs/gemm.md).
// Kept for hooks that store to several places
// (the fused op's peers) and as the measured baseline.
template <class Element>
struct StoreCDirect {
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


// Named barrier over the 256 consumer threads (the hook's own id; see kHookBarrierId).
CUTLASS_DEVICE void hook_bar() { cutlass::arch::NamedBarrier::sync(256, kHookBarrierId); }

// The default hook: the tile goes through shared memory and leaves as asynchronous bulk copies
// (TMA, cp.async.bulk shared -> global), one per row of C, so the consumers start the next tile's
// mainloop while the copies drain; only the next tile's epilogue waits for them to have *read*
// the buffer. kCols columns at a time of a kTileCols-wide tile: 256 (one pass, 66 KiB of shared
// memory: 3 mainloop stages fit) or 128 (two passes, 34 KiB: 4 stages fit, the second pass waits
// for the first pass's reads); the decode tile (64 columns) in one pass of 18 KiB.
// Rows are padded by 16 bytes: the fragment's 4-byte pairs of 8 rows land in 8 distinct bank
// quads (conflict-free), and every row start stays 16-byte aligned for the bulk copy.
// Why hand-written and not CUTLASS's TMA epilogue collective: the hook contract hands the fused
// ops the accumulators in registers; this is the hook-shaped version of that epilogue.
template <class Element, int kCols = 256, int kTileCols_ = 256>
struct StoreC {
  static constexpr int kRows = 128, kTileCols = kTileCols_, kPitch = kCols + 8;
  static_assert(kTileCols % kCols == 0 && (kPitch * sizeof(Element)) % 16 == 0, "row starts 16-byte aligned");
  struct SharedStorage {
    alignas(128) Element buf[kRows * kPitch];
  };
  Element* C = nullptr;
  long long ldc = 0;

  template <class View>
  CUTLASS_DEVICE void operator()(View const& v) const {
    using namespace cute;
    Element* buf = v.smem->buf;
    const int tid = v.thread_idx;
    constexpr int kN = decltype(size(v.acc))::value;
    static_assert(kN * 256 == kRows * kTileCols, "the kernel's tile is kRows x kTileCols");
    CUTLASS_PRAGMA_UNROLL
    for (int h = 0; h < kTileCols / kCols; ++h) {
      // The previous copies out of buf (last pass or last tile) must have read it.
      if (tid < kRows) tma_store_wait<0>();
      hook_bar();
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kN; i += 2) {
        const int r = get<0>(v.coord(i)), c = get<1>(v.coord(i)) - h * kCols;
        if (c >= 0 && c < kCols) {
          cute::array_aligned<Element, 2, 4> q;
          q[0] = static_cast<Element>(v.acc(i));
          q[1] = static_cast<Element>(v.acc(i + 1));
          *reinterpret_cast<cute::array_aligned<Element, 2, 4>*>(buf + r * kPitch + c) = q;
        }
      }
      tma_store_fence();  // the generic-proxy writes above become visible to the bulk copy
      hook_bar();
      const int c0 = h * kCols;
      if (tid < v.rows && c0 < v.cols) {  // one row per thread; v.cols - c0 is a multiple of 8
        const int cols = min(kCols, v.cols - c0);
        SM90_BULK_COPY_S2G::copy(buf + tid * kPitch, C + (long long)(v.row0 + tid) * ldc + v.col0 + c0,
                                 cols * int(sizeof(Element)));
        tma_store_arrive();
      }
    }
  }
  // After the CTA's last tile: the bulk copies must have read shared memory before the CTA exits.
  CUTLASS_DEVICE void tail(int thread_idx) const {
    if (thread_idx < kRows) cute::tma_store_wait<0>();
  }
};

}  // namespace tw::gemm_impl
