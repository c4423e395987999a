// src/ops/grouped_gemm/swiglu_epilogue.cuh — the grouped GEMM's SwiGLU epilogue
// (GroupedEpilogue::kSwiGlu): out = silu(gate) x up straight from the accumulators, so the gate-up
// projection of an MoE FFN writes the activation [rows, N / 2] instead of h [rows, N] for a separate
// kernel to read back.
//
// Why it can stay in registers: B's rows interleave the gate's and the up projection's in blocks of
// 8 (rows 16j .. 16j+7 are gate rows 8j .. 8j+7, rows 16j+8 .. 16j+15 the up rows), and a wgmma
// accumulator gives each thread whole 8-column blocks of a row: the thread that holds (r, 16j + i)
// also holds (r, 16j + 8 + i), and (r, 16j + i + 1) beside it. So each thread forms its outputs
// alone, two adjacent columns at a time (one 4-byte store), with no shared memory and no exchange.
// The loop below checks that pairing on the tile's own partition; the checks fold to constants at
// compile time on Hopper's layouts and trap on any other.
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

// silu(g) x u in fp32, the formula of the MoE's own activation kernel (src/ops/moe/kernels.cu).
__device__ __forceinline__ float swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

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

    __nv_bfloat16* d = reinterpret_cast<__nv_bfloat16*>(params_.ptr_D[l]);
    const int64_t ld = get<0>(params_.dD[l]);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kFrag; ++i) {
      const int r = get<0>(tCc(i)), dc = get<1>(tCc(i)) - c0;  // dc: a constant once unrolled
      if (dc % 16 >= 8 || dc % 2 != 0) continue;                // taken with the gate pair it belongs to
      // The partners: (r, c + 1) gate, (r, c + 8) and (r, c + 9) up, at i + 1, i + 4, i + 5.
      if (i + 5 >= kFrag || get<1>(tCc(i + 1)) - c0 != dc + 1 || get<1>(tCc(i + 4)) - c0 != dc + 8 ||
          get<1>(tCc(i + 5)) - c0 != dc + 9 || get<0>(tCc(i + 1)) != r || get<0>(tCc(i + 4)) != r ||
          get<0>(tCc(i + 5)) != r)
        __trap();
      const int gr = row0 + r, gc = col0 + c0 + dc;  // A B's row and gate column
      if (gr >= M || gc >= N) continue;              // N % 16 == 0: the pair's up columns are in range too
      const __nv_bfloat162 v = __floats2bfloat162_rn(swiglu(acc(i), acc(i + 4)), swiglu(acc(i + 1), acc(i + 5)));
      *reinterpret_cast<__nv_bfloat162*>(d + gr * ld + (gc / 16) * 8 + gc % 8) = v;
    }
  }

 private:
  Params params_;
};

}  // namespace tw::grouped_impl
