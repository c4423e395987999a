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
// The collective has the interface of CUTLASS's thread-store epilogue for ptr-array kernels
// (epilogue::collective::DefaultEpilogueArray, schedule PtrArrayNoSmemWarpSpecialized) and runs
// inside CUTLASS's Sm90TmaWarpSpecializedAdapter like it: per group a D pointer and a row stride,
// no source operand, no shared memory (the mainloop gets the epilogue's share for stages).
#pragma once
#include <cuda_bf16.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>

namespace tw::grouped_impl {

// silu(g) x u in fp32 with the hardware's exp2 and reciprocal approximations (__expf, __fdividef:
// a few ulp in fp32, far below the output's bf16 rounding). The MoE's activation kernel
// (src/ops/moe/kernels.cu) uses expf and IEEE division, which cost several times the instructions:
// here they sit on the tile's critical path (the cooperative tile's epilogue runs after its
// mainloop, not under the next one). For g below about -87, 1 + e^-g exceeds 2^126 and the quotient
// is 0 (the true value is below 1e-36 u).
__device__ __forceinline__ float swiglu(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }

// StrideD_: CUTLASS's per-group stride pointer type for D (cute::Stride<int64_t, _1, _0>*).
template <class StrideD_>
class SwiGluEpilogueArray {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  // Only its types are used (ElementOutput etc. below); no alpha, no beta.
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<cutlass::bfloat16_t, 1, float, float>;
  using ElementOutput = cutlass::bfloat16_t;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementC = void;
  using StrideC = StrideD_;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using ElementD = cutlass::bfloat16_t;
  using StrideD = StrideD_;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static_assert(cute::rank(InternalStrideD{}) == 3, "D strides: [M, N, L]");

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  struct Arguments {
    ElementD** ptr_D = nullptr;  // per group: [M_g, N / 2]
    StrideD dD{};                // per group: (N / 2, 1, 0)
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr && args.dD != nullptr;
  }

  CUTLASS_HOST_DEVICE explicit SwiGluEpilogueArray(Params const& p) : params_(p) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

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
        // A 4 x 4 transpose across the quad, in place: lane q ends with output block 4 g + q whole
        // (v[s]: lane s's columns 2s, 2s + 1 of it), so it stores 16 bytes where it held four 4-byte
        // pairs. Two butterfly rounds: in round m a lane swaps with lane q ^ 2^m the two entries whose
        // bit m differs from its own q's. Why by hand: it needs no shared memory, which the mainloop's
        // stages hold; CUTLASS's thread-store epilogue stores each pair alone. The entries' indices
        // depend on the lane, so 2-way selects keep v in registers.
        CUTLASS_PRAGMA_UNROLL
        for (int m = 0; m < 2; ++m) {
          const int flip = ((q >> m) & 1) ^ 1;
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < 2; ++k) {
            const int lo = m == 0 ? 2 * k : k, hi = lo + (1 << m);  // v[lo], v[hi]: bit m 0 and 1
            const uint32_t got = __shfl_xor_sync(0xffffffffu, flip ? v[hi] : v[lo], 1 << m);
            if (flip) v[hi] = got;
            else v[lo] = got;
          }
        }
        const int gr = row0 + r, gc = col0 + c0 - 2 * q + 16 * (4 * g + q);  // row and gate column 0 of the block
        if (gr >= M || gc >= N) continue;  // N % 16 == 0: the block's up columns are in range too
        *reinterpret_cast<uint4*>(d + gr * ld + gc / 2) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }

 private:
  Params params_;
};

}  // namespace tw::grouped_impl
