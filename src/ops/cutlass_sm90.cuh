// src/ops/cutlass_sm90.cuh — the CUTLASS 4.2 pieces the Hopper kernels use (gemm, grouped_gemm,
// gemm_allreduce), and Sm90Launcher: what those kernels need of GemmUniversalAdapter.
//
// Why not CUTLASS's umbrella headers: <cutlass/gemm/collective/collective_builder.hpp>,
// <cutlass/gemm/kernel/gemm_universal.hpp> and <cutlass/gemm/device/gemm_universal_adapter.h>
// (which includes the second) pull in every architecture's mainloops, builders and kernels,
// SM70 to SM120. A translation unit that includes them spends most of its front-end time parsing
// SM100/SM120 templates it never instantiates, and about 40 units include them (the figures:
// docs/gemm.md, "Compile time"). The kernels are the same either way: every type they
// instantiate is declared by the headers below (a missing CollectiveMma or GemmUniversal
// specialization is an incomplete type, a compile error, not a silent fallback).
//
// Sm90Launcher<Kernel> has the adapter's interface as far as the kernels use it (Arguments,
// can_implement, get_workspace_size, initialize, update, run) and does what the adapter does for
// an SM90 kernel with a static cluster shape: parameters from Kernel::to_underlying_arguments, the
// dynamic shared memory opt-in, then a launch of cutlass::device_kernel<Kernel> with its cluster
// dimensions and, if asked, programmatic dependent launch.
#pragma once
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cluster_launch.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/builders/sm90_gmma_builder.inl>
#include <cutlass/gemm/collective/collective_builder_decl.hpp>
#include <cutlass/gemm/collective/collective_mma_decl.hpp>
#include <cutlass/gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp>
#include <cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/kernel/gemm_universal_decl.h>
#include <cutlass/gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp>
#include <cutlass/gemm/kernel/sm90_gemm_array_tma_warpspecialized_pingpong.hpp>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/kernel_launch.h>

namespace tw::cutlass_sm90 {

template <class Kernel>
class Sm90Launcher {
 public:
  using Arguments = typename Kernel::Arguments;
  using Params = typename Kernel::Params;
  static_assert(Kernel::ArchTag::kMinComputeCapability == 90, "Sm90Launcher: an SM90 kernel");
  using ClusterShape = typename Kernel::DispatchPolicy::ClusterShape;
  static_assert(cute::is_static_v<ClusterShape>, "Sm90Launcher: a static cluster shape");

  static cutlass::Status can_implement(const Arguments& args) {
    return Kernel::can_implement(args) ? cutlass::Status::kSuccess : cutlass::Status::kInvalid;
  }
  static size_t get_workspace_size(const Arguments& args) { return Kernel::get_workspace_size(args); }

  // The kernel's workspace initialized (CUTLASS's own zeroing, where the kernel has any), then
  // its parameters and the dynamic shared memory opt-in.
  cutlass::Status initialize(const Arguments& args, void* workspace, cudaStream_t stream) {
    cutlass::Status st = Kernel::initialize_workspace(args, workspace, stream, nullptr);
    if (st == cutlass::Status::kSuccess) st = update(args, workspace);
    return st;
  }

  // The same without touching the workspace (the stream-K kernel's counters, scratch.hpp).
  cutlass::Status update(const Arguments& args, void* workspace) {
    if (workspace == nullptr && get_workspace_size(args) > 0) return cutlass::Status::kErrorWorkspaceNull;
    params_ = Kernel::to_underlying_arguments(args, workspace);
    const int smem = int(Kernel::SharedStorageSize);
    if (smem >= (48 << 10) &&
        cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
            cudaSuccess) {
      (void)cudaGetLastError();  // the error is the returned status, not the next call's
      return cutlass::Status::kErrorInternal;
    }
    return cutlass::Status::kSuccess;
  }

  cutlass::Status run(cudaStream_t stream, bool pdl = false) {
    const dim3 block = Kernel::get_block_shape();
    const dim3 grid = Kernel::get_grid_shape(params_);
    const int smem = int(Kernel::SharedStorageSize);
    constexpr int cx = cute::size<0>(ClusterShape{}), cy = cute::size<1>(ClusterShape{}),
                  cz = cute::size<2>(ClusterShape{});
    if constexpr (cx * cy * cz == 1) {
      return cutlass::kernel_launch<Kernel>(grid, block, smem, stream, params_, pdl);
    } else {
      void* kernel_params[] = {&params_};
      return cutlass::ClusterLauncher::launch(grid, dim3(cx, cy, cz), block, smem, stream,
                                              reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>),
                                              kernel_params, pdl);
    }
  }

 private:
  Params params_{};
};

}  // namespace tw::cutlass_sm90
