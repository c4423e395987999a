// src/ops/gemm_allreduce/launch.hpp — the fused kernels this build instantiates (one translation
// unit each: gemm_allreduce_sm90_bf16_*.cu) and what the host launcher hands them. No CUTLASS here.
#pragma once
#include <cuda_runtime.h>

#include "../gemm/scheduler.hpp"
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
  gemm_impl::TileSchedule sched;  // what the kernel's scheduler builds from the same arguments
  Layout lay;
  int final_ctas = 0;
  DevCtx ctx{};
  DevWindow ws_win{}, c_win{};
  size_t ws_off = 0, c_off = 0;
  void* ws = nullptr;             // this rank's workspace (local pointer)
  int relay_consumer_rows = 0;    // relay: rows of each tile the consumers push (TILEWIRE_RELAY_CONSUMER_ROWS)
  int relay_poll_ns = 0;          // relay: backoff between polls (TILEWIRE_RELAY_POLL_NS)
  int relay_pace_pct = 60;        // relay: pushes spread over this % of a tile period (TILEWIRE_RELAY_PACE_PCT)
  int relay_comm_inflight = 4;    // relay: rows in flight per comm-warp lane (TILEWIRE_RELAY_COMM_INFLIGHT)
  bool relay_no_push = false;     // relay, measurement only (TILEWIRE_RELAY_NO_PUSH)
  bool final_poll_all = false;    // owner, measurement only (TILEWIRE_OWNER_FINAL_POLL_ALL)
  bool relay_pull = false;        // relay: the owner pulls partials (TILEWIRE_RELAY_PULL)
  trace::Ring ring{};             // per-tile events (every fused kernel); null: off
  bool untraced = false;          // exchange, relay: the kernel built without trace code (ring must be null)
};

// The fields the exchange and relay hooks share, from the launch parameters (each launcher then
// sets its own).
template <class Hook>
void fill_common_hook_fields(Hook& h, const LaunchParams& p) {
  h.ctx = p.ctx;
  h.lay = p.lay;
  h.sched = p.sched;
  h.me = p.ctx.lsa_rank;
  h.grid_ctas = p.sched.ctas * p.sched.cluster_m;
  h.ws_win = p.ws_win;
  h.ws_off = p.ws_off;
  h.ws = static_cast<char*>(p.ws);
  h.C = static_cast<typename Hook::E*>(p.gemm.C);
  h.ldc = p.gemm.N;
  h.M = p.gemm.M;
  h.N = p.gemm.N;
  h.ring = p.ring;
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
