// allgather_gemm's fused path (tilewire/ops/gemm_scatter_gather.hpp, TpPath::kFused): the
// all-gather of A runs beside the GEMM that consumes it.
//
//   stream     flags[0, P) = 0; this rank's shard -> its rows of the gathered A (local);
//              fork -> the push kernel on a side stream; the GEMM with a gate on A's row blocks
//              (gemm_impl::Gate: a tile of shard q's rows waits until flags[q] = G); join.
//   push       G CTAs on SMs the GEMM leaves free. Entry: an LSA barrier (every rank's previous
//              GEMM, which read its gathered A, is over, and its flags are zero: both precede its
//              fork). CTA b copies its share of this rank's rows into every peer's gathered A at
//              the same offset, peers in reverse ring order (rank me - 1 first: it computes
//              shard me right after its own), and after each peer adds 1 to that peer's
//              flags[me] (release). So flags[q] = G at rank r: all of q's rows have landed at r.
//              Exit: CTA 0 waits until every flag here is G (no add of this call lands after
//              the next call zeroed them).
//   GEMM       the hook kernel, its work list from this rank's first row on (its own shard
//              first, then me + 1, me + 2, ...: ring order), walked along N (a row block's
//              tiles together). Its CTAs never wait for each other, only for the push, which
//              never waits for a GEMM: the push needs SMs of its own, which the GEMM leaves
//              free (reserved SMs + G; on a virtual team within the rank's SM budget). The
//              GEMM is launched first (its host checks), the push after it: either may start
//              first on the device.
//
// Tracing (TpConfig::trace): the GEMM's scheduler records per tile mma_start (its loads start,
// past the gate) and mma_end (epilogue issued) and per CTA kernel_start / kernel_end (Gate in
// ../gemm/launch.hpp); each push CTA records kernel_start / kernel_end (id kPushCtaId0 + CTA)
// and per peer q chunk_send (id q: its first store to q issued) and chunk_recv (id q: its
// release of q's flag issued, so q's rows from this CTA are there).
//
// Why pushes and not pulls: a push needs no flag from the owner that its rows are ready (its
// own kernel wrote them in stream order), and the one handshake the call needs (the entry
// barrier) is the one that also makes the peer's buffer free. Measured against the sequential
// path by `tilewire bench ag-gemm`; the rule that picks one is in docs/gemm_scatter_gather.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "../gemm/launch.hpp"
#include "../gemm/team_gemm.hpp"
#include "fused.hpp"
#include "tilewire/device.cuh"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::tp_impl {
namespace {

constexpr int kPushThreads = 512;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread
constexpr uint32_t kPushCtaId0 = 1u << 16;  // trace ids of the push CTAs (the GEMM's CTAs: 0, 1, ..)

__global__ void __launch_bounds__(kPushThreads)
    push_shard(const __grid_constant__ DevCtx ctx, DevWindow win, size_t shard_off, size_t bytes, size_t flags_off,
               trace::Ring ring) {
  const bool rec = ring.on() && threadIdx.x == 0;
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kPushCtaId0 + blockIdx.x, ptx::globaltimer());
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "allgather_gemm.push_entry");
  const int P = ctx.lsa_size, me = ctx.lsa_rank;
  const size_t vecs = bytes / 16;
  const size_t lo = vecs * blockIdx.x / gridDim.x, hi = vecs * (blockIdx.x + 1) / gridDim.x;
  const uint4* src = dev::lsa_ptr<const uint4>(ctx, win, shard_off, me);
  for (int k = 1; k < P; ++k) {
    const int q = (me - k + P) % P;
    uint4* dst = dev::lsa_ptr<uint4>(ctx, win, shard_off, q);
    if (rec) trace::emit(ring, trace::EventKind::kChunkSend, uint32_t(q), ptx::globaltimer());
    for (size_t i0 = lo + threadIdx.x; i0 < hi; i0 += (size_t)kUnroll * blockDim.x) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + (size_t)u * blockDim.x;
        if (i < hi) v[u] = ptx::ld_nc_v4(src + i);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + (size_t)u * blockDim.x;
        if (i < hi) ptx::st_v4(dst + i, v[u]);
      }
    }
    __threadfence_system();
    __syncthreads();  // the CTA's stores to q, then one release that covers them (cumulativity)
    if (threadIdx.x == 0) ptx::red_add_release_sys(dev::lsa_ptr<uint64_t>(ctx, win, flags_off + 8 * (size_t)me, q), 1);
    if (rec) trace::emit(ring, trace::EventKind::kChunkRecv, uint32_t(q), ptx::globaltimer());
  }
  // Every peer's adds have landed here before the call ends (the join waits for this kernel),
  // also those of a peer whose rows this rank's GEMM never waited for: the next call zeroes the
  // flags, and a late add of this call must not count there.
  if (blockIdx.x == 0 && threadIdx.x < P && (int)threadIdx.x != me) {
    const uint64_t* f = dev::lsa_ptr<const uint64_t>(ctx, win, flags_off + 8 * (size_t)threadIdx.x, me);
    dev::bounded_spin(
        ctx, "allgather_gemm.push_exit", gridDim.x, [&] { return ptx::ld_acquire_sys(f); },
        [&](uint64_t x) { return x >= gridDim.x; });
  }
  if (ring.on()) {
    __syncthreads();  // CTA 0: its exit wait is part of the kernel
    if (rec) trace::emit(ring, trace::EventKind::kKernelEnd, kPushCtaId0 + blockIdx.x, ptx::globaltimer());
  }
}

// The side stream and the fork/join events of a communicator on a device: one per Comm, so that
// the pushes of independent communicators never queue behind each other. Made on first use and
// kept for the process (a few per process); Comm's rule makes one rank's calls one at a time.
struct SideStream {
  cudaStream_t s = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};

SideStream& side_stream(const Comm& comm) {
  static std::mutex mu;
  static std::map<std::pair<const Comm*, int>, SideStream> streams;
  int dev = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lk(mu);
  SideStream& ss = streams[{&comm, dev}];
  if (ss.s == nullptr) {
    TW_CUDA_CHECK(cudaStreamCreateWithFlags(&ss.s, cudaStreamNonBlocking));
    TW_CUDA_CHECK(cudaEventCreateWithFlags(&ss.fork, cudaEventDisableTiming));
    TW_CUDA_CHECK(cudaEventCreateWithFlags(&ss.join, cudaEventDisableTiming));
  }
  return ss;
}

// Joins the side stream into the call's stream when the call ends, also when it throws (a capture
// must not be left with unjoined work, nor the next call's flags zeroed under a running push).
struct Join {
  const SideStream& ss;
  cudaStream_t stream;
  ~Join() {
    if (cudaEventRecord(ss.join, ss.s) == cudaSuccess) (void)cudaStreamWaitEvent(stream, ss.join, 0);
  }
};

}  // namespace

void fused_allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  const int P = comm.nranks(), me = comm.rank(), S = shard_rows(a.M, P), rows = shard_rows_of(a.M, P, me);
  const size_t e = dtype_size(a.dtype), row_bytes = (size_t)a.K * e;
  const AgFusedLayout lay = ag_fused_layout(a.M, a.K, a.dtype, P);
  const int G = ag_push_ctas(S, a.K, a.dtype, comm.is_virtual(), comm.dev_ctx().max_blocks);
  char* ws = static_cast<char*>(a.workspace);
  const WindowRef w = comm.find_window(a.workspace, lay.total, "workspace");
  // 1. Flags zero before this rank's push joins the entry barrier; its rows local.
  TW_CUDA_CHECK(cudaMemsetAsync(ws + lay.flags_off, 0, (size_t)P * 8, stream));
  if (rows > 0)
    TW_CUDA_CHECK(cudaMemcpyAsync(ws + (size_t)me * S * row_bytes, a.A_shard, (size_t)rows * row_bytes,
                                  cudaMemcpyDeviceToDevice, stream));
  // 2. The GEMM, each tile of a peer's rows gated on that peer's flag, and the push beside it
  //    (launched after the GEMM: the GEMM's host checks come first, and either may start first
  //    on the device, since the push has SMs of its own).
  SideStream& ss = side_stream(comm);
  TW_CUDA_CHECK(cudaEventRecord(ss.fork, stream));
  TW_CUDA_CHECK(cudaStreamWaitEvent(ss.s, ss.fork, 0));
  {
    const Join join{ss, stream};  // 3. the call ends when both are done (the next call's fork waits for it)
    gemm_impl::Gate gate;
    gate.flags = reinterpret_cast<const uint64_t*>(ws + lay.flags_off);
    gate.rows_per_src = S;
    gate.skip = me;
    gate.want = (uint64_t)G;
    gate.first_row = me * S;
    gate.ctx = comm.dev_ctx();
    gate.ring = cfg.trace;
    gate.ring.rank = (uint16_t)comm.rank();
    GemmConfig gc;
    gc.reserved_sms = cfg.reserved_sms + G + gemm_impl::sms_outside_budget(comm);  // within the rank's SM budget
    gemm_impl::gemm_gated(GemmArgs{ws, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout}, gc, gate, stream);
    push_shard<<<G, kPushThreads, 0, ss.s>>>(comm.dev_ctx(), w.win, w.offset + (size_t)me * S * row_bytes,
                                              (size_t)rows * row_bytes, w.offset + lay.flags_off, gate.ring);
    comm.check_launch("allgather_gemm push launch");
    comm.launched("allgather_gemm");
  }
  if (a.A_gathered != nullptr)
    TW_CUDA_CHECK(cudaMemcpyAsync(a.A_gathered, ws, (size_t)a.M * row_bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace tw::tp_impl
