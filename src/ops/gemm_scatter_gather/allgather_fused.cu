// allgather_gemm's fused path (tilewire/ops/gemm_scatter_gather.hpp, TpPath::kFused): the GEMM
// reads every peer's shard where it lies, so the all-gather happens inside its mainloop.
//
//   stream     entry barrier (every rank's previous call has stopped reading this rank's
//              workspace); this rank's shard -> its rows of its own workspace; ready barrier
//              (every shard is in its owner's workspace); the GEMM, one CUTLASS batch per shard:
//              A's TMA descriptor spans the P copies of the workspace at the window's LSA stride
//              (gemm_impl::Gate::batches), so batch q is loaded from rank q's window, rows q S..
//              of C; the shards -> A_gathered beside the GEMM when the call returns it.
//   GEMM       the hook kernel on the plain GEMM's raster and band, its walk from this rank's
//              own rows on (rank rotation: the ranks do not all read one peer at once). No tile
//              waits: every shard is there before the GEMM starts, which costs one copy of the
//              own shard (HBM speed) and two barriers per call.
//   decode     M <= 256 (fused_gather): one kernel gathers the shards (its CTAs paired across the
//              ranks by per-CTA barriers), then the plain GEMM runs on the gathered A.
//
// Why pulling and not pushing (docs/fused_gemm.md, "Where the time went"; docs/gemm_scatter_gather.md):
// the push design (a push kernel on SMs the GEMM left free storing each shard into the peers'
// workspaces, the GEMM gated per chunk of rows) ran the GEMM on a band of one row block, took SMs from it and raced its own
// copies; on one GPU its fused call took 1.1-2.1x the GEMM alone. A copy within one GPU runs on
// SMs, so a gated GEMM cannot wait for one (copy engines deadlocked there).
// On NVLink the same kernel loads the peers' rows over the link: the cost model
// (fused_gemm/cost_model.hpp) prices those loads; kAuto runs the sequential path where they lose.
//
// Tracing (TpConfig::trace): the GEMM's scheduler records per tile mma_start (its loads start)
// and mma_end (epilogue issued) and per CTA kernel_start / kernel_end (Gate in ../gemm/launch.hpp);
// the ready barrier records kernel_start / kernel_end (id 1 << 16) and, for every peer q, chunk_send (id q) when this rank arrives (its rows
// are in place for q) and chunk_recv (id q) when it has passed (q's rows are readable from here).
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
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::tp_impl {
namespace {

constexpr int kPushThreads = 1024;
constexpr int kUnroll = 8;  // 16-byte loads in flight per thread: 128 KiB per CTA
constexpr uint32_t kPushCtaId0 = 1u << 16;  // trace ids of the push CTAs (the GEMM's CTAs: 0, 1, ..)

struct PushArgs {
  DevWindow win;
  size_t ws_off = 0;     // the workspace's offset in the window
  size_t flags_off = 0;  // from the workspace
  const char* shard = nullptr;  // this rank's rows of A
  size_t rb = 0;                // bytes per row of A
  int S = 0, rows = 0, chunks = 0, R = 0;  // shard rows, this rank's rows, chunks per shard, rows per chunk
  int M = 0;
};

// This CTA's share (of gridDim.x) of a copy of `bytes` (a multiple of 16) from src to dst.
// kCoherent: src may have been written during this kernel by another agent (a peer's copy read
// after a barrier): L2 loads, not the non-coherent path, which assumes data read-only for the
// kernel's lifetime.
template <bool kCoherent = false>
__device__ void copy_share(char* dst, const char* src, size_t bytes) {
  const size_t vecs = bytes / 16;
  const size_t lo = vecs * blockIdx.x / gridDim.x, hi = vecs * (blockIdx.x + 1) / gridDim.x;
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (size_t i0 = lo + threadIdx.x; i0 < hi; i0 += (size_t)kUnroll * blockDim.x) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = i0 + (size_t)u * blockDim.x;
      if (i < hi) v[u] = kCoherent ? ptx::ld_cg_v4(s + i) : ptx::ld_nc_v4(s + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = i0 + (size_t)u * blockDim.x;
      if (i < hi) ptx::st_v4(d + i, v[u]);
    }
  }
}

// The CTA's stores so far, then one release of `flag` + 1 that covers them (cumulativity).
__device__ void publish(uint64_t* flag) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) ptx::red_add_release_sys(flag, 1);
}

__global__ void __launch_bounds__(kPushThreads)
    push_shard(const __grid_constant__ DevCtx ctx, const __grid_constant__ PushArgs a, trace::Ring ring) {
  const bool rec = ring.on() && threadIdx.x == 0;
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kPushCtaId0 + blockIdx.x, ptx::globaltimer());
  const int P = ctx.lsa_size, me = ctx.lsa_rank, C = a.chunks;
  const uint64_t want = gridDim.x;
  const auto ws = [&](int q, size_t off) { return dev::lsa_ptr<char>(ctx, a.win, a.ws_off + off, q); };
  const auto flag = [&](int q, int src, int c) {
    return reinterpret_cast<uint64_t*>(ws(q, a.flags_off + 8 * ((size_t)src * C + c)));
  };
  const auto chunk_bytes = [&](int n_rows, int c) { return (size_t)std::min(a.R, n_rows - c * a.R) * a.rb; };
  const auto row_off = [&](int src, int c) { return ((size_t)src * a.S + (size_t)c * a.R) * a.rb; };
  // 1. Every peer's gathered A is free and its flags zero.
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "allgather_gemm.push_entry");
  // 2. The shard into every peer, chunk by chunk.
  for (int k = 1; k < P && a.rows > 0; ++k) {
    const int q = (me - k + P) % P;
    if (rec) trace::emit(ring, trace::EventKind::kChunkSend, uint32_t(q), ptx::globaltimer());
    for (int c = 0; c * a.R < a.rows; ++c) {
      copy_share(ws(q, row_off(me, c)), a.shard + (size_t)c * a.R * a.rb, chunk_bytes(a.rows, c));
      publish(flag(q, me, c));
    }
    if (rec) trace::emit(ring, trace::EventKind::kChunkRecv, uint32_t(q), ptx::globaltimer());
  }
  // Waits here until chunk c of shard src has landed (all G CTAs of src's push added theirs).
  const auto landed = [&](int src, int c) {
    if (threadIdx.x == 0) {
      const uint64_t* f = flag(me, src, c);
      dev::bounded_spin(
          ctx, "allgather_gemm.push_exit", want, [&] { return ptx::ld_acquire_sys(f); },
          [&](uint64_t x) { return x >= want; });
    }
    __syncthreads();
  };
  // 3. Every peer's adds have landed here before the call ends (the join waits for this kernel),
  //    also those of chunks this rank's GEMM never waited for.
  if (blockIdx.x == 0)
    for (int src = 0; src < P; ++src) {
      const int n = (int)std::max<long long>(0, std::min<long long>(a.S, (long long)a.M - (long long)src * a.S));
      if (src != me && n > 0) landed(src, (n - 1) / a.R);
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

// Forks the side stream off the call's stream; joins it back when the call ends, also when it
// throws (a capture must not be left with unjoined work, nor the next call's flags zeroed under a
// running push).
class Forked {
 public:
  Forked(const Comm& comm, cudaStream_t stream) : ss_(side_stream(comm)), stream_(stream) {
    TW_CUDA_CHECK(cudaEventRecord(ss_.fork, stream_));
    TW_CUDA_CHECK(cudaStreamWaitEvent(ss_.s, ss_.fork, 0));
  }
  ~Forked() {
    if (cudaEventRecord(ss_.join, ss_.s) == cudaSuccess) (void)cudaStreamWaitEvent(stream_, ss_.join, 0);
  }
  Forked(const Forked&) = delete;
  Forked& operator=(const Forked&) = delete;
  cudaStream_t side() const { return ss_.s; }

 private:
  const SideStream& ss_;
  cudaStream_t stream_;
};

// The gated GEMM's band of row units along N: 1 walks a row block's tiles together, in the order
// the rows arrive. TILEWIRE_AG_SWIZZLE (measurement build only) sets 2, 4 or 8 instead: wider
// bands read B fewer times from HBM and wait for more rows at once.
int ag_swizzle() {
#ifdef TILEWIRE_BENCH_KERNELS
  static const int forced = (int)env::get_int("TILEWIRE_AG_SWIZZLE");
  if (forced == 2 || forced == 4 || forced == 8) return forced;
#endif
  return 1;
}

// A copy beside a GEMM that holds the SMs: on the copy engines where the driver can (a copy within
// one GPU otherwise runs as a kernel, which waits for SMs the GEMM holds, or takes them from it).
// cudaMemcpyFlagPreferOverlapWithCompute is that hint; a stream being captured gets a plain
// cudaMemcpyAsync (the batch call is not part of what a capture records everywhere), as does a
// driver that refuses the hint.
void copy_beside_compute(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  TW_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cap == cudaStreamCaptureStatusNone) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    void* dsts[] = {dst};
    const void* srcs[] = {src};
    size_t sizes[] = {bytes}, idx[] = {0};
    if (cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 1, s) == cudaSuccess) return;
    (void)cudaGetLastError();
  }
  TW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
}

// TILEWIRE_AG_PUSH=1 (measurement build only): the push design instead of the pull, to time the
// two in one run.
bool ag_push_design() {
#ifdef TILEWIRE_BENCH_KERNELS
  static const bool push = env::get_bool("TILEWIRE_AG_PUSH");
  return push;
#else
  return false;
#endif
}

// The pull's two barriers: entry (phase 0) and ready (phase 1; traced: per peer q, chunk_send
// when this rank arrives, its shard in place for q, and chunk_recv when every shard is).
__global__ void pull_barrier(const __grid_constant__ DevCtx ctx, trace::Ring ring, int phase) {
  const bool rec = phase == 1 && ring.on() && threadIdx.x == 0;
  const auto emit_peers = [&](trace::EventKind k) {
    const uint64_t now = ptx::globaltimer();
    for (int q = 0; q < ctx.lsa_size; ++q)
      if (q != ctx.lsa_rank) trace::emit(ring, k, uint32_t(q), now);
  };
  // The barrier is the call's first traced kernel (id kPushCtaId0): its events bracket the others'.
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kPushCtaId0, ptx::globaltimer());
  if (rec) emit_peers(trace::EventKind::kChunkSend);
  dev::lsa_barrier(dev::Cta{}, ctx, 0, cuda::memory_order_acq_rel,
                   phase == 0 ? "allgather_gemm.entry" : "allgather_gemm.ready");
  if (rec) emit_peers(trace::EventKind::kChunkRecv);
  if (rec) trace::emit(ring, trace::EventKind::kKernelEnd, kPushCtaId0, ptx::globaltimer());
}

struct GatherArgs {
  char* copy0 = nullptr;    // LSA rank 0's copy of the workspace; rank q's at q lsa_stride
  uint64_t lsa_stride = 0;
  const char* shard = nullptr;  // this rank's rows of A
  char* dst = nullptr;          // the gathered A [M, K]
  bool own_in_place = false;    // dst is this rank's own copy: its rows are there already
  size_t rb = 0;                // bytes per row of A
  int M = 0, S = 0;
};

// Decode-sized A, gathered before the GEMM (fused_gather below). CTA b of every rank owns slice b
// of each shard (copy_share's split of it), so the barriers pair CTA b across the ranks, not the
// whole grids: entry (the peers' CTA b have pulled the previous call's slice b from here), this
// rank's slice into its copy, ready (every rank's slice b is in place), then slice b of every
// shard into dst. Traced (CTA 0) as the pull's ready barrier: kernel_start / kernel_end (id
// kPushCtaId0), chunk_send per peer on arriving, chunk_recv per peer once passed.
__global__ void __launch_bounds__(kPushThreads)
    gather_shards(const __grid_constant__ DevCtx ctx, const __grid_constant__ GatherArgs a, trace::Ring ring) {
  const int P = ctx.lsa_size, me = ctx.lsa_rank;
  const bool rec = ring.on() && blockIdx.x == 0 && threadIdx.x == 0;
  const auto emit_peers = [&](trace::EventKind k) {
    const uint64_t now = ptx::globaltimer();
    for (int q = 0; q < P; ++q)
      if (q != me) trace::emit(ring, k, uint32_t(q), now);
  };
  const auto bytes_of = [&](int q) { return (size_t)std::max(0, std::min(a.S, a.M - q * a.S)) * a.rb; };
  const auto shard_in_copy = [&](int q) { return a.copy0 + (size_t)q * a.lsa_stride + (size_t)q * a.S * a.rb; };
  if (rec) trace::emit(ring, trace::EventKind::kKernelStart, kPushCtaId0, ptx::globaltimer());
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "allgather_gemm.gather_entry");
  copy_share(shard_in_copy(me), a.shard, bytes_of(me));
  if (rec) emit_peers(trace::EventKind::kChunkSend);
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "allgather_gemm.gather_ready");
  if (rec) emit_peers(trace::EventKind::kChunkRecv);
  for (int k = 0; k < P; ++k) {
    const int q = (me + k) % P;  // rotated: the ranks do not all read one peer at once
    char* d = a.dst + (size_t)q * a.S * a.rb;
    if (q != me) copy_share<true>(d, shard_in_copy(q), bytes_of(q));
    else if (!a.own_in_place) copy_share(d, a.shard, bytes_of(q));
  }
  if (rec) trace::emit(ring, trace::EventKind::kKernelEnd, kPushCtaId0, ptx::globaltimer());
}

// Decode-sized A (M <= kHookDecodeMaxM): the shards gathered first, by one kernel, into
// A_gathered when the call asks for it, else into the rows of this rank's own copy of the
// workspace that no peer reads; then the plain GEMM on the gathered A, on the plan tw::gemm picks
// for the shape (traced: the hook kernel, whose scheduler records the tiles). A is at most
// 256 rows: its gather is small beside the GEMM's stream of B, and the plain GEMM's decode
// plans beat the hook kernel's decode tile by far (bench ag-gemm rows (g) and (k); docs/fused_gemm.md).
void fused_gather(Comm& comm, const AllGatherGemmArgs& a, cudaStream_t stream, const WindowRef& w, const GemmConfig& gc,
                  const trace::Ring& ring) {
  const int P = comm.nranks(), me = comm.rank();
  GatherArgs ga;
  ga.copy0 = w.win.lsa_base + w.offset;
  ga.lsa_stride = w.win.lsa_stride;
  ga.shard = static_cast<const char*>(a.A_shard);
  ga.own_in_place = a.A_gathered == nullptr;
  ga.dst = ga.own_in_place ? ga.copy0 + (size_t)me * w.win.lsa_stride : static_cast<char*>(a.A_gathered);
  ga.rb = (size_t)a.K * dtype_size(a.dtype);
  ga.M = a.M;
  ga.S = shard_rows(a.M, P);
  // CTAs: one per 16 KiB of a shard, at most the rank's SM budget (the P grids are then resident
  // together: CTA b waits for CTA b of every peer) and max_blocks (a barrier per CTA). From M, K
  // and the team's settings: the same on every rank.
  const size_t per_cta = size_t{16} << 10;
  const int G = (int)std::max<size_t>(1, std::min<size_t>({(ga.S * ga.rb + per_cta - 1) / per_cta,
                                                             (size_t)std::max(1, comm.sm_count()),
                                                             (size_t)comm.dev_ctx().max_blocks}));
  gather_shards<<<G, kPushThreads, 0, stream>>>(comm.dev_ctx(), ga, ring);
  comm.launched("allgather_gemm gather");
  const GemmArgs ga_gemm{ga.dst, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout};
  if (ring.on()) {
    gemm_impl::Gate g;
    g.ctx = comm.dev_ctx();
    g.ring = ring;
    gemm_impl::gemm_gated(ga_gemm, gc, g, stream);
  } else {
    gemm(ga_gemm, gc, stream);
  }
  comm.launched("allgather_gemm");
}

void fused_pull(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  const int P = comm.nranks(), me = comm.rank(), S = shard_rows(a.M, P);
  const size_t rb = (size_t)a.K * dtype_size(a.dtype);
  trace::Ring ring = cfg.trace;
  ring.rank = (uint16_t)comm.rank();
  GemmConfig gc;
  gc.reserved_sms = cfg.reserved_sms + gemm_impl::sms_outside_budget(comm);  // within the rank's SM budget
  gemm_impl::Gate g;
  g.ctx = comm.dev_ctx();
  g.ring = ring;
  if (P == 1) {  // traced at one rank (untraced, the front-end runs the plain GEMM): the shard is A
    gemm_with_copy_beside(comm, a.A_gathered, a.A_shard, (size_t)a.M * rb, stream, [&] {
      gemm_impl::gemm_gated(GemmArgs{a.A_shard, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout}, gc, g, stream);
      comm.launched("allgather_gemm");
    });
    return;
  }
  const WindowRef w = comm.find_window(a.workspace, (size_t)P * S * rb, "workspace");
  if (gemm_impl::gated_tile_is_decode(a.M)) return fused_gather(comm, a, stream, w, gc, ring);
  const int rows = shard_rows_of(a.M, P, me);
  pull_barrier<<<1, 32, 0, stream>>>(comm.dev_ctx(), ring, 0);
  comm.launched("allgather_gemm entry barrier");
  if (rows > 0)
    TW_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(a.workspace) + (size_t)me * S * rb, a.A_shard, (size_t)rows * rb,
                                  cudaMemcpyDeviceToDevice, stream));
  pull_barrier<<<1, 32, 0, stream>>>(comm.dev_ctx(), ring, 1);
  comm.launched("allgather_gemm ready barrier");
  char* copy0 = w.win.lsa_base + w.offset;  // rank 0's copy of the workspace; rank q's at q lsa_stride
  g.batches = P;
  g.batch_rows = S;
  // Shard q: rows q S.. of rank q's copy, at copy0 + q (lsa_stride + S rows).
  g.batch_stride = (long long)((w.win.lsa_stride + (size_t)S * rb) / dtype_size(a.dtype));
  g.m_total = a.M;
  g.first_row = me * S;
  const Forked f(comm, stream);  // A_gathered beside the GEMM; the call ends when both are done
  // The GEMM is launched first, so that its grid has the SMs should a copy need some.
  gemm_impl::gemm_gated(GemmArgs{copy0, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout}, gc, g, stream);
  comm.launched("allgather_gemm");
  if (a.A_gathered != nullptr)
    for (int k = 0; k < P; ++k) {
      const int q = (me + k) % P, n = shard_rows_of(a.M, P, q);
      if (n > 0)
        copy_beside_compute(static_cast<char*>(a.A_gathered) + (size_t)q * S * rb,
                            copy0 + q * w.win.lsa_stride + (size_t)q * S * rb, (size_t)n * rb, f.side());
    }
}

}  // namespace

void gemm_with_copy_beside(const Comm& comm, void* dst, const void* src, size_t bytes, cudaStream_t stream,
                           const std::function<void()>& gemm) {
  if (dst == nullptr || bytes == 0) return gemm();
  const Forked f(comm, stream);
  gemm();  // first: its grid has the SMs should the copy need some
  copy_beside_compute(dst, src, bytes, f.side());
}

bool ag_pull_aligned(const WindowRef& w) { return w.win.lsa_stride % 16 == 0 && w.offset % 16 == 0; }

void fused_allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  if (!ag_push_design()) return fused_pull(comm, a, cfg, stream);
  const int P = comm.nranks(), me = comm.rank(), S = shard_rows(a.M, P);
  const AgFusedLayout lay = ag_fused_layout(a.M, a.K, a.dtype, P);
  const int G = ag_push_ctas(S, a.K, a.dtype, comm.is_virtual(), comm.dev_ctx().max_blocks);
  char* ws = static_cast<char*>(a.workspace);
  const WindowRef w = comm.find_window(a.workspace, lay.total, "workspace");
  PushArgs pa;
  pa.win = w.win;
  pa.ws_off = w.offset;
  pa.flags_off = lay.flags_off;
  pa.shard = static_cast<const char*>(a.A_shard);
  pa.rb = (size_t)a.K * dtype_size(a.dtype);
  pa.S = S;
  pa.rows = shard_rows_of(a.M, P, me);
  pa.chunks = lay.chunks;
  pa.R = S / lay.chunks;
  pa.M = a.M;
  trace::Ring ring = cfg.trace;
  ring.rank = (uint16_t)comm.rank();
  // 1. Flags zero before this rank's push joins the entry barrier; its rows local, and their
  //    flags open (every byte 1: above any G). No GEMM tile waits for the push at one rank, nor
  //    for its own rows anywhere.
  char* flags = ws + lay.flags_off;
  TW_CUDA_CHECK(cudaMemsetAsync(flags, 0, (size_t)P * lay.chunks * 8, stream));
  if (pa.rows > 0) {
    TW_CUDA_CHECK(cudaMemcpyAsync(ws + (size_t)me * S * pa.rb, a.A_shard, (size_t)pa.rows * pa.rb,
                                  cudaMemcpyDeviceToDevice, stream));
    const int own_chunks = (pa.rows + pa.R - 1) / pa.R;
    TW_CUDA_CHECK(cudaMemsetAsync(flags + 8 * (size_t)me * lay.chunks, 1, 8 * (size_t)own_chunks, stream));
  }
  {
    const Forked f(comm, stream);  // 3. the call ends when both are done (the next call's zero waits for it)
    // 2. The push, then the GEMM beside it, each tile gated on its chunk's flag. The push is
    //    launched first so that the GPU places it before the GEMM's clusters: a GEMM that filled
    //    the SMs before the push had one would wait for it forever. It waits for no GEMM, so it
    //    completes even where the GEMM's launch then throws.
    push_shard<<<G, kPushThreads, 0, f.side()>>>(comm.dev_ctx(), pa, ring);
    comm.check_launch("allgather_gemm push launch");
    gemm_impl::Gate gate;
    gate.flags = reinterpret_cast<const uint64_t*>(flags);
    gate.rows_per_src = pa.R;
    gate.skip = -1;
    gate.want = (uint64_t)G;
    gate.first_row = me * S;
    gate.ctx = comm.dev_ctx();
    gate.ring = ring;
    GemmConfig gc;
    gc.reserved_sms = cfg.reserved_sms + G + gemm_impl::sms_outside_budget(comm);  // within the rank's SM budget
    gc.swizzle = ag_swizzle();
    gemm_impl::gemm_gated(GemmArgs{ws, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout}, gc, gate, stream);
    comm.launched("allgather_gemm");
  }
  if (a.A_gathered != nullptr)
    TW_CUDA_CHECK(cudaMemcpyAsync(a.A_gathered, ws, (size_t)a.M * pa.rb, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace tw::tp_impl
