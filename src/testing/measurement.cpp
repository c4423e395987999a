// Per-thread measurement choices (measurement.hpp).
#include "measurement.hpp"

#include "tilewire/runtime/errors.hpp"

namespace tw::testing {
namespace {
thread_local std::optional<GemmPlan> t_gemm_plan;
thread_local bool t_untraced = false;
}  // namespace

void set_gemm_plan(const std::optional<GemmPlan>& plan) {
  if (plan) {
    gemm_impl::StreamKPlan probe;
    const Status st = gemm_impl::apply_streamk_plan_override(plan->streamk, &probe);
    TW_REQUIRE(st.ok, kInvalidArgument, st.reason);
  }
  t_gemm_plan = plan;
}
const std::optional<GemmPlan>& gemm_plan() { return t_gemm_plan; }

bool untraced_kernels_built() {
#ifdef TILEWIRE_BENCH_KERNELS
  return true;
#else
  return false;
#endif
}
void set_untraced_kernels(bool on) {
  TW_REQUIRE(!on || untraced_kernels_built(), kUnsupported,
             "the fused kernels without trace code exist in the measurement build only (configure with "
             "-DTILEWIRE_BENCH_KERNELS=ON)");
  t_untraced = on;
}
bool untraced_kernels() { return t_untraced; }

}  // namespace tw::testing
