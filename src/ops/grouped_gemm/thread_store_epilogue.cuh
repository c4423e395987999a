// src/ops/grouped_gemm/thread_store_epilogue.cuh — what the grouped GEMM's own epilogues share
// (swiglu_epilogue.cuh, row_targets_epilogue.cuh): the interface of CUTLASS's thread-store epilogue
// for ptr-array kernels (epilogue::collective::DefaultEpilogueArray, schedule
// PtrArrayNoSmemWarpSpecialized), run inside CUTLASS's Sm90TmaWarpSpecializedAdapter like it: per
// group a D pointer and a row stride, no source operand, no shared memory (the mainloop gets the
// epilogue's share for stages); and the quad transpose that lets each lane store 16 bytes.
//
// Why by hand: CUTLASS's thread-store epilogue stores each thread's 4-byte column pairs alone and
// takes no per-row address; these epilogues compute in registers (SwiGLU) or store each row where
// a table says (an MoE's output rows straight into their tokens' ranks).
#pragma once
#include <cuda_bf16.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>

namespace tw::grouped_impl {

// StrideD_: CUTLASS's per-group stride pointer type for D (cute::Stride<int64_t, _1, _0>*).
template <class StrideD_>
class ThreadStoreEpilogue {
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
    ElementD** ptr_D = nullptr;  // per group (each epilogue says what it points at)
    StrideD dD{};                // per group
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

  CUTLASS_HOST_DEVICE explicit ThreadStoreEpilogue(Params const& p) : params_(p) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

 protected:
  Params params_;
};

// A 4 x 4 transpose across a quad (the 4 lanes that share an accumulator row; q = lane & 3), in
// place: v[t] holds this lane's 4 bytes of block t on entry; on exit v[s] holds lane s's 4 bytes
// of block q, so the lane holds block q whole and stores 16 bytes where it held four 4-byte
// pieces of four blocks (a quarter of the store instructions; each warp's store covers whole
// 32-byte sectors). Two butterfly rounds: in round m a lane swaps with lane q ^ 2^m the two
// entries whose bit m differs from its own q's. The entries' indices depend on the lane, so 2-way
// selects keep v in registers; no shared memory, which the mainloop's stages hold.
CUTLASS_DEVICE void quad_transpose(uint32_t (&v)[4], int q) {
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
}

}  // namespace tw::grouped_impl
