// gemm_reducescatter's fused path (tilewire/ops/gemm_scatter_gather.hpp, TpPath::kFused) on the
// fused-GEMM engine (../fused_gemm/engine.hpp): the relay kernel on the shards, or the owner
// kernel with tiles owned by shard, the same kernels and workspace records as gemm_allreduce's.
// Declared in ../gemm_allreduce/plan.hpp with the layouts they use.
#include <cuda_runtime.h>

#include "../fused_gemm/engine.hpp"
#include "../gemm_allreduce/plan.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_allreduce_impl {

void note_sequential_use(Comm& comm, void* workspace, size_t bytes, cudaStream_t stream) {
  bool first = false;
  (void)fused_gemm::must_reinit(comm.find_window(workspace, bytes, "workspace"), fused_gemm::kHeldSequential, stream,
                                false, &first);
}

namespace {
// gemm_reducescatter's fused kernel: the relay (scatter_uses_relay), else the owner kernel; the
// measurement build runs the owner kernel wherever TILEWIRE_RS_OWNER is set, to compare the two.
GemmAllReduceAlgo scatter_algo(int M, int P, int shard_rows, DType dtype) {
#ifdef TILEWIRE_BENCH_KERNELS
  static const bool owner = env::get_bool("TILEWIRE_RS_OWNER");
  if (owner) return GemmAllReduceAlgo::kOwner;
#endif
  return scatter_uses_relay(M, P, shard_rows, dtype) ? GemmAllReduceAlgo::kRelay : GemmAllReduceAlgo::kOwner;
}

// The rotated walk's band: scatter_swizzle's, or in the measurement build TILEWIRE_RS_SWIZZLE's
// (1, 2, 4 or 8 unit rows, where that divides a shard's unit rows: a band never crosses a shard),
// to show what the reads of B from HBM cost the relay.
int scatter_band(int shard_rows, int cluster_m) {
#ifdef TILEWIRE_BENCH_KERNELS
  static const int forced = (int)env::get_int("TILEWIRE_RS_SWIZZLE");
  const int unit_rows = cluster_m * kBlkM;
  if ((forced == 1 || forced == 2 || forced == 4 || forced == 8) && shard_rows % (forced * unit_rows) == 0) return forced;
#endif
  return scatter_swizzle(shard_rows, cluster_m);
}

fused_gemm::KernelKey scatter_kernel(int M, int P, int shard_rows, DType dtype, BLayout b) {
  const GemmAllReduceAlgo algo = scatter_algo(M, P, shard_rows, dtype);
  return fused_gemm::KernelKey{algo, dtype, b, algo == GemmAllReduceAlgo::kOwner && scatter_tile_is_decode(M)};
}
}  // namespace

Status scatter_can_fuse(const Comm& comm, BLayout b, DType dtype, int M, int shard_rows) {
  fused_gemm::Residency r;
  return fused_gemm::residency(comm, scatter_kernel(M, comm.lsa_size(), shard_rows, dtype, b), "gemm_reducescatter",
                               &r);
}

// The relay on the shards (make_relay_layout with shard_rows: each shard one segment of the walk,
// its owner last) or the owner algorithm with tiles owned by shard (make_scatter_layout): C the
// rank's shard (local memory), no C window.
void fused_reducescatter(Comm& comm, const GemmArgs& g, int shard_rows, int reserved_sms, void* workspace,
                         const trace::Ring& ring, cudaStream_t stream) {
  const int P = comm.lsa_size();
  const fused_gemm::KernelKey key = scatter_kernel(g.M, P, shard_rows, g.dtype, g.b_layout);
  const bool relay = key.algo == GemmAllReduceAlgo::kRelay;
  fused_gemm::Residency r;
  const Status rs = fused_gemm::residency(comm, key, "gemm_reducescatter", &r);
  TW_REQUIRE(rs.ok, kUnsupported, rs.reason);
  GemmAllReduceConfig cfg;
  cfg.reserved_sms = reserved_sms;
  LaunchParams p;
  p.gemm = g;
  p.gemm_cfg = as_gemm_config(cfg);
  if (scatter_rotates(g.M, P, shard_rows, r.cluster_m)) {
    // Rank r walks shard r + 1's tiles first and its own last (rows along N, in bands of
    // scatter_swizzle unit rows, each inside one shard): every CTA pushes partials before it
    // waits as an owner, and at each step the ranks push to different owners. plan.hpp,
    // scatter_rotates, says why it is deadlock free.
    p.gemm_cfg.raster = GemmRaster::kAlongN;
    p.gemm_cfg.swizzle = scatter_band(shard_rows, r.cluster_m);
    p.gemm_cfg.rank = (comm.dev_ctx().lsa_rank + 1) % P;
    p.gemm_cfg.nranks = P;
  }
  fused_gemm::apply_owner_knobs(comm, p);
  if (relay) fused_gemm::apply_relay_knobs(comm, p);
  fused_gemm::fill_schedule(p, r, cfg.reserved_sms);
  if (relay && p.relay.waves > 0 && scatter_rotates(g.M, P, shard_rows, r.cluster_m)) {
    // The interleaved shards (scheduler.hpp): the same chains, hops a chunk apart instead of a
    // shard; the chunk follows from the schedule's units and CTA groups, alike on every rank.
    p.gemm_cfg.walk_chunk = gemm_impl::interleave_chunk(p.hook.sched.units(), P, p.hook.sched.ctas, p.relay.waves);
    if (p.gemm_cfg.walk_chunk > 0) fused_gemm::fill_schedule(p, r, cfg.reserved_sms);
  }
  // Relay: rank r's walk starts at shard r + 1 (the rotation above), the layout's walk_shift.
  p.hook.lay = relay ? make_relay_layout(g.M, g.N, p.raster, p.hook.sched.units(), P, shard_rows, 0,
                                         p.hook.sched.ilv_d, relay_slots_padded())
                     : make_scatter_layout(g.M, g.N, P, p.raster, 2, shard_rows, key.decode);
  p.final_ctas = final_wait_ctas(p.hook.sched);
  p.hook.ctx = comm.dev_ctx();
  const WindowRef ww = comm.find_window(workspace, p.hook.lay.total, "workspace");
  p.hook.ws_win = ww.win, p.hook.ws_off = ww.offset;
  p.hook.c_win = ww.win, p.hook.c_off = 0;  // unused: finals stay on their owner
  p.hook.ws = static_cast<char*>(workspace);
  p.hook.ring = ring;
  p.hook.ring.rank = (uint16_t)comm.rank();
  fused_gemm::launch(comm, *fused_gemm::find_kernel(key), p, ww, {"gemm_reducescatter reinit", "gemm_reducescatter launch"}, stream);
}

}  // namespace tw::gemm_allreduce_impl
