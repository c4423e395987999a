// src/ops/grouped_gemm/grouped_sm90.cuh — the grouped GEMM's kernels (tilewire/ops/grouped_gemm.hpp)
// for one B layout: CUTLASS's sm90 grouped GEMM behind a one-CTA kernel that turns the device
// counts into CUTLASS's per-group arguments. Instantiated per (B layout, tile) in
// grouped_sm90_bf16_{nk,kn}_{pp,pp256,coop}.cu, so a 2-core build compiles them in parallel.
//
// All CUTLASS 4.2, nothing copied:
//   mainloop   CollectiveBuilder with KernelPtrArrayTmaWarpSpecialized{Pingpong,Cooperative} and
//              pointer layouts (RowMajor* A, ColumnMajor* B for kNK: K-contiguous; RowMajor* B for
//              kKN: N-contiguous): one TMA descriptor pair per CTA in global workspace, its address
//              and extents replaced whenever the CTA's next tile is in another group.
//   epilogue   CollectiveBuilder, PtrArrayTmaWarpSpecialized{Pingpong,Cooperative}, D = 1 * acc with
//              no source (ElementC = void), stored through shared memory with TMA, clipped to the
//              group's rows.
//   scheduler  PersistentTileSchedulerSm90Group, with the group sizes read on the device only
//              (GroupProblemShape without host shapes): a grid of sm_count CTAs whose lanes read
//              32 groups' sizes at a time and walk the tiles of every group in turn.
//
// The preparation kernel (`prepare`, one CTA): thread g checks group g's count (and offset) and
// writes its problem size (count, N, K), its A, B and C pointers and its strides; one bad group
// makes every size (0, N, K), so the GEMM writes nothing, and records -(g + 1) for the first bad g.
//
// The row gate (gate.hpp): the mainloop is CUTLASS's, derived (GatedMainloop) so that its load()
// first waits for the sources of the tile's rows. With the gate off (no flags) that is one test
// per tile in the load warp; the kernels are the same for gated and plain calls.
//
// The launch: CUTLASS's adapter (initialize, run) behind `prepare`. A programmatic dependent
// launch of the GEMM behind `prepare` was built and measured against it in one run (one H100,
// docs/grouped_gemm.md): 0-5% faster at 128 tokens per rank (within the spread between runs), 0-15%
// slower at 2048. Not kept.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include <cutlass/gemm/group_array_problem_shape.hpp>

#include "../cutlass_sm90.cuh"  // CUTLASS's Hopper pieces, Sm90Launcher
#include "../gemm/scratch.hpp"
#include "gate.hpp"
#include "launch.hpp"
#include "row_targets_epilogue.cuh"
#include "swiglu_epilogue.cuh"
#include "tilewire/device/ptx.cuh"
#include "tilewire/device/wait.cuh"
#include "tilewire/runtime/errors.hpp"

namespace tw::grouped_impl {

template <bool kPingpong>
struct Schedules {
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
template <>
struct Schedules<true> {
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

// CUTLASS's ptr-array mainloop with the row gate. The kernel's mainloop load warp (the only caller
// of load(), and the only warp whose TMA loads read A) waits in load() for the tile's sources;
// the consumers reach a gated tile through the smem pipeline, whose mbarrier waits suspend in
// hardware. The warp learns the tile's group from tensors_perform_update(), which the kernel calls
// before the first tile and again whenever the next tile is in another group. Lane 0 polls with a
// pause between polls; then every lane acquires the flag itself and fences, so that the TMA loads
// it issues see the rows. A gate already open costs the bounds' loads and one acquire per source.
template <class Base, int kTileM>
struct GatedMainloop : Base {
  struct Arguments : Base::Arguments {
    RowGate gate;
  };
  struct Params : Base::Params {
    RowGate gate;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape shapes, Arguments const& args, void* workspace) {
    return Params{Base::to_underlying_arguments(shapes, args, workspace), args.gate};
  }

  template <class InputTensors, class P, class ProblemShapeMNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const& in, P const& params, ProblemShapeMNKL shape,
                                                     int32_t next_batch) {
    group_ = next_batch;
    return Base::tensors_perform_update(in, params, shape, next_batch);
  }

  template <class Pipeline, class State, class LoadInputs, class TensorMaps, class BlockCoord, class KIter, class Storage>
  CUTLASS_DEVICE void load(Params const& p, Pipeline pipeline, State state, LoadInputs const& in, TensorMaps const& maps,
                           BlockCoord const& blk, KIter k_iter, int k_count, int thread_idx, uint32_t rank_in_cluster,
                           Storage& smem) {
    if (p.gate.on()) wait_rows(p.gate, int(cute::get<0>(blk)));
    Base::load(p, pipeline, state, in, maps, blk, k_iter, k_count, thread_idx, rank_in_cluster, smem);
  }

 private:
  static constexpr uint32_t kPollNs = 256;
  int group_ = 0;

  CUTLASS_DEVICE void wait_rows(RowGate const& g, int tm) const {
#if defined(__CUDA_ARCH__)
    const int* b = g.bounds + (size_t)group_ * (g.sources + 1);
    const int r0 = tm * kTileM, r1 = r0 + kTileM;
    for (int s = 0; s < g.sources && b[s] < r1; ++s) {
      if (!source_meets_rows(b, s, r0, r1)) continue;
      const uint64_t* f = g.flags + s;
      if (cutlass::canonical_lane_idx() == 0 && ptx::ld_acquire_sys(f) < g.want)
        dev::bounded_spin_silent(
            g.ctx, "grouped_gemm.rows", g.want,
            [&] {
              ptx::nanosleep(kPollNs);
              return ptx::ld_acquire_sys(f);
            },
            [&](uint64_t x) { return x >= g.want; });
      __syncwarp();
      (void)ptx::ld_acquire_sys(f);
    }
    ptx::fence_proxy_async_global();
    if (cutlass::canonical_lane_idx() == 0 && g.ring.on())
      trace::emit(g.ring, trace::EventKind::kMmaStart, (uint32_t(group_) << 16) | uint32_t(tm), ptx::globaltimer());
#endif
  }
};

template <BLayout kB, int kTileM, int kTileN, int kClusterN, bool kPingpong,
          GroupedEpilogue kEpi = GroupedEpilogue::kStore>
struct GroupedGemm {
  using E = cutlass::bfloat16_t;
  static constexpr BLayout kLayout = kB;
  static constexpr GroupedEpilogue kEpilogue = kEpi;
  static constexpr bool kSwiGluEpilogue = kEpi == GroupedEpilogue::kSwiGlu;
  static constexpr bool kRowTargets = kEpi == GroupedEpilogue::kRowTargets;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M_g, N, K) per group
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::Int<kClusterN>, cute::_1>;  // along N: A multicast
  using LayoutA = cutlass::layout::RowMajor;                                   // A_g [M_g, K]
  using LayoutB = std::conditional_t<kB == BLayout::kNK, cutlass::layout::ColumnMajor,  // B_g [N, K]
                                     cutlass::layout::RowMajor>;                        // B_g [K, N]
  using LayoutD = cutlass::layout::RowMajor;                                   // C_g [M_g, N]
  static constexpr int kAlign = 8;  // 16-byte rows (can_implement: K, N multiples of 8)

  using StoreEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlign, E, LayoutD*, kAlign,
      typename Schedules<kPingpong>::Epilogue,
      cutlass::epilogue::fusion::LinearCombination<E, float, void, float>>::CollectiveOp;
  // kSwiGlu: D = silu(gate) x up from the registers (swiglu_epilogue.cuh); kRowTargets: each row
  // at its target (row_targets_epilogue.cuh); both stored by each thread.
  template <template <class> class T>
  using ThreadStore =
      cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<T<cutlass::detail::TagToStrideC_t<LayoutD*>>>;
  using Epilogue = std::conditional_t<kSwiGluEpilogue, ThreadStore<SwiGluEpilogueArray>,
                                      std::conditional_t<kRowTargets, ThreadStore<RowTargetsEpilogueArray>, StoreEpilogue>>;
  using Mainloop = GatedMainloop<
      typename cutlass::gemm::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, LayoutA*, kAlign, E, LayoutB*, kAlign, float,
          TileShape, ClusterShape,
          cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
          typename Schedules<kPingpong>::Mainloop>::CollectiveOp,
      kTileM>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Device = cutlass_sm90::Sm90Launcher<Kernel>;

  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  static_assert(cute::is_void_v<typename Kernel::ElementC>, "no source operand");
  static_assert(std::is_same_v<StrideA, cute::Stride<int64_t, cute::_1, cute::_0>>, "A_g rows of K");
  static_assert(std::is_same_v<StrideD, cute::Stride<int64_t, cute::_1, cute::_0>>, "C_g rows of N");
};

// The per-group arguments, in the scratch ahead of CUTLASS's own workspace.
template <class G>
struct GroupArrays {
  typename G::ProblemShape::UnderlyingProblemShape* shapes;
  const typename G::E** a;
  const typename G::E** b;
  typename G::E** d;
  typename G::StrideA* sa;
  typename G::StrideB* sb;
  typename G::StrideD* sd;

  // Bytes of the arrays for `groups` groups, each array 16-byte aligned; with base set, the arrays.
  static size_t carve(void* base, int groups, GroupArrays* out) {
    size_t off = 0;
    auto take = [&](auto*& p, size_t elem) {
      off = (off + 15) & ~size_t(15);
      if (out) p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(static_cast<char*>(base) + off);
      off += elem * size_t(groups);
    };
    GroupArrays tmp{};
    GroupArrays& o = out ? *out : tmp;
    take(o.shapes, sizeof(*o.shapes));
    take(o.a, sizeof(*o.a));
    take(o.b, sizeof(*o.b));
    take(o.d, sizeof(*o.d));
    take(o.sa, sizeof(*o.sa));
    take(o.sb, sizeof(*o.sb));
    take(o.sd, sizeof(*o.sd));
    return (off + 127) & ~size_t(127);  // CUTLASS's workspace follows, 128-byte aligned
  }
};

// A few warps: the groups are a handful to a few hundred.
inline constexpr int kPrepareThreads = 256;

// One CTA. Group g (thread g, then g + kPrepareThreads, ...): count c = counts[g], first row f (offsets[g] or
// g * group_rows). Good when 0 <= c, f >= 0, f + c <= rows, and c <= group_rows (padded) or
// f + c <= offsets[g + 1] (packed: ascending, disjoint). Then every thread writes its groups'
// arguments, sizes zeroed when any group was bad; thread 0 writes the status.
// With the gate's layout_flag, thread 0 first waits for it (the counts may still be being written
// by a kernel beside this one) and the barrier passes its acquire to the block.
template <class G>
__global__ void __launch_bounds__(kPrepareThreads) prepare(const GroupedGemmArgs a, const RowGate gate,
                                                           GroupArrays<G> out) {
  if (gate.layout_flag != nullptr) {
    if (threadIdx.x == 0)
      dev::bounded_spin(
          gate.ctx, "grouped_gemm.layout", gate.want, [&] { return ptx::ld_acquire_sys(gate.layout_flag); },
          [&](uint64_t x) { return x >= gate.want; });
    __syncthreads();
  }
  int bad = a.groups;  // the first bad group, or groups
  for (int g = threadIdx.x; g < a.groups; g += blockDim.x) {
    const long long c = a.counts[g];
    const long long f = a.offsets ? a.offsets[g] : (long long)g * a.group_rows;
    bool ok = c >= 0 && f >= 0 && f + c <= a.rows;
    if (a.offsets == nullptr) ok = ok && c <= a.group_rows;
    else if (g + 1 < a.groups) ok = ok && f + c <= a.offsets[g + 1];
    if (!ok) bad = min(bad, g);
  }
  __shared__ int first_bad;
  if (threadIdx.x == 0) first_bad = a.groups;
  __syncthreads();
  if (bad < a.groups) atomicMin(&first_bad, bad);
  __syncthreads();
  const bool refuse = first_bad < a.groups;
  using E = typename G::E;
  for (int g = threadIdx.x; g < a.groups; g += blockDim.x) {
    const int c = refuse ? 0 : a.counts[g];
    const long long f = a.offsets ? a.offsets[g] : (long long)g * a.group_rows;
    out.shapes[g] = cute::make_shape(c, a.N, a.K);
    // A refused group points at the arrays' own start: never read (no tiles), always a valid address.
    out.a[g] = refuse ? static_cast<const E*>(a.A) : static_cast<const E*>(a.A) + f * a.K;
    out.b[g] = static_cast<const E*>(a.B) + (long long)g * a.N * a.K;
    const long long ldc = G::kSwiGluEpilogue ? a.N / 2 : a.N;  // C's columns
    if constexpr (G::kRowTargets)  // C is the targets table: the group's first entry
      out.d[g] = reinterpret_cast<E*>(static_cast<void**>(a.C) + (refuse ? 0 : f));
    else
      out.d[g] = refuse ? static_cast<E*>(a.C) : static_cast<E*>(a.C) + f * ldc;
    out.sa[g] = typename G::StrideA{int64_t(a.K), cute::_1{}, cute::_0{}};
    if constexpr (G::kLayout == BLayout::kNK) out.sb[g] = typename G::StrideB{int64_t(a.K), cute::_1{}, cute::_0{}};
    else out.sb[g] = typename G::StrideB{cute::_1{}, int64_t(a.N), cute::_0{}};
    out.sd[g] = typename G::StrideD{int64_t(ldc), cute::_1{}, cute::_0{}};
  }
  if (threadIdx.x == 0 && a.status) *a.status = refuse ? -(first_bad + 1) : 0;
}

template <class G>
void run(const GroupedGemmArgs& a, const RowGate& gate, int sm_count, cudaStream_t stream) {
  using Kernel = typename G::Kernel;
  typename G::Device::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.hw_info.sm_count = sm_count;
  TW_CUDA_CHECK(cudaGetDevice(&args.hw_info.device_id));

  // The arrays' size, then CUTLASS's workspace size: it depends on the SM count, not on pointers.
  const size_t arrays = GroupArrays<G>::carve(nullptr, a.groups, nullptr);
  args.problem_shape = {a.groups, nullptr, nullptr};
  const size_t cutlass_ws = G::Device::get_workspace_size(args);
  gemm_impl::ScratchLease lease = gemm_impl::lease_scratch(stream, arrays + cutlass_ws);
  GroupArrays<G> arr{};
  GroupArrays<G>::carve(lease.data(), a.groups, &arr);
  void* workspace = static_cast<char*>(lease.data()) + arrays;

  args.problem_shape = {a.groups, arr.shapes, /*host_problem_shapes=*/nullptr};
  args.mainloop.ptr_A = arr.a;
  args.mainloop.dA = arr.sa;
  args.mainloop.ptr_B = arr.b;
  args.mainloop.dB = arr.sb;
  args.mainloop.gate = gate;
  if constexpr (G::kEpilogue == GroupedEpilogue::kStore) {
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = nullptr;
  }
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;

  cutlass::Status st = G::Device::can_implement(args);
  TW_REQUIRE(st == cutlass::Status::kSuccess, kInvalidArgument,
             std::string("grouped_gemm: CUTLASS rejects the problem: ") + cutlassGetStatusString(st));
  lease.overwritten();  // the arrays and descriptors go where a stream-K GEMM keeps its counters
  prepare<G><<<1, kPrepareThreads, 0, stream>>>(a, gate, arr);
  TW_CUDA_CHECK(cudaGetLastError());
  if (a.rows > 0) {  // no rows: the verdict only (every count must be 0)
    typename G::Device op;
    st = op.initialize(args, workspace, stream);
    TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
               std::string("grouped_gemm: kernel parameters: ") + cutlassGetStatusString(st));
    st = op.run(stream);
    TW_REQUIRE(st == cutlass::Status::kSuccess, kCuda,
               std::string("grouped_gemm: launch failed: ") + cutlassGetStatusString(st) + " (" +
                   cudaGetErrorString(cudaGetLastError()) + ")");
  }
}

}  // namespace tw::grouped_impl
