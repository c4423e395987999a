// Host-side planning of the fused GEMM + all-reduce (no GPU): argument checks, workspace size.
// Unit-tested in tests/cpu/gemm_allreduce_plan_test.cpp.
#include "plan.hpp"

#include <cstdint>
#include <string>

#include "../fused_gemm/cost_model.hpp"
#include "../gemm/launch.hpp"
#include "../gemm/plan.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace gemm_allreduce_impl {

static_assert(kBlkM == gemm_impl::kBlkM && kBlkN == gemm_impl::kBlkN && Layout{}.cluster_m == gemm_impl::kClusterM,
              "plan.hpp states the GEMM's tile");
static_assert(kDecodeBlkN == gemm_impl::kDecodeBlkN && kDecodeClusterM == gemm_impl::kDecodeClusterM &&
                  kDecodeMaxM == gemm_impl::kHookDecodeMaxM,
              "the fused ops' decode tile is the GEMM's");

namespace {

Status fail(std::string why) { return Status{false, "gemm_allreduce: " + std::move(why)}; }

bool overlap(const void* p, size_t pn, const void* q, size_t qn) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + qn && b < a + pn;
}

int partial_bytes(PartialPrecision p) { return p == PartialPrecision::kFloat32 ? 4 : 2; }

}  // namespace

GemmArgs as_gemm_args(const GemmAllReduceArgs& a) {
  return GemmArgs{a.A, a.B, a.C, a.M, a.N, a.K_local, a.dtype, a.b_layout};
}

GemmConfig as_gemm_config(const GemmAllReduceConfig& cfg, int rank, int nranks) {
  GemmConfig g;
  g.reserved_sms = cfg.reserved_sms;
  g.raster = cfg.raster;
  g.swizzle = cfg.swizzle;
  g.rank = rank, g.nranks = nranks;  // exchange / owner: 0 of 1, no rotation
  return g;
}

GemmAllReduceAlgo resolve_algo(int P, const GemmAllReduceConfig& cfg, BLayout b, DType dtype, int M) {
  if (cfg.algo != GemmAllReduceAlgo::kAuto) return cfg.algo;
  if (M <= kDecodeMaxM) return GemmAllReduceAlgo::kOwner;           // the kernel with the decode tile
  if (dtype != DType::kBFloat16) return GemmAllReduceAlgo::kOwner;  // the only fp16 kernel built
  if (cfg.partials != PartialPrecision::kBFloat16) return GemmAllReduceAlgo::kOwner;
  if (P >= 2 && P <= kRelayMaxRanks) return GemmAllReduceAlgo::kRelay;
  return P <= 1 && b == BLayout::kNK ? GemmAllReduceAlgo::kExchange : GemmAllReduceAlgo::kOwner;
}

bool owner_tile_is_decode(const GemmAllReduceArgs& a, GemmAllReduceAlgo algo) {
  return algo == GemmAllReduceAlgo::kOwner && a.M <= kDecodeMaxM;
}

bool relay_slots_padded() {
#ifdef TILEWIRE_BENCH_KERNELS
  return true;
#else
  return false;
#endif
}

CallPlan plan_call(const GemmAllReduceArgs& a, int P, const GemmAllReduceConfig& cfg) {
  CallPlan c;
  c.algo = resolve_algo(P, cfg, a.b_layout, a.dtype, a.M);
  c.decode = owner_tile_is_decode(a, c.algo);
  const GemmAllReduceAlgo algo = c.algo;
  const bool decode = c.decode;
  const Raster r =
      gemm_impl::resolve_raster(as_gemm_args(a), as_gemm_config(cfg), kBlkM, decode ? kDecodeBlkN : kBlkN);
  if (algo == GemmAllReduceAlgo::kRelay) {
    const int units = gemm_impl::ceil_div(gemm_impl::ceil_div(a.M, kBlkM), gemm_impl::kClusterM) *
                      gemm_impl::ceil_div(a.N, kBlkN);
    c.lay = make_relay_layout(a.M, a.N, r, units, P, 0, 0, 0, relay_slots_padded());
  } else if (algo == GemmAllReduceAlgo::kExchange) {
    c.lay = make_exchange_layout(a.M, a.N, P, r);
  } else {
    c.lay = make_layout(a.M, a.N, P, r, partial_bytes(cfg.partials), decode);
  }
  return c;
}

Layout layout_for(const GemmAllReduceArgs& a, int P, const GemmAllReduceConfig& cfg) { return plan_call(a, P, cfg).lay; }

Status check_args(const GemmAllReduceArgs& a, int nranks, const GemmAllReduceConfig& cfg, CallPlan* plan) {
  if (nranks < 1) return fail("communicator has no ranks");
  // Before the GEMM's own checks, so that the reason names the fused op's kernels.
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return fail(std::string("dtype ") + dtype_name(a.dtype) +
                " is not built for the fused op (bfloat16: every algorithm; float16: kOwner, which kAuto picks)");
  if (Status s = can_implement(as_gemm_args(a), as_gemm_config(cfg)); !s) return fail(s.reason);
  if (cfg.partials != PartialPrecision::kBFloat16 && cfg.partials != PartialPrecision::kFloat32)
    return fail("unknown partial precision (kBFloat16 or kFloat32)");
  if (cfg.algo != GemmAllReduceAlgo::kAuto && cfg.algo != GemmAllReduceAlgo::kExchange &&
      cfg.algo != GemmAllReduceAlgo::kOwner && cfg.algo != GemmAllReduceAlgo::kRelay)
    return fail("unknown algorithm (kAuto, kRelay, kExchange or kOwner)");
  if (a.dtype == DType::kFloat16 && cfg.algo == GemmAllReduceAlgo::kRelay)
    return fail("the relay algorithm is built for bf16 only; use kAuto or kOwner for fp16");
  if (a.dtype == DType::kFloat16 && cfg.algo == GemmAllReduceAlgo::kExchange)
    return fail("the exchange algorithm is built for bf16 only; use kAuto or kOwner for fp16");
  if (a.b_layout == BLayout::kKN && resolve_algo(nranks, cfg, a.b_layout, a.dtype, a.M) == GemmAllReduceAlgo::kExchange)
    return fail("the exchange algorithm is built for B as [N, K_local] (kNK) only; use kAuto, kRelay or kOwner "
                "with B as [K_local, N]");
  if (cfg.algo == GemmAllReduceAlgo::kRelay &&
      (nranks < 2 || nranks > kRelayMaxRanks || cfg.partials != PartialPrecision::kBFloat16))
    return fail("the relay algorithm is for 2 to " + std::to_string(kRelayMaxRanks) + " ranks with bf16 partials (got " +
                std::to_string(nranks) + " ranks" + (cfg.partials != PartialPrecision::kBFloat16 ? ", fp32 partials" : "") +
                "); use kOwner or kAuto");
  if (cfg.algo == GemmAllReduceAlgo::kExchange && cfg.partials != PartialPrecision::kBFloat16)
    return fail("the exchange algorithm sends bf16 partials only (its shared-memory tile is bf16); use kOwner "
                "for fp32 partials");
  if (cfg.path != GemmAllReducePath::kAuto && cfg.path != GemmAllReducePath::kFused &&
      cfg.path != GemmAllReducePath::kSequential)
    return fail("unknown path (kAuto, kFused or kSequential)");
  if (cfg.trace.on() && (cfg.trace.count == nullptr || cfg.trace.capacity == 0))
    return fail("the trace ring has events but no counter or no capacity (make it with TraceBuffer::ring())");
  if (!cfg.trace.on() && (cfg.trace.count != nullptr || cfg.trace.capacity != 0))
    return fail("the trace ring has a counter or a capacity but no events (make it with TraceBuffer::ring(), or "
                "leave it empty to trace nothing)");
  if (a.workspace == nullptr) return fail("workspace is null (allocate workspace_size() bytes in a window)");
  if (reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0) return fail("workspace is not 256-byte aligned");
  const CallPlan c = plan_call(a, nranks, cfg);
  const Layout& l = c.lay;
  const size_t es = dtype_size(a.dtype);
  const size_t bytes_a = (size_t)a.M * a.K_local * es, bytes_b = (size_t)a.N * a.K_local * es,
               bytes_c = (size_t)a.M * a.N * es;
  if (overlap(a.workspace, l.total, a.C, bytes_c)) return fail("workspace overlaps C");
  if (overlap(a.workspace, l.total, a.A, bytes_a)) return fail("workspace overlaps A");
  if (overlap(a.workspace, l.total, a.B, bytes_b)) return fail("workspace overlaps B");
  if (plan) *plan = c;
  return Status{};
}

}  // namespace gemm_allreduce_impl

bool gemm_allreduce_prefers_fused(int M, int N, int K_local, int nranks) {
  // One rank: the fused path is the GEMM straight into C (gemm_allreduce), less than the
  // sequential path's GEMM and copy.
  if (nranks <= 1) return true;
  // 2 to 8 ranks: where the cost model (src/ops/fused_gemm/cost_model.hpp, docs/fused_gemm.md)
  // predicts the fused kernel faster than GEMM + tw::allreduce on H200 NVLink by its margin, its
  // GEMM time the model's estimate, the fused kernel's overhead the one measured
  // (default_overhead). Calibrated on the 2 x H200 runs: it reproduces their rule (fused at
  // M >= 2048 and not below, 20 of 20 shapes). More ranks: the sequential path.
  if (nranks > 8) return false;
  using namespace fused_gemm;
  const Shape s{M, N, K_local, 2};
  try {
    return prefers_fused(predict(FusedOp::kGemmAllReduce, s, nranks, estimate_gemm_us(M, N, K_local, 2),
                                 default_overhead(FusedOp::kGemmAllReduce, s, nranks)));
  } catch (const tw::Error&) {
    return false;  // a shape the model does not cover
  }
}

size_t workspace_size(const GemmAllReduceArgs& a, int nranks, const GemmAllReduceConfig& cfg) {
  if (a.M <= 0 || a.N <= 0 || nranks < 1) return 0;
  return gemm_allreduce_impl::layout_for(a, nranks, cfg).total;
}

}  // namespace tw
