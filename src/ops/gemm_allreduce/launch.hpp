// src/ops/gemm_allreduce/launch.hpp — the fused kernels this build instantiates (one translation
// unit each: gemm_allreduce_sm90_bf16_*.cu) and what the host launcher hands them. No CUTLASS here.
#pragma once
#include <cuda_runtime.h>

#include "../gemm/scheduler.hpp"
#include "hook_params.hpp"
#include "plan.hpp"
#include "tilewire/device/context.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_allreduce_impl {

struct LaunchParams {
  GemmArgs gemm;                  // K = K_local; checked
  GemmConfig gemm_cfg;            // reserved_sms sized for residency, no rank rotation
  int num_sms = 0;                // the device's SM count
  gemm_impl::Raster raster = gemm_impl::Raster::kAlongM;
  // What the hook reads (hook_params.hpp). The front-end and the engine set ctx, lay, sched, the
  // windows, ws and ring; hook_params() derives the rest from them and from gemm.
  HookParams hook;
  int final_ctas = 0;             // owner: CTAs that run the final wait (plan.hpp final_wait_ctas)
  OwnerKnobs owner;               // owner: measurement knobs
  RelayKnobs relay;               // relay: its knobs
  bool untraced = false;          // exchange, relay: the kernel built without trace code (ring must be null)
};

// The hook's parameters for a launch: p.hook with what follows from the rest of p (this rank's
// LSA rank, the grid, C and its shape).
inline HookParams hook_params(const LaunchParams& p) {
  HookParams h = p.hook;
  h.me = p.hook.ctx.lsa_rank;
  h.grid_ctas = p.hook.sched.ctas * p.hook.sched.cluster_m;
  h.C = p.gemm.C;
  h.ldc = p.gemm.N;
  h.M = p.gemm.M;
  h.N = p.gemm.N;
  return h;
}

// Zero the workspace's flag section (and the header on first use) between two LSA barriers,
// before a call whose flags the workspace's last use cannot vouch for (reinit.cu).
void launch_reinit(const DevCtx& ctx, char* ws, const Layout& lay, bool first_use, cudaStream_t stream);

// Clusters of each fused kernel that can be resident at once on the current device
// (cudaOccupancyMaxActiveClusters; 0: it does not fit), and its launch. Owner algorithm
// (owner_launch.cuh; gemm_allreduce_sm90_bf16_{nk,kn}.cu):
int max_active_clusters_bf16_nk();
void launch_bf16_nk(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_bf16_kn();
void launch_bf16_kn(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_f16_nk();  // owner, fp16: gemm_reducescatter's fused path only
void launch_f16_nk(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_f16_kn();
void launch_f16_kn(const LaunchParams& p, cudaStream_t stream);
// Owner algorithm on the decode tile (plan.hpp owner_tile_is_decode, scatter_tile_is_decode;
// gemm_allreduce_sm90_{bf16,f16}_{nk,kn}_decode.cu):
int max_active_clusters_bf16_nk_decode();
void launch_bf16_nk_decode(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_bf16_kn_decode();
void launch_bf16_kn_decode(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_f16_nk_decode();
void launch_f16_nk_decode(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_f16_kn_decode();
void launch_f16_kn_decode(const LaunchParams& p, cudaStream_t stream);
// Exchange algorithm, B as [N, K] only (gemm_allreduce_sm90_bf16_nk_exchange.cu):
int max_active_clusters_bf16_nk_exchange();
void launch_bf16_nk_exchange(const LaunchParams& p, cudaStream_t stream);
// Relay algorithm (relay_launch.cuh; gemm_allreduce_sm90_bf16_{nk,kn}_relay.cu):
int max_active_clusters_bf16_nk_relay();
void launch_bf16_nk_relay(const LaunchParams& p, cudaStream_t stream);
int max_active_clusters_bf16_kn_relay();
void launch_bf16_kn_relay(const LaunchParams& p, cudaStream_t stream);

}  // namespace tw::gemm_allreduce_impl
