// src/ops/gemm_allreduce/owner_launch.cuh — the owner algorithm's kernel launch (any rank count,
// both partial precisions, chosen at run time; hook: hook.cuh) for one dtype and B layout. Each is
// instantiated in its own translation unit (gemm_allreduce_sm90_{bf16,f16}_{nk,kn}.cu), twice: the
// kernel without trace code, which runs whenever tracing is off, and the traced one (hook.cuh says
// why both).
#pragma once
#include "../gemm/gemm_sm90.cuh"
#include "hook.cuh"
#include "launch.hpp"
#include "occupancy.cuh"

namespace tw::gemm_allreduce_impl::owner {

template <class T, bool kTraced>
using Hook = AllReduceHookT<typename gemm_impl::CutlassElement<T>::type, kTraced>;
template <class T, BLayout kLayout, bool kTraced>
using Gemm = gemm_impl::Sm90Gemm<T, kLayout, Hook<T, kTraced>>;

template <class T, BLayout kLayout>
int max_active_clusters() {
  static_assert(sizeof(typename Gemm<T, kLayout, true>::Kernel::SharedStorage) ==
                    sizeof(typename Gemm<T, kLayout, false>::Kernel::SharedStorage),
                "both kernels have the residency the launcher checks");
  return gemm_allreduce_impl::max_active_clusters<typename Gemm<T, kLayout, false>::Kernel>();
}

template <class T, BLayout kLayout, bool kTraced>
void launch_kernel(const LaunchParams& p, cudaStream_t stream) {
  Hook<T, kTraced> hook{};
  hook.ctx = p.ctx;
  hook.lay = p.lay;
  hook.sched = p.sched;
  hook.me = p.ctx.lsa_rank;
  hook.final_ctas = p.final_ctas;
  hook.ws_win = p.ws_win;
  hook.ws_off = p.ws_off;
  hook.ws = static_cast<char*>(p.ws);
  hook.c_win = p.c_win;
  hook.c_off = p.c_off;
  hook.C = static_cast<typename Hook<T, kTraced>::E*>(p.gemm.C);
  hook.ldc = p.gemm.N;
  hook.ring = p.ring;
  hook.grid_ctas = p.sched.ctas * p.sched.cluster_m;
  gemm_impl::run_sm90<T, kLayout>(p.gemm, p.gemm_cfg, hook, p.num_sms, p.raster, /*workspace=*/nullptr, stream);
}

template <class T, BLayout kLayout>
void launch(const LaunchParams& p, cudaStream_t stream) {
  if (p.ring.on()) launch_kernel<T, kLayout, true>(p, stream);
  else launch_kernel<T, kLayout, false>(p, stream);
}

}  // namespace tw::gemm_allreduce_impl::owner
