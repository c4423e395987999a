// gemm_reducescatter's fused path at decode M (M <= 256, scatter_tile_is_decode): the plain GEMM
// writes this rank's partial [P S, N] into its workspace, then one kernel sums this rank's shard
// of every rank's partial, read where it lies (LSA loads), into C_shard.
//
//   stream     the GEMM (tw::gemm on the rank's SM budget, its plan for the shape; traced: the
//              hook kernel, whose scheduler records the tiles), then reduce_shard.
//   reduce     CTA b of every rank owns slice b of each shard (the split of copy_slice below),
//              so the barriers pair CTA b across the ranks, not whole grids: ready (a peer's
//              CTA b runs after the peer's GEMM, so its whole partial is written), the sum of
//              slice b of this rank's rows over the P partials in rank order (fp32, one
//              rounding: deterministic, as the sequential path's), done (every peer's CTA b has
//              read slice b of its rows here). The next call's GEMM overwrites the partial only
//              after the whole kernel, so after every peer read every slice.
//
// Why not the owner or relay kernel at this M: their epilogues exchange tiles inside a GEMM
// that is a few tiles wide; the GEMM alone there streams B in 40-120 us on a virtual rank,
// and their fused call took 1.4-3.0x of it (bench/results/2026-12-04-split-h200), where
// this path is one GEMM on its best plan plus a kernel that moves a few MiB.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "../gemm/launch.hpp"
#include "../gemm/team_gemm.hpp"
#include "../gemm_allreduce/plan.hpp"  // note_sequential_use
#include "fused.hpp"
#include "tilewire/device.cuh"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::tp_impl {
namespace {

constexpr int kReduceThreads = 512;
constexpr int kUnroll = 4;
constexpr uint32_t kReduceCtaId0 = 1u << 16;  // trace id of the reduce kernel (the GEMM's CTAs: 0, 1, ..)

struct ReduceArgs {
  char* copy0 = nullptr;  // LSA rank 0's copy of the workspace (the partials); rank q's at q lsa_stride
  uint64_t lsa_stride = 0;
  char* out = nullptr;     // C_shard: this rank's rows x N
  size_t block_bytes = 0;  // one shard's rows of a partial: S N e
  size_t out_bytes = 0;    // this rank's rows: rows N e (a multiple of 16)
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
__global__ void __launch_bounds__(kReduceThreads)
    reduce_shard(const __grid_constant__ DevCtx ctx, const __grid_constant__ ReduceArgs a, trace::Ring ring) {
  const int P = ctx.lsa_size, me = ctx.lsa_rank;
  const bool rec = ring.on() && blockIdx.x == 0 && threadIdx.x == 0;
  const auto emit_peers = [&](trace::EventKind k) {
    const uint64_t now = ptx::globaltimer();
    for (int q = 0; q < P; ++q)
      if (q != me) trace::emit(ring, k, uint32_t(q), now);
  };
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kReduceCtaId0, ptx::globaltimer());
  if (rec) emit_peers(trace::EventKind::kChunkSend);
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "gemm_reducescatter.ready");
  if (rec) emit_peers(trace::EventKind::kChunkRecv);
  // Slice b of this rank's rows, in 16-byte vectors of 8 elements.
  const size_t vecs = a.out_bytes / 16;
  const size_t lo = vecs * blockIdx.x / gridDim.x, hi = vecs * (blockIdx.x + 1) / gridDim.x;
  const size_t base = (size_t)me * a.block_bytes;  // this rank's rows in every partial
  // kUnroll vectors per thread at a time: kUnroll loads of every rank's partial in flight.
  for (size_t i0 = lo + threadIdx.x; i0 < hi; i0 += (size_t)kUnroll * blockDim.x) {
    float acc[kUnroll][8] = {};
    for (int q = 0; q < P; ++q) {  // rank order: the same sum on every run
      // L2 loads: the peers wrote these lines during this kernel's lifetime (the non-coherent
      // path assumes data read-only for it).
      const char* pq = a.copy0 + (size_t)q * a.lsa_stride + base;
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + (size_t)u * blockDim.x;
        if (i < hi) v[u] = ptx::ld_cg_v4(pq + i * 16);
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
      ptx::st_v4(a.out + i * 16, r);
    }
  }
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "gemm_reducescatter.done");
  if (rec) trace::emit(ring, trace::EventKind::kKernelEnd, kReduceCtaId0, ptx::globaltimer());
}

}  // namespace

void fused_reducescatter_decode(Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  const int P = comm.nranks(), me = comm.rank(), S = shard_rows(a.M, P), rows = shard_rows_of(a.M, P, me);
  const size_t e = dtype_size(a.dtype), part_bytes = (size_t)P * S * a.N * e;
  const WindowRef w = comm.find_window(a.workspace, part_bytes, "workspace");
  // The partial covers the owner and relay kernels' flags: their next call re-initializes them.
  gemm_allreduce_impl::note_sequential_use(comm, a.workspace, part_bytes, stream);
  GemmConfig gc;
  gc.reserved_sms = cfg.reserved_sms + gemm_impl::sms_outside_budget(comm);  // within the rank's SM budget
  trace::Ring ring = cfg.trace;
  ring.rank = (uint16_t)comm.rank();
  const GemmArgs g{a.A, a.B, a.workspace, a.M, a.N, a.K_local, a.dtype, a.b_layout};
  if (ring.on()) {
    gemm_impl::Gate gate;
    gate.ctx = comm.dev_ctx();
    gate.ring = ring;
    gemm_impl::gemm_gated(g, gc, gate, stream);
  } else {
    gemm(g, gc, stream);
  }
  // No host rendezvous after the GEMM (it waits on no peer): the reduce kernel's device wait
  // must be what ends a call whose peer never joins.
  ReduceArgs ra;
  ra.copy0 = w.win.lsa_base + w.offset;
  ra.lsa_stride = w.win.lsa_stride;
  ra.out = static_cast<char*>(a.C_shard);
  ra.block_bytes = (size_t)S * a.N * e;
  ra.out_bytes = (size_t)rows * a.N * e;
  // CTAs: one per 16 KiB of a shard, at most the rank's SM budget (the P grids are then resident
  // together: CTA b waits for CTA b of every peer) and max_blocks (a barrier per CTA). From M, N
  // and the team's settings: the same on every rank.
  const size_t per_cta = size_t{16} << 10;
  const int G = (int)std::max<size_t>(
      1, std::min<size_t>({(ra.block_bytes + per_cta - 1) / per_cta, (size_t)std::max(1, comm.sm_count()),
                           (size_t)comm.dev_ctx().max_blocks}));
  if (a.dtype == DType::kBFloat16)
    reduce_shard<__nv_bfloat16><<<G, kReduceThreads, 0, stream>>>(comm.dev_ctx(), ra, ring);
  else
    reduce_shard<__half><<<G, kReduceThreads, 0, stream>>>(comm.dev_ctx(), ra, ring);
  comm.launched("gemm_reducescatter reduce");
}

}  // namespace tw::tp_impl
