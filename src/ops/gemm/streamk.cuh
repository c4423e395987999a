// src/ops/gemm/streamk.cuh — the plain GEMM's stream-K kernel: A [M, K] row-major, B as [N, K]
// (BLayout::kNK), C, one element type E (bf16 or fp16) for all three, fp32 accumulation. Four
// stream-K tiles per type (plan.hpp StreamKTile): (128, 256, 64) in 2x1 clusters, (128, 128, 64) and
// (128, 64, 64) in 1x1 clusters, and the (128, 64, 64) tile again on the swapped problem (below);
// one translation unit per type instantiates them (gemm_sm90_{bf16,f16}_nk_streamk.cu). Six more
// tiles, the swapped (64, 16 | 32 | 64, 64) and (128, 64, 64) and the plain (128, 128, 64) and
// (128, 112, 64), run CUTLASS's ping-pong kernel, data-parallel (CutlassGemm below with kPingpong;
// gemm_sm90_{bf16,f16}_nk_pingpong.cu), and so does the swapped (128, 128, 64) one
// (gemm_sm90_{bf16,f16}_nk_swapwide.cu); three 256-row tiles, (256, 160 | 112, 64) in 1x1 and
// (256, 160, 64) in 2x1 clusters, run the cooperative one (gemm_sm90_{bf16,f16}_nk_wide.cu). gemm.cu
// picks this kernel or the hook kernel (gemm_sm90.cuh) per call (plan.hpp kernel_for); the fused
// ops never come here.
//
// Swap-AB (k128x64swap, plan.hpp: M <= 64). wgmma's M is 64 rows per warpgroup, 128 per CTA here;
// its N may be as narrow as 8. A decode GEMM has M = 1..64 rows of A and thousands of rows of B,
// and only has to stream B at HBM speed. On C = A B^T a 128-row tile wastes 64-127 of its rows and
// the grid has only ceil(N / 64) tiles; on the swapped problem
//     D' [N, M] = B [N, K] x A [M, K]^T          (D' = C^T)
// N lies on the 128-wide dimension (ceil(N / 128) tiles, each streaming 128 rows of B) and M on
// the narrow one, like cuBLASLt (column-major) runs it. Same kernel, different operands:
//     kernel problem (M', N', K, L) = (N, M, K, 1)
//     A' = B: (M', K) K-contiguous ("RowMajor"),    StrideA (K, 1, N*K)
//     B' = A: (N', K) K-contiguous ("ColumnMajor"), StrideB (K, 1, M*K)
//     D'    : (M', N') M'-contiguous ("ColumnMajor"), StrideD (1, N, M*N): element (n, m) at
//             m*N + n, which is C [M, N] row-major.
// TMA: every global stride is a multiple of 16 bytes (K % 8 == 0 and N % 8 == 0, can_implement),
// the base pointers are 16-byte aligned; a box may be larger than the tensor (M = 1: a 64-row box
// of B' over one row of A, a 32-column box of D' over one column), TMA zero-fills the loads and
// clips the stores, as it already does for A at M < 128 on the unswapped tiles.
//
// All CUTLASS 4.2, nothing copied:
//   mainloop   cutlass::gemm::collective::CollectiveBuilder, KernelTmaWarpSpecializedCooperative
//              (one TMA producer warp, two consumer warpgroups of 64 rows each; CUTLASS's ping-pong
//              kernel refuses the stream-K scheduler), stages: what the epilogue leaves of smem.
//   epilogue   cutlass::epilogue::collective::CollectiveBuilder, TmaWarpSpecializedCooperative,
//              D = 1 * acc with no source (ElementC = void: no C loads, no C smem), D (type E) stored
//              through shared memory with TMA.
//   scheduler  CUTLASS's sm90 stream-K scheduler (PersistentTileSchedulerSm90StreamK) with one
//              addition, ResettingStreamK below: the last split of a tile resets the tile's counters
//              to 0. CUTLASS leaves them counted and zeroes them with a memset before every launch;
//              with the reset, a repeated layout on a stream needs no memset (scratch.hpp).
//
// Per CTA: the grid is num_sms - reserved_sms CTAs (persistent); each takes "work units" — a whole
// tile (data-parallel), or a K range of one or more tiles (stream-K / split-K). A unit that computes
// part of a tile's K loop writes or adds its fp32 (BLK_M, BLK_N) partial into the scratch and bumps
// the tile's counter (one per consumer warpgroup) by its K-tile count; the unit with the tile's
// last K tile waits until the counter equals its first K tile (in "deterministic" mode every
// partial is added in K order, so the result is the same bits every run), adds the partials to
// its accumulators and runs the epilogue. These waits are CUTLASS's and unbounded; they end
// because every unit a tile waits for belongs to a CTA of the same grid, and the grid is never
// larger than the SMs it is given (all CTAs resident unless another kernel holds SMs, which then
// delays, not blocks, them).
//
// GemmConfig: reserved_sms -> hw_info.sm_count; raster and swizzle -> CUTLASS's raster order and
// max swizzle, already put in the kernel's grid by the plan (plan.hpp streamk_order: exchanged
// axes for the swapped tile; streamk_swizzle keeps the swizzle from adding padding tiles);
// rank/nranks are ignored: rank rotation only orders tiles for the fused ops, which use the hook
// kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "../cutlass_sm90.cuh"  // CUTLASS's Hopper pieces, Sm90Launcher

#include "launch.hpp"
#include "scratch.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_impl {

// ------------------------------------------------------------------------------ scheduler
// CUTLASS's sm90 stream-K scheduler; fixup() additionally resets the tile's counter once the
// tile's last split has read it. Why that is safe: the last split waits (in Base::fixup) until
// the counter equals the sum of the K-tile counts of every earlier split of the tile, i.e. until
// all of them have arrived; nobody touches the counter after that in this launch, and the next
// kernel on the stream starts after this one ends.
template <class TileShape, class ClusterShape>
class ResettingStreamK : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;

 public:
  using Base::Base;
  using typename Base::Params;
  using typename Base::WorkTileInfo;

  template <class FrgTensorC>
  CUTLASS_DEVICE static void fixup(Params const& params, WorkTileInfo const& work, FrgTensorC& accumulators,
                                   uint32_t num_barriers, uint32_t barrier_idx) {
    Base::fixup(params, work, accumulators, num_barriers, barrier_idx);
    // One thread per consumer warpgroup: the one that waited on this warpgroup's counter.
    if (!Base::requires_fixup(params, work) || !Base::compute_epilogue(work, params) ||
        params.requires_separate_reduction() || threadIdx.x % cutlass::NumThreadsPerWarpGroup != 0)
      return;
    // The counters follow the partial tiles (CUTLASS's layout): split-K keeps a partial for every
    // output tile, stream-K one per stream-K tile.
    using Acc = typename FrgTensorC::value_type;
    const uint64_t partial_tiles = params.divmod_splits_.divisor > 1 ? params.units_per_problem_ : params.sk_tiles_;
    const size_t partial_bytes = Params::get_reduction_workspace_size(
        partial_tiles, cutlass::gemm::to_gemm_coord(TileShape{}), cutlass::sizeof_bits<Acc>::value);
    auto* counters = reinterpret_cast<typename Base::BarrierType*>(static_cast<uint8_t*>(params.reduction_workspace_) +
                                                                    partial_bytes);
    counters[Base::output_tile_index(params, work) * num_barriers + barrier_idx] = 0;
  }
};

struct ResettingStreamKTag {};  // selects ResettingStreamK in GemmUniversal (specialization below)

}  // namespace tw::gemm_impl

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShapeT, class ClusterShapeT, uint32_t Stages, class ProblemShapeType>
struct TileSchedulerSelector<tw::gemm_impl::ResettingStreamKTag, ArchTag, TileShapeT, ClusterShapeT, Stages,
                             ProblemShapeType> {
  using Scheduler = tw::gemm_impl::ResettingStreamK<TileShapeT, ClusterShapeT>;
};
}  // namespace cutlass::gemm::kernel::detail

namespace tw::gemm_impl {
namespace streamk {

// ------------------------------------------------------------------------------ the kernels
// Two CUTLASS kernels, the same operands: the cooperative kernel (two consumer warpgroups on one
// 128-row tile) with the stream-K scheduler (tilewire's ResettingStreamK), which can split K; and
// the ping-pong kernel (two consumer warpgroups on two 64-row tiles, taking turns at the tensor
// cores) with the persistent data-parallel scheduler (CUTLASS's ping-pong kernel refuses the
// stream-K one), for the ping-pong tiles (plan.hpp k64x*swap, k128x64swappp, k128x128pp, k128x112pp): no
// split, no scratch. A 128-row ping-pong tile is one warpgroup's, in two wgmma row blocks.
template <bool kPingpong>
struct Schedules {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = ResettingStreamKTag;
};
template <>
struct Schedules<true> {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using Scheduler = cutlass::gemm::PersistentScheduler;
};

// kSwapAB: the kernel computes D' = B A^T with D' column-major (header comment); A' and B' keep
// the layouts of the plain problem (both K-contiguous), only D's layout and who is who change.
// The epilogue builder takes a column-major D with TMA: its smem layout is M-major, the stores
// from registers are transposing stmatrix (SM90_U16x8_STSM_T), its auto epilogue tile for the
// cooperative schedule (128, 32) as in the plain 128x64 tile.
template <class Element, int kTileM, int kTileN, int kClusterSize, bool kSwap, bool kPingpong, int kClusterN = 1>
struct CutlassGemm {
  using E = Element;
  static constexpr bool kSwapAB = kSwap;
  static constexpr bool kStreamK = !kPingpong;  // the stream-K scheduler (else data-parallel)
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::Int<kClusterSize>, cute::Int<kClusterN>, cute::_1>;
  using LayoutA = cutlass::layout::RowMajor;     // A [M, K]; swapped: B [N, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // B [N, K] = K x N column-major; swapped: A [M, K]
  using LayoutD = std::conditional_t<kSwap, cutlass::layout::ColumnMajor,  // D' [N, M] = C [M, N]
                                     cutlass::layout::RowMajor>;           // C [M, N]
  static constexpr int kAlign = 16 / sizeof(E);  // TMA: 16-byte rows (can_implement checked K, N)

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlign, E, LayoutD, kAlign,
      typename Schedules<kPingpong>::Epilogue,
      cutlass::epilogue::fusion::LinearCombination<E, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, LayoutA, kAlign, E, LayoutB, kAlign, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedules<kPingpong>::Mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      typename Schedules<kPingpong>::Scheduler>;
  using Device = cutlass_sm90::Sm90Launcher<Kernel>;
  using Scheduler = typename Kernel::TileScheduler;
  static_assert(kPingpong || std::is_same_v<Scheduler, ResettingStreamK<TileShape, ClusterShape>>,
                "counters reset by the kernel");
  static_assert(cute::is_void_v<typename Kernel::ElementC>, "no source operand");
  // The strides run_streamk builds: K-contiguous A' and B', D' contiguous along M' when swapped.
  static_assert(std::is_same_v<typename Kernel::StrideA, cute::Stride<int64_t, cute::_1, int64_t>>);
  static_assert(std::is_same_v<typename Kernel::StrideB, cute::Stride<int64_t, cute::_1, int64_t>>);
  using StrideDWanted =
      std::conditional_t<kSwap, cute::Stride<cute::_1, int64_t, int64_t>, cute::Stride<int64_t, cute::_1, int64_t>>;
  static_assert(std::is_same_v<typename Kernel::StrideD, StrideDWanted>);
};

// plan.hpp names them; the tile sizes there are these.
template <class E, StreamKTile t>
using GemmOf = CutlassGemm<E, tile_shape(t).blk_m, tile_shape(t).blk_n, tile_shape(t).cluster_m, tile_shape(t).swapped,
                           tile_shape(t).pingpong, tile_shape(t).cluster_n>;

template <class G>
void run_streamk(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan, cudaStream_t stream) {
  using E = typename G::E;
  using Kernel = typename G::Kernel;
  using Scheduler = typename G::Scheduler;
  const int M = a.M, N = a.N, K = a.K;
  // The kernel's problem: C's when plain, (N, M) with A and B exchanged when swapped (header).
  const int Mk = G::kSwapAB ? N : M, Nk = G::kSwapAB ? M : N;

  typename G::Device::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {Mk, Nk, K, 1};
  args.mainloop.ptr_A = static_cast<const E*>(G::kSwapAB ? a.B : a.A);
  args.mainloop.dA = typename Kernel::StrideA{int64_t(K), cute::_1{}, int64_t(Mk) * K};  // (Mk, K) rows of K
  args.mainloop.ptr_B = static_cast<const E*>(G::kSwapAB ? a.A : a.B);
  args.mainloop.dB = typename Kernel::StrideB{int64_t(K), cute::_1{}, int64_t(Nk) * K};  // (Nk, K) rows of K
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<E*>(a.C);
  if constexpr (G::kSwapAB) {
    // D' (n, m) at n + m * N: column-major with leading dimension N = Mk.
    args.epilogue.dC = typename Kernel::StrideC{cute::_1{}, int64_t(N), int64_t(M) * N};
    args.epilogue.dD = typename Kernel::StrideD{cute::_1{}, int64_t(N), int64_t(M) * N};
  } else {
    args.epilogue.dC = typename Kernel::StrideC{int64_t(N), cute::_1{}, int64_t(M) * N};
    args.epilogue.dD = typename Kernel::StrideD{int64_t(N), cute::_1{}, int64_t(M) * N};
  }
  TW_CUDA_CHECK(cudaGetDevice(&args.hw_info.device_id));
  args.hw_info.sm_count = num_sms - cfg.reserved_sms;
  args.scheduler.max_swizzle_size = plan.swizzle;
  args.scheduler.raster_order =
      plan.raster == Raster::kAlongN ? Scheduler::RasterOrderOptions::AlongN : Scheduler::RasterOrderOptions::AlongM;
  int64_t splits = 1, decomposition = -1, reduction = -1;  // the scratch key's scheduler fields
  if constexpr (G::kStreamK) {
    using Decomp = typename Scheduler::DecompositionMode;
    using Reduction = typename Scheduler::ReductionMode;
    args.scheduler.splits = plan.decomposition == Decomposition::kSplitK ? plan.splits : 1;
    args.scheduler.decomposition_mode = plan.decomposition == Decomposition::kDataParallel ? Decomp::DataParallel
                                        : plan.decomposition == Decomposition::kSplitK     ? Decomp::SplitK
                                        : plan.decomposition == Decomposition::kStreamK    ? Decomp::StreamK
                                                                                           : Decomp::Heuristic;
    args.scheduler.reduction_mode = plan.deterministic ? Reduction::Deterministic : Reduction::Nondeterministic;
    splits = args.scheduler.splits;
    decomposition = int64_t(args.scheduler.decomposition_mode);
    reduction = int64_t(args.scheduler.reduction_mode);
  } else {
    TW_REQUIRE(plan.decomposition == Decomposition::kDataParallel || plan.decomposition == Decomposition::kHeuristic,
               kInvalidArgument, "gemm: the ping-pong tiles (swap64x*, *pp) are data-parallel only");
  }

  typename G::Device op;
  cutlass::Status st = op.can_implement(args);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kInvalidArgument,
             std::string("gemm (stream-K): CUTLASS rejects the problem: ") + cutlassGetStatusString(st));

  // Scratch: partial tiles + counters, cached per stream. The counters need zeroing only when the
  // last launch on this scratch had another layout (scratch.hpp). M and N are C's; plan.tile tells
  // the swapped tile's layout apart.
  const size_t bytes = G::Device::get_workspace_size(args);
  const ScratchKey key{int64_t(plan.tile), M, N, K, args.hw_info.sm_count, splits, decomposition, plan.swizzle,
                       int64_t(args.scheduler.raster_order), reduction};
  std::optional<ScratchLease> lease;
  void* workspace = nullptr;
  if (bytes > 0) {
    lease.emplace(lease_scratch(stream, bytes));
    workspace = lease->data();
    if (!lease->counters_zero(key)) {
      st = Kernel::initialize_workspace(args, workspace, stream);
      TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
                 std::string("gemm (stream-K): zeroing the scratch counters failed: ") + cutlassGetStatusString(st));
    }
  }
  // update(): the kernel parameters (TMA descriptors, scheduler) and the shared memory opt-in,
  // without initialize()'s memset.
  st = op.update(args, workspace);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
             std::string("gemm (stream-K): kernel parameters: ") + cutlassGetStatusString(st));
  st = op.run(stream, plan.pdl);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
             std::string("gemm (stream-K): launch failed: ") + cutlassGetStatusString(st) + " (" +
                 cudaGetErrorString(cudaGetLastError()) + ")");
  if (lease) lease->enqueued(key);
}

// The ping-pong tiles' kernels for element type E (their own translation units:
// gemm_sm90_{bf16,f16}_nk_pingpong.cu).
template <class E>
void launch_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                     cudaStream_t stream) {
  switch (plan.tile) {
    case StreamKTile::k64x16swap: return run_streamk<GemmOf<E, StreamKTile::k64x16swap>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k64x32swap: return run_streamk<GemmOf<E, StreamKTile::k64x32swap>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k64x64swap: return run_streamk<GemmOf<E, StreamKTile::k64x64swap>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k128x64swappp:
      return run_streamk<GemmOf<E, StreamKTile::k128x64swappp>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k128x128pp: return run_streamk<GemmOf<E, StreamKTile::k128x128pp>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k128x112pp: return run_streamk<GemmOf<E, StreamKTile::k128x112pp>>(a, cfg, num_sms, plan, stream);
    default: break;  // the swapped tiles of swapwide_pingpong: launch_pingpong_swapwide
  }
  TW_REQUIRE(false, kInvalidArgument, "gemm: not a ping-pong tile of gemm_sm90_*_nk_pingpong.cu");
}

// The swapped ping-pong tile whose narrow side covers M = 65..128 in one tile (plan.hpp
// swapwide_pingpong; gemm_sm90_{bf16,f16}_nk_swapwide.cu).
template <class E>
void launch_pingpong_swapwide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                              cudaStream_t stream) {
  switch (plan.tile) {
    case StreamKTile::k128x128swappp:
      return run_streamk<GemmOf<E, StreamKTile::k128x128swappp>>(a, cfg, num_sms, plan, stream);
    default: break;
  }
  TW_REQUIRE(false, kInvalidArgument, "gemm: not a swapped ping-pong tile of gemm_sm90_*_nk_swapwide.cu");
}

// The 256-row cooperative tiles for element type E (gemm_sm90_{bf16,f16}_nk_wide.cu, which enable
// CuTe's extended wgmma atoms for their N = 160 and 112).
template <class E>
void launch_wide(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan, cudaStream_t stream) {
  switch (plan.tile) {
    case StreamKTile::k256x160c1: return run_streamk<GemmOf<E, StreamKTile::k256x160c1>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k256x160c2: return run_streamk<GemmOf<E, StreamKTile::k256x160c2>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k256x112c1: return run_streamk<GemmOf<E, StreamKTile::k256x112c1>>(a, cfg, num_sms, plan, stream);
    case StreamKTile::k256x64n2: return run_streamk<GemmOf<E, StreamKTile::k256x64n2>>(a, cfg, num_sms, plan, stream);
    default: break;
  }
  TW_REQUIRE(false, kInvalidArgument, "gemm: not a 256-row tile");
}

// The stream-K kernel of plan.tile for element type E (cutlass::bfloat16_t or cutlass::half_t).
template <class E>
void launch(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan, cudaStream_t stream) {
  using Wide = GemmOf<E, StreamKTile::k128x256c2>;
  using Narrow = GemmOf<E, StreamKTile::k128x128c1>;
  using Skinny = GemmOf<E, StreamKTile::k128x64c1>;
  using Swapped = GemmOf<E, StreamKTile::k128x64swap>;
  static_assert(Wide::kAlign == 8 && Narrow::kAlign == 8 && Skinny::kAlign == 8 && Swapped::kAlign == 8,
                "can_implement checks 16-byte rows");
  static_assert(Swapped::kSwapAB && !Skinny::kSwapAB);
  switch (plan.tile) {
    case StreamKTile::k128x256c2: run_streamk<Wide>(a, cfg, num_sms, plan, stream); return;
    case StreamKTile::k128x128c1: run_streamk<Narrow>(a, cfg, num_sms, plan, stream); return;
    case StreamKTile::k128x64c1: run_streamk<Skinny>(a, cfg, num_sms, plan, stream); return;
    case StreamKTile::k128x64swap: run_streamk<Swapped>(a, cfg, num_sms, plan, stream); return;
    default: break;  // the ping-pong tiles: launch_pingpong; the 256-row ones: launch_wide
  }
  TW_REQUIRE(false, kInvalidArgument, "gemm: unknown stream-K tile");
}

}  // namespace streamk
}  // namespace tw::gemm_impl
