// src/ops/grouped_gemm/swiglu_epilogue.cuh — the grouped GEMM's SwiGLU epilogue
// (GroupedEpilogue::kSwiGlu): out = silu(gate) x up straight from the accumulators, so the gate-up
// projection of an MoE FFN writes the activation [rows, N / 2] instead of h [rows, N] for a separate
// kernel to read back.
//
// Why it can stay in registers: B's rows interleave the gate's and the up projection's in blocks of
// 8 (rows 16j .. 16j+7 are gate rows 8j .. 8j+7, rows 16j+8 .. 16j+15 the up rows), and a wgmma
// accumulator gives each thread whole 8-column blocks of a row: the thread that holds (r, 16j + i)
// also holds (r, 16j + 8 + i), and (r, 16j + i + 1) beside it. So each thread forms its outputs
// alone, two adjacent columns at a time, with no shared memory. The 4 lanes that share a row then
// trade them by shuffles, so that each lane stores one whole 8-column output block (16 bytes) where
// it held four 4-byte pairs of four blocks: a quarter of the store instructions, and each warp's
// store covers whole 32-byte sectors. The loop below checks the pairing on the tile's own
// partition; the checks fold to constants at compile time on Hopper's layouts and trap on any other.
//
// The collective is a ThreadStoreEpilogue (thread_store_epilogue.cuh).
#pragma once
#include <cuda_bf16.h>

#include "thread_store_epilogue.cuh"

namespace tw::grouped_impl {

// silu(g) x u in fp32 with the hardware's exp2 and reciprocal approximations (__expf, __fdividef:
// a few ulp in fp32, far below the output's bf16 rounding). The MoE's activation kernel
// (src/ops/moe/kernels.cu) uses expf and IEEE division, which cost several times the instructions:
// here they sit on the tile's critical path (the cooperative tile's epilogue runs after its
// mainloop, not under the next one). For g below about -87, 1 + e^-g exceeds 2^126 and the quotient
// is 0 (the true value is below 1e-36 u).
__device__ __forceinline__ float swiglu(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }

// StrideD_: CUTLASS's per-group stride pointer type for D (cute::Stride<int64_t, _1, _0>*). ptr_D
// per group: [M_g, N / 2]; dD: (N / 2, 1, 0).
template <class StrideD_>
class SwiGluEpilogueArray : public ThreadStoreEpilogue<StrideD_> {
  using Base = ThreadStoreEpilogue<StrideD_>;
  using Base::params_;

 public:
  using typename Base::Params;
  CUTLASS_HOST_DEVICE explicit SwiGluEpilogueArray(Params const& p) : Base(p) {}

  // One tile: blk_coord's (m, n) tile of A B, whose columns are B's rows (gate and up
  // interleaved), becomes columns [n BLK_N / 2, (n + 1) BLK_N / 2) of D; rows past the group's M and
  // columns past N are not written.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "static tile");
    constexpr int kBlkM = size<0>(BlockShapeMNK{}), kBlkN = size<1>(BlockShapeMNK{});
    static_assert(kBlkN % 16 == 0, "the tile holds whole gate-up blocks");
    const int M = int(get<0>(problem_shape_mnkl)), N = int(get<1>(problem_shape_mnkl));
    const int l = int(get<3>(blk_coord_mnkl));
    const int row0 = int(get<0>(blk_coord_mnkl)) * kBlkM, col0 = int(get<1>(blk_coord_mnkl)) * kBlkN;

    // (row, column) within the tile of each accumulator this thread holds.
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCc = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlkM>{}, Int<kBlkN>{})));
    static_assert(decltype(size(tCc))::value == decltype(size(acc))::value, "one coordinate per accumulator");
    constexpr int kFrag = decltype(size(acc))::value;
    const int c0 = get<1>(tCc(0));
    if (c0 % 16 >= 8 || c0 % 2 != 0) __trap();  // the first accumulator opens a gate column pair
    // The quad's 4 lanes hold the same rows, lane q columns 2q, 2q + 1 of each 8-column block.
    const int lane = int(threadIdx.x) & 31, q = lane & 3;
    const int r0 = get<0>(tCc(0)), quad = lane & ~3;
    if (__shfl_sync(0xffffffffu, r0, quad) != r0 || __shfl_sync(0xffffffffu, c0, quad) + 2 * q != c0) __trap();

    __nv_bfloat16* d = reinterpret_cast<__nv_bfloat16*>(params_.ptr_D[l]);
    const int64_t ld = get<0>(params_.dD[l]);
    // Fragment index of the gate pair (r, 16 j + 2 q) of row half h and output block j:
    // i = 2 h + 8 j (the partners (r, c + 1), (r, c + 8), (r, c + 9) at i + 1, i + 4, i + 5). Checked
    // below against the partition; the checks fold to constants.
    static_assert(kFrag % 32 == 0, "whole groups of 4 output blocks per thread (BLK_N % 64 == 0)");
    CUTLASS_PRAGMA_UNROLL
    for (int g = 0; g < kFrag / 32; ++g) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int i0 = 32 * g + 2 * h, r = get<0>(tCc(i0));
        // v[t]: output block j = 4 g + t, this lane's columns 2q, 2q + 1 of it.
        uint32_t v[4];
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < 4; ++t) {
          const int i = i0 + 8 * t, dc = 16 * (4 * g + t);
          if (get<1>(tCc(i)) - c0 != dc || get<1>(tCc(i + 1)) - c0 != dc + 1 || get<1>(tCc(i + 4)) - c0 != dc + 8 ||
              get<1>(tCc(i + 5)) - c0 != dc + 9 || get<0>(tCc(i)) != r || get<0>(tCc(i + 1)) != r ||
              get<0>(tCc(i + 4)) != r || get<0>(tCc(i + 5)) != r)
            __trap();
          const __nv_bfloat162 p =
              __floats2bfloat162_rn(swiglu(acc(i), acc(i + 4)), swiglu(acc(i + 1), acc(i + 5)));
          v[t] = reinterpret_cast<const uint32_t&>(p);
        }
        quad_transpose(v, q);  // lane q: output block 4 g + q whole
        const int gr = row0 + r, gc = col0 + c0 - 2 * q + 16 * (4 * g + q);  // row and gate column 0 of the block
        if (gr >= M || gc >= N) continue;  // N % 16 == 0: the block's up columns are in range too
        *reinterpret_cast<uint4*>(d + gr * ld + gc / 2) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }
};

}  // namespace tw::grouped_impl
