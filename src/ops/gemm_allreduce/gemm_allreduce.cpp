// tw::gemm_allreduce(): checks (plan.cpp + communicator + device), which decide the call once (a
// Call: its plan, kernel, residency and windows), the path (fused or sequential), then the
// fused-GEMM engine (../fused_gemm/engine.hpp: schedule, workspace record and launch of the
// call's kernel) or the sequential path.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "../../runtime/op_entry.hpp"
#include "../../testing/measurement.hpp"
#include "../fused_gemm/engine.hpp"
#include "../gemm/plan.hpp"
#include "../gemm/team_gemm.hpp"
#include "decode.hpp"
#include "launch.hpp"
#include "plan.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

Status fail(std::string why) { return Status{false, "gemm_allreduce: " + std::move(why)}; }

// A call as decided once, by check(): its plan (algorithm, tile, workspace layout: plan.hpp), the
// kernel it runs, that kernel's residency on the rank's SM budget, and the windows of C and the
// workspace. The call record and the launch read it; nothing is decided twice.
struct Call {
  gemm_allreduce_impl::CallPlan plan;
  fused_gemm::KernelKey key;
  fused_gemm::Residency res;
  WindowRef c, ws;
};

Status window_of(const Comm& comm, const void* p, size_t bytes, const char* what, WindowRef* out) {
  try {
    *out = comm.find_window(p, bytes, what);
  } catch (const Error& e) {
    return fail(e.what());
  }
  return Status{};
}

// Every check of a call (tw::can_implement's), filling *call as it goes.
Status check(const Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, Call* call) {
  if (comm.aborted()) return fail("communicator was aborted; create a new one");
  int dev = -1;
  cudaGetDevice(&dev);
  if (dev != comm.device())
    return fail("current CUDA device is " + std::to_string(dev) + " but the communicator is on device " +
                std::to_string(comm.device()) + " (call cudaSetDevice first)");
  if (!comm.all_lsa())
    return fail("needs every rank load/store reachable (LSA team " + std::to_string(comm.lsa_size()) + " of " +
                std::to_string(comm.nranks()) + " ranks); no GIN path exists for the fused op");
  if (Status s = gemm_allreduce_impl::check_args(a, comm.lsa_size(), cfg, &call->plan); !s) return s;
  if (Status s = window_of(comm, a.C, (size_t)a.M * a.N * dtype_size(a.dtype), "C", &call->c); !s) return s;
  const size_t ws = call->plan.lay.total;  // workspace_size()
  if (Status s = window_of(comm, a.workspace, ws, "workspace", &call->ws); !s)
    return fail(s.reason + " (the workspace needs " + std::to_string(ws) + " bytes: workspace_size())");
  call->key = fused_gemm::KernelKey{call->plan.algo, a.dtype, a.b_layout, call->plan.decode};
  if (Status s = fused_gemm::residency(comm, call->key, "gemm_allreduce", &call->res); !s) return s;
  if (Status s = gemm_impl::check_sms(gemm_allreduce_impl::as_gemm_config(cfg), call->res.num_sms, gemm_impl::kClusterM); !s)
    return fail(s.reason);
  return Status{};
}

// The call record TILEWIRE_CHECK_CALLS compares across ranks (Comm::agree_on_call): everything
// that shapes the kernel's protocol, the windows and offsets of C and the workspace among it.
void agree_on_call(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, bool fused, const Call& call) {
  const auto at = [](const WindowRef& w) {
    return "window " + std::to_string(w.ordinal) + " offset " + std::to_string(w.offset);
  };
  const auto num = [](long long v) { return std::to_string(v); };
  comm.agree_on_call("gemm_allreduce",
                     {{"M", num(a.M)},
                      {"N", num(a.N)},
                      {"K_local", num(a.K_local)},
                      {"dtype", dtype_name(a.dtype)},
                      {"B layout", blayout_name(a.b_layout)},
                      {"path", gemm_allreduce_path_name(fused ? GemmAllReducePath::kFused : GemmAllReducePath::kSequential)},
                      {"algorithm", gemm_allreduce_algo_name(call.plan.algo)},
                      {"partials", cfg.partials == PartialPrecision::kFloat32 ? "fp32" : "2-byte (C's dtype)"},
                      {"raster", gemm_raster_name(cfg.raster)},
                      {"swizzle", num(cfg.swizzle)},
                      {"reserved_sms", num(cfg.reserved_sms)},
                      {"C", at(call.c)},
                      {"workspace", at(call.ws)}});
}

}  // namespace

Status can_implement(const Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg) {
  Call call;
  return check(comm, a, cfg, &call);
}

void gemm_allreduce(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, cudaStream_t stream) {
  const bool fused = cfg.path == GemmAllReducePath::kFused ||
                     (cfg.path == GemmAllReducePath::kAuto &&
                      gemm_allreduce_prefers_fused(a.M, a.N, a.K_local, comm.lsa_size()));
  Call call;
  const auto checks = [&] {
    if (Status s = check(comm, a, cfg, &call); !s) return s;
    if (testing::untraced_kernels() && cfg.trace.on())
      return fail("the kernels without trace code (testing::set_untraced_kernels) and a trace ring together");
    return Status{};
  };
  // Ordered before the sequential GEMM writes the workspace.
  const OpEntry entry(comm, "gemm_allreduce", stream, checks, [&] { agree_on_call(comm, a, cfg, fused, call); });
  if (fused && comm.lsa_size() == 1 && cfg.algo == GemmAllReduceAlgo::kAuto && !cfg.trace.on()) {
    // One rank: the sum of one partial. The fused path is the GEMM alone, straight into C; an
    // explicit algorithm or a trace runs that fused kernel (its tiles are what they show).
    gemm_impl::team_gemm(comm, gemm_allreduce_impl::as_gemm_args(a), cfg.reserved_sms, stream);
    return;
  }
  if (!fused) {
    // Sequential: the partial (cuBLASLt, else tw::gemm), then tw::allreduce into C: out of place
    // from the workspace's staging area (the two-shot push kernel needs it) when
    // sequential_from_staging() says it is safe, else in place in C. The workspace header (the
    // fused kernels' call counter) is never touched.
    GemmArgs g = gemm_allreduce_impl::as_gemm_args(a);
    const gemm_allreduce_impl::Layout& lay = call.plan.lay;
    const size_t c_bytes = (size_t)a.M * a.N * dtype_size(a.dtype);
    if (gemm_allreduce_impl::sequential_from_staging(lay, c_bytes, oneshot_max_bytes(comm))) {
      g.C = static_cast<char*>(a.workspace) + lay.staging_off;
      bool first = false;  // the next fused call on this workspace re-initializes its flags
      (void)fused_gemm::must_reinit(call.ws, fused_gemm::kHeldSequential, stream, false, &first);
    }
    gemm_impl::team_gemm(comm, g, cfg.reserved_sms, stream);
    AllReduceArgs ar;
    ar.send = g.C;
    ar.recv = a.C;
    ar.count = (size_t)a.M * a.N;
    ar.dtype = a.dtype;
    allreduce(comm, ar, stream);
    return;
  }
  if (gemm_allreduce_impl::runs_decode_path(a, cfg, comm.lsa_size())) {  // the plain GEMM, then C all-reduced in place
    gemm_allreduce_impl::decode_allreduce(comm, a, cfg, stream);
    return;
  }
  const bool relay = call.plan.algo == GemmAllReduceAlgo::kRelay;

  gemm_allreduce_impl::LaunchParams p;
  p.gemm = gemm_allreduce_impl::as_gemm_args(a);
  // Relay: rank r walks from unit order index r * floor(units / P) (LSA rank == rank: all-LSA).
  p.gemm_cfg = relay ? gemm_allreduce_impl::as_gemm_config(cfg, comm.dev_ctx().lsa_rank, comm.lsa_size())
                     : gemm_allreduce_impl::as_gemm_config(cfg);
  fused_gemm::apply_relay_knobs(comm, p);
  if (relay) p.gemm_cfg.walk_rounds = p.relay.rounds;  // the staggered walk, when it applies (scheduler.hpp)
  fused_gemm::fill_schedule(p, call.res, cfg.reserved_sms);
  if (relay && p.relay.waves > 0) {  // the interleaved segments (scheduler.hpp), where the units allow
    p.gemm_cfg.walk_chunk =
        gemm_impl::interleave_chunk(p.hook.sched.units(), comm.lsa_size(), p.hook.sched.ctas, p.relay.waves);
    if (p.gemm_cfg.walk_chunk > 0) fused_gemm::fill_schedule(p, call.res, cfg.reserved_sms);
  }
  p.hook.lay = call.plan.lay;
  if (relay) {  // the same walk in the layout as in the schedule (the memory layout does not change)
    const gemm_allreduce_impl::Layout st = gemm_allreduce_impl::make_relay_layout(
        a.M, a.N, p.raster, p.hook.sched.units(), comm.lsa_size(), 0, p.gemm_cfg.walk_rounds, p.hook.sched.ilv_d,
        gemm_allreduce_impl::relay_slots_padded());
    TW_REQUIRE(st.stag_q == p.hook.sched.stag_q && st.stag_d == p.hook.sched.stag_d && st.ilv_d == p.hook.sched.ilv_d,
               kState, "gemm_allreduce: the relay's walk differs between its layout and its schedule");
    TW_REQUIRE(st.total == p.hook.lay.total && st.split == p.hook.lay.split, kState,
               "gemm_allreduce: the relay's walk changed its layout");
    p.hook.lay.stag_q = st.stag_q, p.hook.lay.stag_d = st.stag_d, p.hook.lay.ilv_d = st.ilv_d;
  }
  fused_gemm::apply_owner_knobs(comm, p);
  p.final_ctas = gemm_allreduce_impl::final_wait_ctas(p.hook.sched);
  p.hook.ctx = comm.dev_ctx();
  p.hook.c_win = call.c.win, p.hook.c_off = call.c.offset;
  p.hook.ws_win = call.ws.win, p.hook.ws_off = call.ws.offset;
  p.hook.ws = static_cast<char*>(a.workspace);
  p.untraced = testing::untraced_kernels();
  p.hook.ring = cfg.trace;
  p.hook.ring.rank = (uint16_t)comm.rank();
  fused_gemm::launch(comm, *fused_gemm::find_kernel(call.key), p, call.ws, {"gemm_allreduce reinit", "gemm_allreduce launch"},
                     stream);
}

}  // namespace tw
