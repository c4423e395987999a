// src/ops/gemm/gemm_sm90.cuh — the sm90a GEMM kernel type, templated on element, B layout and
// epilogue hook. Included only by the .cu files that instantiate it (gemm_sm90_*.cu, tests):
// every include of this header that names a new (Element, Layout, Hook) is one more multi-minute
// nvcc instantiation.
//
// Built from CUTLASS 4.2 pieces, none copied:
//   mainloop   cutlass::gemm::collective::CollectiveBuilder, KernelTmaWarpSpecializedCooperative:
//              1 producer warpgroup (one warp issues TMA for A and B into a stage pipeline of
//              mbarriers), 2 consumer warpgroups doing wgmma on a (128, 256, 64) tile, 64 rows
//              each; as many stages as fit after the hook's shared memory. The tile's width and
//              cluster are a template parameter (HookTileT): (128, 256) in 2x1 clusters for the
//              plain GEMM and the fused ops, (128, 64) without clusters for the fused owner kernel
//              at decode-sized M (gemm_allreduce/plan.hpp).
//   kernel     cutlass::gemm::kernel::GemmUniversal (sm90 cooperative), persistent.
//   scheduler  RotatedScheduler below: CUTLASS's static persistent scheduler with the tile order
//              replaced by tw::gemm_impl::TileSchedule (scheduler.hpp: raster, swizzle, rank rotation,
//              reserved SMs).
//   epilogue   HookEpilogue below, wrapped in CUTLASS's Sm90TmaWarpSpecializedAdapter (the
//              operator-style epilogue path, no epilogue smem pipeline): it hands the final
//              accumulators of each tile to the hook (epilogue_hook.cuh).
// Why CUTLASS and not hand-written: the TMA/mbarrier/wgmma pipeline is what CUTLASS's collective
// does best and the target is cuBLAS parity; the only parts tilewire needs to own are the tile
// order and the epilogue, which plug in here. The plain GEMM's hook (StoreC, epilogue_hook.cuh)
// stages the tile in shared memory and sends it with bulk copies: 5-8% faster than register-direct
// stores at K = 4096 (docs/gemm.md, "Measured").
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include <cutlass/epilogue/collective/detail.hpp>

#include "../cutlass_sm90.cuh"  // CUTLASS's Hopper pieces, Sm90Launcher

#include "epilogue_hook.cuh"
#include "launch.hpp"
#include "scheduler.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/device/ptx.cuh"
#include "tilewire/device/wait.cuh"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_impl {

// A hook kernel tile: 128 rows (two consumer warpgroups of 64 rows: 256 threads call the hook),
// kN columns, clusters of kClusterM CTAs along M (RotatedScheduler walks cluster units).
template <int kN, int kClusterM_>
struct HookTileT {
  static constexpr int kBlkN = kN, kClusterM = kClusterM_;
  using Shape = cute::Shape<cute::_128, cute::Int<kN>, cute::_64>;
  using Cluster = cute::Shape<cute::Int<kClusterM_>, cute::_1, cute::_1>;
};
using DefaultHookTile = HookTileT<kBlkN, kClusterM>;  // launch.hpp's kBlkM x kBlkN, kClusterM
static_assert(cute::size<0>(DefaultHookTile::Shape{}) == kBlkM, "launch.hpp states the tile the kernel is built with");

// ------------------------------------------------------------------------------ scheduler
struct RotatedSchedulerTag {};  // selects RotatedScheduler in GemmUniversal (specialization below)

// CUTLASS's sm90 static persistent scheduler (it keeps the pipeline/fixup/k-tile interface the
// cooperative kernel calls) with a different work list: cluster group c = blockIdx.x / 2 walks
// work indices c, c + ctas, ... of TileSchedule; the CTA at x = blockIdx.x % 2 of the cluster takes
// M-tile 2*um + x. The grid is 1-D: ctas * 2 CTAs.
class RotatedScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  struct Arguments : Base::Arguments {
    int rank = 0, nranks = 1;
    int rounds = 0;  // GemmConfig::walk_rounds: the staggered walk (scheduler.hpp)
    int chunk = 0;   // GemmConfig::walk_chunk: the interleaved shards (scheduler.hpp)
    Gate gate{};  // launch.hpp: allgather_gemm's wait per A row block (flags null: none)
  };
  struct Params : Base::Params {
    TileSchedule sched{};
    Gate gate{};
  };

  template <class ProblemShapeMNKL, class TileShapeT, class ClusterShapeT>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShapeT tile_shape,
                                        ClusterShapeT cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& args, void* workspace = nullptr,
                                        const uint32_t epilogue_subtile = 1, uint32_t ktile_start_alignment_count = 1u) {
    static_assert(cute::size<1>(ClusterShapeT{}) == 1 && cute::size<2>(ClusterShapeT{}) == 1,
                  "RotatedScheduler: clusters along M only");
    Params p;
    static_cast<Base::Params&>(p) = Base::to_underlying_arguments(problem_shape_mnkl, tile_shape, cluster_shape, hw_info,
                                                                  args, workspace, epilogue_subtile,
                                                                  ktile_start_alignment_count);
    const Raster raster = args.raster_order == Base::RasterOrderOptions::AlongN ? Raster::kAlongN : Raster::kAlongM;
    // hw_info.sm_count already excludes GemmConfig::reserved_sms (the launcher sets it).
    // A pulled in batches (Gate): the schedule walks the logical A's row tiles, m_total rows.
    const int rows = args.gate.batches > 1 ? args.gate.m_total : int(cute::get<0>(problem_shape_mnkl));
    p.sched = make_schedule(rows, cute::get<1>(problem_shape_mnkl),
                            cute::size<0>(tile_shape), cute::size<1>(tile_shape), cute::size<0>(cluster_shape), raster,
                            args.max_swizzle_size, args.rank, args.nranks, hw_info.sm_count, 0, args.rounds,
                            args.chunk);
    p.gate = args.gate;
    if (p.gate.orders()) {  // the work list starts at the unit of the gate's first row
      // Rounded up: a unit that starts before first_row holds the previous shard's last tile,
      // which arrives last (it comes round at the end of the walk).
      const int t0 = p.gate.first_row / (int)cute::size<0>(tile_shape);
      const TileCoord u{(t0 + p.sched.cluster_m - 1) / p.sched.cluster_m, 0};
      p.sched.rotation = u.m < p.sched.units_m ? p.sched.order_of_unit(u) : 0;
    }
    return p;
  }

  template <class ProblemShapeMNKL, class BlockShape, class ClusterShapeT>
  static dim3 get_grid_shape(Params const& params, ProblemShapeMNKL, BlockShape, ClusterShapeT,
                             cutlass::KernelHardwareInfo, Arguments const&, bool = true) {
    return dim3(params.sched.ctas * params.sched.cluster_m, 1, 1);
  }

  CUTLASS_DEVICE explicit RotatedScheduler(Params const& params)
      : Base(params),
        sched_(params.sched),
        gate_(params.gate.flags != nullptr || params.gate.ring.on() ? &params.gate : nullptr),
        batch_tiles_(params.gate.batches > 1 ? params.gate.batch_rows / kBlkM : 0) {
#if defined(__CUDA_ARCH__)
    group_ = int(blockIdx.x) / sched_.cluster_m;
    cta_in_cluster_ = int(blockIdx.x) % sched_.cluster_m;
#endif
  }

  CUTLASS_DEVICE WorkTileInfo get_current_work() const {
    const int w = sched_.work_of_cta(group_, step_);
    const bool rec = gate_ != nullptr && gate_->ring.on();
    if (rec) trace_consumer(w);
    if (w < 0) return WorkTileInfo::invalid_work_tile();
    const TileCoord t = sched_.tile_of_work(w, cta_in_cluster_);
    if (gate_ != nullptr && gate_->flags != nullptr && t.m < sched_.tiles_m) wait_gate(t.m);
    if (rec) trace_producer(t);
    // Batches: the logical row tile t.m is row tile t.m % batch_tiles of batch t.m / batch_tiles
    // (the last cluster's padding CTA, past the last tile, stays in batch 0, beyond its rows).
    if (batch_tiles_ > 0 && t.m < sched_.tiles_m) return {t.m % batch_tiles_, t.n, t.m / batch_tiles_, true};
    return {t.m, t.n, 0, true};
  }
  template <class ClusterShapeT>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShapeT) {
    return get_current_work();
  }
  CUTLASS_DEVICE void advance_to_next_work(uint32_t advance_count = 1) { step_ += int(advance_count); }
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo w, Pipeline&, PipelineState) {
    return fetch_next_work(w);
  }
  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t advance_count = 1) const {
    return sched_.work_of_cta(group_, step_ + int(advance_count)) < 0;
  }

 private:
  // Only the mainloop's load warp (warp 0 of the producer warpgroup: its TMA loads are the only
  // reads of A) waits; the other roles reach a gated tile through the smem pipeline, whose
  // mbarrier waits suspend in hardware. Lane 0 polls with a pause between polls, so that a GEMM
  // waiting for rows leaves the flags' L2 lines to the push that sets them, then every lane
  // acquires the flag itself and fences so that its TMA loads see the rows (ptx.cuh's proxy
  // rule). A gate already open costs one acquire load per load-warp thread per tile.
  static constexpr uint32_t kGatePollNs = 256;
  CUTLASS_DEVICE void wait_gate(int tm) const {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x >= 32) return;
    const int src = tm * kBlkM / gate_->rows_per_src;
    if (src == gate_->skip) return;
    const uint64_t* f = gate_->flags + src;
    const uint64_t want = gate_->want;
    if (threadIdx.x == 0 && ptx::ld_acquire_sys(f) < want)
      dev::bounded_spin_silent(
          gate_->ctx, "allgather_gemm.rows", want,
          [&] {
            ptx::nanosleep(kGatePollNs);
            return ptx::ld_acquire_sys(f);
          },
          [&](uint64_t x) { return x >= want; });
    __syncwarp();
    (void)ptx::ld_acquire_sys(f);
    ptx::fence_proxy_async_global();
#endif
  }

  // Gate::ring's events. Each role of the cooperative kernel asks for work with its own scheduler
  // object, in the same order: thread 0 is the mainloop's load warp (its tile is past the gate:
  // the loads start), thread 128 the first consumer warpgroup (asking for step s: step s - 1's
  // epilogue is issued).
  static constexpr int kLoadThread = 0, kConsumerThread = 128;
  CUTLASS_DEVICE void trace_producer(TileCoord t) const {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x != kLoadThread) return;
    const uint64_t now = ptx::globaltimer();
    if (step_ == 0) trace::emit(gate_->ring, trace::EventKind::kKernelStart, blockIdx.x, now);
    if (t.m < sched_.tiles_m)
      trace::emit(gate_->ring, trace::EventKind::kMmaStart, uint32_t(t.m * sched_.units_n + t.n), now);
#endif
  }
  CUTLASS_DEVICE void trace_consumer(int w) const {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x != kConsumerThread || step_ == 0) return;
    const uint64_t now = ptx::globaltimer();
    const TileCoord prev = sched_.tile_of_work(sched_.work_of_cta(group_, step_ - 1), cta_in_cluster_);
    if (prev.m < sched_.tiles_m)
      trace::emit(gate_->ring, trace::EventKind::kMmaEnd, uint32_t(prev.m * sched_.units_n + prev.n), now);
    if (w < 0) trace::emit(gate_->ring, trace::EventKind::kKernelEnd, blockIdx.x, now);
#endif
  }

  TileSchedule sched_;
  const Gate* gate_ = nullptr;  // in the kernel's parameters (grid constant); null: no gate, no trace
  int batch_tiles_ = 0;         // row tiles per batch of a pulled A (0: one batch)
  int group_ = 0, cta_in_cluster_ = 0, step_ = 0;
};

}  // namespace tw::gemm_impl

// GemmUniversal picks its scheduler through this selector: RotatedSchedulerTag -> RotatedScheduler.
namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShapeT, class ClusterShapeT, uint32_t Stages, class ProblemShapeType>
struct TileSchedulerSelector<tw::gemm_impl::RotatedSchedulerTag, ArchTag, TileShapeT, ClusterShapeT, Stages,
                             ProblemShapeType> {
  using Scheduler = tw::gemm_impl::RotatedScheduler;
};
}  // namespace cutlass::gemm::kernel::detail

namespace tw::gemm_impl {

// ------------------------------------------------------------------------------ epilogue
// Operator-style epilogue (the form Sm90TmaWarpSpecializedAdapter wraps): skip tiles wholly
// outside C, else build the TileView and call the hook.
template <class Hook>
class HookEpilogue {
 public:
  using SharedStorage = typename Hook::SharedStorage;
  using TensorStorage = SharedStorage;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  // No source operand (D = hook(A*B)); the kernel asks for these names, nothing reads them.
  using ElementC = void;
  using ElementD = float;
  using StrideC = cute::Stride<int64_t, cute::_1, int64_t>;
  using StrideD = StrideC;
  struct ThreadEpilogueOp {  // GemmUniversalAdapter names it; the hook is the epilogue op
    using ElementAccumulator = float;
    using ElementOutput = float;
  };
  struct Arguments {
    Hook hook{};
    int m_total = 0;  // batched A (Gate::batches > 1): the logical rows of C; batch l's rows at l M
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  // Constructed by the consumer threads when they start (sm90 cooperative kernel): the first
  // tile's mainloop starts here.
  CUTLASS_HOST_DEVICE explicit HookEpilogue(Params const& params) : params_(params) {
#if defined(__CUDA_ARCH__)
    if (clock_on()) t_prev_ = ptx::globaltimer();
#endif
  }

  // After the CTA's last tile, every consumer thread (the adapter's store_tail below).
  CUTLASS_DEVICE void tail() {
    if constexpr (requires(const Hook& h) { h.tail(0); }) params_.hook.tail(int(threadIdx.x) % 256);
  }

  // Hooks with a communication warp (Hook::kCommWarp): the kernel's otherwise idle epilogue-load
  // warp (producer warpgroup, warp 2; 40 registers) calls Hook::comm once per tile, in the same
  // tile order as the consumers, while the mainloop runs (HookCollective::load below).
  static constexpr bool kCommWarp = requires { Hook::kCommWarp; };
  template <class CtaTileMNK, class ProblemShapeMNKL, class BlkCoordMNKL>
  CUTLASS_DEVICE void comm(ProblemShapeMNKL problem_shape_mnkl, BlkCoordMNKL blk_coord_mnkl, int lane, char* smem) {
    if constexpr (kCommWarp) {
      using namespace cute;
      const int M = get<0>(problem_shape_mnkl), N = get<1>(problem_shape_mnkl);
      const int tile_m = get<0>(blk_coord_mnkl), tile_n = get<1>(blk_coord_mnkl);
      const int row0 = tile_m * int(size<0>(CtaTileMNK{})), col0 = tile_n * int(size<1>(CtaTileMNK{}));
      const int step = comm_step_++;
      if (row0 >= M || col0 >= N) return;  // the padding CTA's tile: no hook call either
      params_.hook.comm(tile_m, tile_n, step, comm_seq_++, lane, reinterpret_cast<SharedStorage*>(smem));
    }
  }
  CUTLASS_DEVICE static void init_smem(SharedStorage& s) {
    if constexpr (requires { Hook::init_smem(s); }) Hook::init_smem(s);
  }

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value && is_static<FrgLayout>::value, "static tile and fragment");
    const int M = get<0>(problem_shape_mnkl), N = get<1>(problem_shape_mnkl);
    constexpr int kM = size<0>(BlockShapeMNK{}), kN = size<1>(BlockShapeMNK{});
    // Batch l (a pulled A: M rows per batch, a multiple of kM) is rows l M.. of C, up to m_total.
    const int l = int(get<3>(blk_coord_mnkl)), in_batch = int(get<0>(blk_coord_mnkl)) * kM;
    const int row0 = l * M + in_batch, tile_m = row0 / kM, tile_n = get<1>(blk_coord_mnkl);
    const int col0 = tile_n * kN;
    const int rows = min(M - in_batch, params_.m_total > 0 ? params_.m_total - row0 : kM);
    const int step = step_++;
    if (rows <= 0 || col0 >= N) return;  // padding CTA of the last cluster: no tile, no hook

    // (row, col) within the tile of every accumulator element of this thread: partition the
    // identity tensor of the tile exactly as the accumulators are partitioned.
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor coord = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kM>{}, Int<kN>{})));
    static_assert(decltype(size(coord))::value == decltype(size(accumulators))::value,
                  "one coordinate per accumulator");
    auto& acc = const_cast<Tensor<FrgEngine, FrgLayout>&>(accumulators);
    TileView<Tensor<FrgEngine, FrgLayout>, decltype(coord), SharedStorage> view{
        tile_m, tile_n, row0, col0, min(rows, kM), min(N - col0, kN), thread_idx, step, seq_++, t_prev_, acc, coord,
        reinterpret_cast<SharedStorage*>(smem)};
    params_.hook(view);
    if (clock_on()) t_prev_ = ptx::globaltimer();  // the next tile's mainloop starts now
  }

 private:
  // Clocks only when the hook asks (tracing on): one uniform branch per tile otherwise.
  CUTLASS_HOST_DEVICE bool clock_on() const {
    if constexpr (requires(const Hook& h) { h.clock_on(); }) return params_.hook.clock_on();
    else return false;
  }
  Params params_;
  uint64_t t_prev_ = 0;
  // The CTA's position in its walk, counted here rather than recomputed by the hooks: finding the
  // step of a tile is O(1) but the number of valid tiles before it is O(step) scheduler math per
  // call, which a trace showed growing the consumers' per-tile epilogue by ~0.27 us per step
  // (3.1 us at step 0, 7.3 us at step 14; docs/gemm_allreduce.md). Each role (consumers,
  // epilogue-load warp) has its own object and sees every work tile of the CTA in order, so each
  // counts its own.
  int step_ = 0, seq_ = 0;            // consumers
  int comm_step_ = 0, comm_seq_ = 0;  // epilogue-load (comm) warp
};

// CUTLASS's adapter for operator-style epilogues, plus a store_tail that reaches the hook's tail().
template <class Hook>
struct HookCollective : cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<HookEpilogue<Hook>> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<HookEpilogue<Hook>>;
  using Params = typename Base::Params;
  using TensorStorage = typename Base::TensorStorage;

  // Every thread constructs one at kernel start (before the kernel's cluster sync), consumers and
  // the epilogue-load warp again later: thread 0 alone initializes the hook's shared barriers, once.
  CUTLASS_DEVICE HookCollective(Params const& params, TensorStorage& smem) : Base(params, smem) {
    if constexpr (HookEpilogue<Hook>::kCommWarp) {
      if (threadIdx.x == 0) HookEpilogue<Hook>::init_smem(smem);
    }
  }

  CUTLASS_DEVICE bool is_producer_load_needed() const { return HookEpilogue<Hook>::kCommWarp; }

  template <class LoadPipeline, class LoadState, class ProblemShapeMNKL, class CtaTileMNK, class CtaCoordMNKL,
            class TiledMma>
  CUTLASS_DEVICE auto load(LoadPipeline, LoadState state, ProblemShapeMNKL problem_shape_mnkl, CtaTileMNK,
                           CtaCoordMNKL cta_coord_mnkl, TiledMma, int lane_idx, TensorStorage& smem,
                           int /*subtile_idx*/ = -1) {
    this->template comm<CtaTileMNK>(problem_shape_mnkl, cta_coord_mnkl, lane_idx, reinterpret_cast<char*>(&smem));
    return state;
  }

  template <class LoadPipeline, class LoadState, class StorePipeline, class StoreState>
  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadState load_state, StorePipeline, StoreState store_state) {
    this->tail();
    return cute::make_tuple(load_state, store_state);
  }
};

// ------------------------------------------------------------------------------ the kernel
template <class Element>
struct CutlassElement;
template <>
struct CutlassElement<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CutlassElement<__half> {
  using type = cutlass::half_t;
};

// Element: __nv_bfloat16 or __half (A, B, C). Layout: tw::BLayout. Hook: see epilogue_hook.cuh.
// Tile: a HookTileT.
template <class Element, BLayout kLayout, class Hook, class Tile = DefaultHookTile>
struct Sm90Gemm {
  using E = typename CutlassElement<Element>::type;
  using LayoutA = cutlass::layout::RowMajor;  // A [M, K]
  // B's (N, K, batch) stride: [N, K] is K-contiguous, [K, N] N-contiguous; the batch stride is a
  // static 0, so every batch of a pulled A (Gate::batches) reads the one B, and CuTe leaves the
  // batch out of B's TMA descriptor (a TMA stride cannot be 0).
  using StrideB = std::conditional_t<kLayout == BLayout::kNK, cute::Stride<int64_t, cute::_1, cute::_0>,
                                     cute::Stride<cute::_1, int64_t, cute::_0>>;
  static constexpr int kAlign = 16 / sizeof(E);  // elements per 16 bytes: TMA's row alignment

  using Epilogue = HookCollective<Hook>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, LayoutA, kAlign, E, StrideB, kAlign, float,
      typename Tile::Shape, typename Tile::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      RotatedSchedulerTag>;
  using Device = cutlass_sm90::Sm90Launcher<Kernel>;
  static_assert(std::is_same_v<typename Kernel::TileScheduler, RotatedScheduler>, "the tile order is tilewire's");
};

// Packed (rows, cols, batch=1) stride of type Stride: one of the first two modes is the static 1
// (a static batch stride stays as it is).
template <class Stride>
Stride packed_stride(int rows, int cols) {
  Stride s{};
  if constexpr (cute::is_static<decltype(cute::get<1>(s))>::value) cute::get<0>(s) = int64_t(cols);  // cols contiguous
  else cute::get<1>(s) = int64_t(rows);                                                              // rows contiguous
  if constexpr (!cute::is_static<decltype(cute::get<2>(s))>::value) cute::get<2>(s) = int64_t(rows) * cols;
  return s;
}

// The launch every instantiation shares: checked arguments (gemm.cpp ran can_implement) -> CUTLASS
// arguments -> initialize -> run. `num_sms` is the device's SM count.
template <class Element, BLayout kLayout, class Tile = DefaultHookTile, class Hook>
void run_sm90(const GemmArgs& a, const GemmConfig& cfg, const Hook& hook, int num_sms, Raster raster, void* workspace,
              cudaStream_t stream, const Gate& gate = {}) {
  using G = Sm90Gemm<Element, kLayout, Hook, Tile>;
  using E = typename G::E;
  using StrideA = typename G::Kernel::StrideA;
  using StrideB = typename G::Kernel::StrideB;
  const auto M = a.M, N = a.N, K = a.K;

  typename G::Device::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {M, N, K, 1};
  args.mainloop.ptr_A = static_cast<const E*>(a.A);
  args.mainloop.dA = packed_stride<StrideA>(M, K);
  args.mainloop.ptr_B = static_cast<const E*>(a.B);
  args.mainloop.dB = packed_stride<StrideB>(N, K);
  args.epilogue.hook = hook;
  if (gate.batches > 1) {  // A pulled in batches (Gate): one B for all of them
    args.mode = cutlass::gemm::GemmUniversalMode::kBatched;
    args.problem_shape = {gate.batch_rows, N, K, gate.batches};
    cute::get<2>(args.mainloop.dA) = gate.batch_stride;
    args.epilogue.m_total = M;
  }
  TW_CUDA_CHECK(cudaGetDevice(&args.hw_info.device_id));
  args.hw_info.sm_count = num_sms - cfg.reserved_sms;
  args.scheduler.max_swizzle_size = cfg.swizzle;
  args.scheduler.raster_order = raster == Raster::kAlongN ? RotatedScheduler::RasterOrderOptions::AlongN
                                                          : RotatedScheduler::RasterOrderOptions::AlongM;
  args.scheduler.rank = cfg.rank;
  args.scheduler.nranks = cfg.nranks;
  args.scheduler.rounds = cfg.walk_rounds;
  args.scheduler.chunk = cfg.walk_chunk;
  args.scheduler.gate = gate;

  typename G::Device op;
  cutlass::Status st = op.can_implement(args);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kInvalidArgument,
             std::string("gemm: CUTLASS rejects the problem: ") + cutlassGetStatusString(st));
  st = op.initialize(args, workspace, stream);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
             std::string("gemm: kernel initialize failed: ") + cutlassGetStatusString(st) +
                 " (shared memory opt-in or TMA descriptor)");
  st = op.run(stream);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
             std::string("gemm: launch failed: ") + cutlassGetStatusString(st) + " (" +
                 cudaGetErrorString(cudaGetLastError()) + ")");
}

}  // namespace tw::gemm_impl

