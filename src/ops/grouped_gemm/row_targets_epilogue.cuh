// src/ops/grouped_gemm/row_targets_epilogue.cuh — the grouped GEMM's row-targets epilogue
// (GroupedEpilogue::kRowTargets): row p of C (p = the group's first row + the row within it) is
// stored at targets[p], an address of N bf16 anywhere the GPU can store to (a peer's window: an
// MoE's down GEMM stores each expert's output row straight into the row its token's rank sums).
// The same bits as kStore (each fp32 sum rounded once to bf16, round to nearest even).
//
// A wgmma accumulator gives each thread columns 2q, 2q + 1 (q = lane & 3) of every 8-column block
// of its rows r and r + 8; the quad's 4 lanes hold a block's 8 columns. After quad_transpose each
// lane holds one whole block of a row, and stores 16 bytes at that row's target. The loop checks
// the pairing on the tile's own partition; the checks fold to constants at compile time on
// Hopper's layouts and trap on any other.
#pragma once
#include <cuda_bf16.h>

#include "thread_store_epilogue.cuh"

namespace tw::grouped_impl {

// ptr_D per group: the group's first entry of the targets table (char* const*, one per row);
// dD unused.
template <class StrideD_>
class RowTargetsEpilogueArray : public ThreadStoreEpilogue<StrideD_> {
  using Base = ThreadStoreEpilogue<StrideD_>;
  using Base::params_;

 public:
  using typename Base::Params;
  CUTLASS_HOST_DEVICE explicit RowTargetsEpilogueArray(Params const& p) : Base(p) {}

  // One tile: blk_coord's (m, n) tile of A B, each of its rows at that row's target (null: not
  // stored); rows past the group's M and columns past N are not written.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "static tile");
    constexpr int kBlkM = size<0>(BlockShapeMNK{}), kBlkN = size<1>(BlockShapeMNK{});
    static_assert(kBlkN % 32 == 0, "whole groups of 4 column blocks");
    const int M = int(get<0>(problem_shape_mnkl)), N = int(get<1>(problem_shape_mnkl));
    const int l = int(get<3>(blk_coord_mnkl));
    const int row0 = int(get<0>(blk_coord_mnkl)) * kBlkM, col0 = int(get<1>(blk_coord_mnkl)) * kBlkN;

    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCc = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlkM>{}, Int<kBlkN>{})));
    static_assert(decltype(size(tCc))::value == decltype(size(acc))::value, "one coordinate per accumulator");
    constexpr int kFrag = decltype(size(acc))::value;
    static_assert(kFrag % 16 == 0, "whole groups of 4 column blocks per thread");
    const int lane = int(threadIdx.x) & 31, q = lane & 3, quad = lane & ~3;
    const int r0 = get<0>(tCc(0)), c0 = get<1>(tCc(0));
    if (c0 % 8 != 2 * q) __trap();  // lane q holds columns 2q, 2q + 1 of a block
    if (__shfl_sync(0xffffffffu, r0, quad) != r0 || __shfl_sync(0xffffffffu, c0, quad) + 2 * q != c0) __trap();

    char* const* targets = reinterpret_cast<char* const*>(params_.ptr_D[l]);
    // The thread's two rows (h = 0, 1: r0 and r0 + 8) and their targets, loaded once per tile.
    char* row_at[2];
    CUTLASS_PRAGMA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int gr = row0 + get<0>(tCc(2 * h));
      row_at[h] = gr < M ? targets[gr] : nullptr;
    }
    // Fragment index of the pair (r + 8h, 8k + 2q) of column block k: 4k + 2h (its partner
    // column at + 1). Checked against the partition; the checks fold to constants.
    CUTLASS_PRAGMA_UNROLL
    for (int g = 0; g < kFrag / 16; ++g) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int i0 = 16 * g + 2 * h, r = get<0>(tCc(i0));
        uint32_t v[4];  // v[t]: column block 4 g + t, this lane's columns 2q, 2q + 1 of it
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < 4; ++t) {
          const int i = i0 + 4 * t, dc = 8 * (4 * g + t);
          if (get<1>(tCc(i)) - c0 != dc || get<1>(tCc(i + 1)) - c0 != dc + 1 || get<0>(tCc(i)) != r ||
              get<0>(tCc(i + 1)) != r || r != get<0>(tCc(2 * h)))
            __trap();
          const __nv_bfloat162 p = __floats2bfloat162_rn(acc(i), acc(i + 1));
          v[t] = reinterpret_cast<const uint32_t&>(p);
        }
        quad_transpose(v, q);  // lane q: column block 4 g + q whole
        const int gc = col0 + c0 - 2 * q + 8 * (4 * g + q);
        if (row_at[h] == nullptr || gc >= N) continue;  // N % 8 == 0: the whole block is in range
        *reinterpret_cast<uint4*>(row_at[h] + size_t(gc) * 2) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }
};

}  // namespace tw::grouped_impl
