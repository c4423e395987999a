// src/ops/gemm_allreduce/owner_launch.cuh — the owner algorithm's kernel launch (any rank count,
// both partial precisions, chosen at run time; hook: hook.cuh) for one dtype, B layout and tile.
// Each is instantiated in its own translation unit (gemm_allreduce_sm90_{bf16,f16}_{nk,kn}.cu; the
// decode tile: gemm_allreduce_sm90_{bf16,f16}_nk_decode.cu), twice: the kernel without trace
// code, which runs whenever tracing is off, and the traced one (hook.cuh says why both).
#pragma once
#include "../gemm/gemm_sm90.cuh"
#include "hook.cuh"
#include "launch.hpp"
#include "occupancy.cuh"

namespace tw::gemm_allreduce_impl::owner {

template <class T, bool kTraced>
using Hook = AllReduceHookT<typename gemm_impl::CutlassElement<T>::type, kTraced>;
template <class T, BLayout kLayout, bool kTraced, class Tile>
using Gemm = gemm_impl::Sm90Gemm<T, kLayout, Hook<T, kTraced>, Tile>;
// The decode tile (plan.hpp kDecodeBlkN, kDecodeClusterM).
using DecodeTile = gemm_impl::HookTileT<kDecodeBlkN, kDecodeClusterM>;

template <class T, BLayout kLayout, class Tile = gemm_impl::DefaultHookTile>
int max_active_clusters() {
  static_assert(sizeof(typename Gemm<T, kLayout, true, Tile>::Kernel::SharedStorage) ==
                    sizeof(typename Gemm<T, kLayout, false, Tile>::Kernel::SharedStorage),
                "both kernels have the residency the launcher checks");
  return gemm_allreduce_impl::max_active_clusters<typename Gemm<T, kLayout, false, Tile>::Kernel, Tile::kClusterM>();
}

template <class T, BLayout kLayout, bool kTraced, class Tile>
void launch_kernel(const LaunchParams& p, cudaStream_t stream) {
  TW_REQUIRE(p.hook.lay.blk_n == Tile::kBlkN && p.hook.lay.cluster_m == Tile::kClusterM &&
                 p.hook.sched.cluster_m == Tile::kClusterM,
             kInvalidArgument, "gemm_allreduce: the owner kernel's tile differs from the call's layout");
  Hook<T, kTraced> hook{};
  static_cast<HookParams&>(hook) = hook_params(p);
  hook.final_ctas = p.final_ctas;
  if (p.owner.final_poll_all) hook.final_pollers = kConsumerThreads, hook.final_poll_ns = 0;
  gemm_impl::run_sm90<T, kLayout, Tile>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster, /*workspace=*/nullptr, stream);
}

template <class T, BLayout kLayout, class Tile = gemm_impl::DefaultHookTile>
void launch(const LaunchParams& p, cudaStream_t stream) {
  if (p.hook.ring.on()) launch_kernel<T, kLayout, true, Tile>(p, stream);
  else launch_kernel<T, kLayout, false, Tile>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl::owner
