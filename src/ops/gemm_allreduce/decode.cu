// gemm_allreduce's fused path at decode M (kAuto, M <= kDecodeMaxM, 2-byte partials, P > 1):
// the plain GEMM writes this rank's partial into C (a window), then one kernel all-reduces C in
// place through the LSA team.
//
//   C          split into P shards of 16-byte vectors; rank o owns shard o, and CTA b of every
//              rank slice b of each shard.
//   kernel     ready barrier b (a peer's CTA b runs after its GEMM, so its whole partial is in
//              its C), then for each vector of slice b of this rank's shard: the P partials read
//              from every rank's C, summed in rank order in fp32, rounded once, and the sum
//              stored into every rank's C at the same place; then done barrier b (every peer's
//              CTA b has stored its slice b here, and has read its own shard's slice b from here).
//   why safe   the vectors of (C of rank q, shard o, slice b) are read and then overwritten by CTA
//              b of rank o alone, so the sums need no barrier between the reads and the stores.
//              This rank's next GEMM overwrites C only after its whole kernel, after every
//              peer's CTA b passed done barrier b. Every rank's C ends bitwise the same: each sum
//              is made once, by its owner.
//
// Why not the owner kernel at this M (gemm_allreduce.cpp picks): its epilogue exchanges the tiles
// of a GEMM a few tiles wide and took 1.1-3.3x of the plain GEMM's time on a virtual rank
// (bench/results/2026-12-04-split-h200); the plain GEMM's decode plans plus a kernel moving a
// few MiB is what the reduce-scatter and the all-gather run there too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "../../testing/measurement.hpp"
#include "../gemm/launch.hpp"
#include "../gemm/team_gemm.hpp"
#include "decode.hpp"
#include "plan.hpp"
#include "tilewire/device.cuh"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_allreduce_impl {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;
constexpr uint32_t kCtaId0 = 1u << 16;  // trace id of the all-reduce kernel (the GEMM's CTAs: 0, 1, ..)

struct InPlaceArgs {
  char* c0 = nullptr;  // LSA rank 0's copy of C; rank q's at q lsa_stride
  uint64_t lsa_stride = 0;
  size_t vecs = 0;  // C's 16-byte vectors (M N e / 16)
};

template <class T>
__device__ float to_f(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <class T>
__device__ T from_f(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    allreduce_in_place(const __grid_constant__ DevCtx ctx, const __grid_constant__ InPlaceArgs a, trace::Ring ring) {
  const int P = ctx.lsa_size, me = ctx.lsa_rank;
  const bool rec = ring.on() && blockIdx.x == 0 && threadIdx.x == 0;
  const auto emit_peers = [&](trace::EventKind k) {
    const uint64_t now = ptx::globaltimer();
    for (int q = 0; q < P; ++q)
      if (q != me) trace::emit(ring, k, uint32_t(q), now);
  };
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kCtaId0, ptx::globaltimer());
  if (rec) emit_peers(trace::EventKind::kChunkSend);
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "gemm_allreduce.decode_ready");
  if (rec) emit_peers(trace::EventKind::kChunkRecv);
  const size_t s0 = a.vecs * me / P, n = a.vecs * (me + 1) / P - s0;  // this rank's shard
  const size_t lo = s0 + n * blockIdx.x / gridDim.x, hi = s0 + n * (blockIdx.x + 1) / gridDim.x;
  // kUnroll vectors per thread at a time: kUnroll loads of every rank's C in flight.
  for (size_t i0 = lo + threadIdx.x; i0 < hi; i0 += (size_t)kUnroll * blockDim.x) {
    float acc[kUnroll][8] = {};
    for (int q = 0; q < P; ++q) {  // rank order: the same sum on every run
      // L2 loads: the peers' GEMMs wrote these lines after this kernel was launched.
      const char* cq = a.c0 + (size_t)q * a.lsa_stride;
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + (size_t)u * blockDim.x;
        if (i < hi) v[u] = ptx::ld_cg_v4(cq + i * 16);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const T* x = reinterpret_cast<const T*>(&v[u]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[u][j] += to_f(x[j]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = i0 + (size_t)u * blockDim.x;
      if (i >= hi) break;
      uint4 r;
      T* y = reinterpret_cast<T*>(&r);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = from_f<T>(acc[u][j]);
      for (int k = 0; k < P; ++k) {
        const int q = (me + k) % P;  // rotated: the owners do not all store into one peer at once
        ptx::st_v4(a.c0 + (size_t)q * a.lsa_stride + i * 16, r);
      }
    }
  }
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "gemm_allreduce.decode_done");
  if (rec) trace::emit(ring, trace::EventKind::kKernelEnd, kCtaId0, ptx::globaltimer());
}

}  // namespace

bool runs_decode_path(const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, int P) {
  return P > 1 && a.M <= kDecodeMaxM && cfg.algo == GemmAllReduceAlgo::kAuto &&
         cfg.partials == PartialPrecision::kBFloat16 && !testing::untraced_kernels();
}

void decode_allreduce(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, cudaStream_t stream) {
  const size_t c_bytes = (size_t)a.M * a.N * dtype_size(a.dtype);
  const WindowRef wc = comm.find_window(a.C, c_bytes, "C");
  GemmConfig gc = as_gemm_config(cfg);
  gc.reserved_sms = cfg.reserved_sms + gemm_impl::sms_outside_budget(comm);  // within the rank's SM budget
  trace::Ring ring = cfg.trace;
  ring.rank = (uint16_t)comm.rank();
  if (ring.on()) {  // the hook kernel: its scheduler records the tiles
    gemm_impl::Gate g;
    g.ctx = comm.dev_ctx();
    g.ring = ring;
    gemm_impl::gemm_gated(as_gemm_args(a), gc, g, stream);
  } else {
    gemm(as_gemm_args(a), gc, stream);
  }
  // No host rendezvous after the GEMM: it waits on no peer, and a rendezvous before the
  // all-reduce kernel is enqueued would hold a rank whose peer never calls in the host bound
  // instead of ending in the kernel's device-wait diagnostic (TimeoutDeathTest.FusedPeerNeverJoins).
  InPlaceArgs ia;
  ia.c0 = wc.win.lsa_base + wc.offset;
  ia.lsa_stride = wc.win.lsa_stride;
  ia.vecs = c_bytes / 16;  // N e is a multiple of 16 (the GEMM's C rows are TMA-aligned)
  // CTAs: one per 16 KiB of a shard, at most the rank's SM budget (the P grids are then resident
  // together: CTA b waits for CTA b of every peer) and max_blocks (a barrier per CTA). From M, N
  // and the team's settings: the same on every rank.
  const size_t per_cta = size_t{16} << 10, shard_bytes = c_bytes / (size_t)comm.lsa_size() + 16;
  const int G = (int)std::max<size_t>(
      1, std::min<size_t>({(shard_bytes + per_cta - 1) / per_cta, (size_t)std::max(1, comm.sm_count()),
                           (size_t)comm.dev_ctx().max_blocks}));
  if (a.dtype == DType::kBFloat16)
    allreduce_in_place<__nv_bfloat16><<<G, kThreads, 0, stream>>>(comm.dev_ctx(), ia, ring);
  else
    allreduce_in_place<__half><<<G, kThreads, 0, stream>>>(comm.dev_ctx(), ia, ring);
  comm.launched("gemm_allreduce decode all-reduce");
}

}  // namespace tw::gemm_allreduce_impl
