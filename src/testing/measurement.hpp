// src/testing/measurement.hpp — what only the benches and tests choose: stand-ins for the
// library's own choices, per host thread (a virtual team's ranks are threads, so each rank sets
// its own), set between calls. Not public API; the install has no such header.
//
//   set_gemm_plan        tw::gemm's kernel and stream-K plan, as TILEWIRE_GEMM_KERNEL and
//                        TILEWIRE_GEMM_STREAMK_PLAN choose them (`tilewire bench gemm --plans`
//                        times many plans in one process on the same inputs)
//   set_untraced_kernels the fused GEMM + all-reduce kernels built without trace code (relay,
//                        exchange): what tracing-off costs (`tilewire bench gemm-allreduce
//                        --trace`). They exist in the measurement build only
//                        (-DTILEWIRE_BENCH_KERNELS=ON; untraced_kernels_built()).
#pragma once
#include <optional>
#include <string>

#include "../ops/gemm/plan.hpp"  // gemm_impl::KernelPref

namespace tw::testing {

struct GemmPlan {
  gemm_impl::KernelPref kernel = gemm_impl::KernelPref::kAuto;
  std::string streamk;  // apply_streamk_plan_override's syntax; empty: the plan's own
};
// This thread's tw::gemm calls use `plan` until reset with nullopt. A bad stream-K spec throws
// kInvalidArgument and changes nothing.
void set_gemm_plan(const std::optional<GemmPlan>& plan);
const std::optional<GemmPlan>& gemm_plan();  // this thread's

// This thread's gemm_allreduce calls run the kernels without trace code (no trace ring may be
// set; other paths are unaffected) until reset. Throws kUnsupported outside the measurement build.
void set_untraced_kernels(bool on);
bool untraced_kernels();  // this thread's
bool untraced_kernels_built();

}  // namespace tw::testing
