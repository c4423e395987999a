// The fused-GEMM engine's kernel table and workspace signatures without a GPU
// (src/ops/fused_gemm/engine.hpp): every kernel a legal call resolves to is built, the pairs the
// checks refuse have none, and layouts that differ sign differently.
#include <cstdint>
#include <set>
#include <string>

#include "cpu_util.hpp"
#include "ops/fused_gemm/engine.hpp"
#include "ops/gemm_allreduce/hook_params.hpp"
#include "ops/gemm_allreduce/plan.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw::GemmAllReduceAlgo;
using tw::GemmAllReduceArgs;
using tw::GemmAllReduceConfig;
using tw::PartialPrecision;
namespace fg = tw::fused_gemm;
namespace ai = tw::gemm_allreduce_impl;

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kA = 0x7f0000000000, kB = 0x7f1000000000, kC = 0x7f2000000000, kW = 0x7f3000000000;

std::string name(const fg::KernelKey& k) {
  return std::to_string((int)k.algo) + " " + tw::dtype_name(k.dtype) + (k.b == BLayout::kNK ? " NK" : " KN") +
         (k.decode ? " decode" : "");
}

// gemm_allreduce: every call check_args accepts resolves to a kernel of the table.
// fn(P, a, cfg, plan) for every gemm_allreduce call check_args accepts over a grid of ranks,
// dtypes, B layouts, M (decode and large), algorithms and partials; plan: the one it left.
template <class Fn>
int for_each_accepted_call(Fn&& fn) {
  int n = 0;
  for (int P : {1, 2, 3, 4, 8})
    for (DType t : {DType::kBFloat16, DType::kFloat16})
      for (BLayout b : {BLayout::kNK, BLayout::kKN})
        for (int M : {1, 128, 256, 257, 4096})
          for (GemmAllReduceAlgo algo :
               {GemmAllReduceAlgo::kAuto, GemmAllReduceAlgo::kOwner, GemmAllReduceAlgo::kRelay, GemmAllReduceAlgo::kExchange})
            for (PartialPrecision pp : {PartialPrecision::kBFloat16, PartialPrecision::kFloat32}) {
              const GemmAllReduceArgs a{at(kA), at(kB), at(kC), M, 1024, 512, t, b, at(kW)};
              GemmAllReduceConfig cfg;
              cfg.algo = algo;
              cfg.partials = pp;
              ai::CallPlan plan;
              if (!ai::check_args(a, P, cfg, &plan).ok) continue;
              fn(P, a, cfg, plan);
              ++n;
            }
  return n;
}

TEST(FusedEngine, EveryAcceptedAllReduceCallHasItsKernel) {
  const int checked = for_each_accepted_call([](int P, const GemmAllReduceArgs& a, const GemmAllReduceConfig&,
                                                const ai::CallPlan& plan) {
    const fg::KernelKey key{plan.algo, a.dtype, a.b_layout, plan.decode};
    const fg::Kernel* k = fg::find_kernel(key);
    ASSERT_NE(k, nullptr) << name(key) << " (P " << P << ", M " << a.M << ")";
    EXPECT_EQ(k->key.algo, key.algo);
    EXPECT_EQ(k->key.dtype, key.dtype);
    EXPECT_EQ(k->key.b, key.b);
    EXPECT_EQ(k->key.decode, key.decode);
  });
  EXPECT_GT(checked, 100);
}

// The plan a call makes once (check_args) is what each rule gives alone: the algorithm, the tile,
// the layout, and the workspace size a caller allocates by (tw::workspace_size), which the call
// then looks its workspace window up with.
TEST(FusedEngine, TheCallsPlanIsEachRulesOwn) {
  const int checked = for_each_accepted_call([](int P, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg,
                                                const ai::CallPlan& plan) {
    const std::string at = "P " + std::to_string(P) + ", M " + std::to_string(a.M) + ", " + tw::dtype_name(a.dtype);
    EXPECT_EQ(plan.algo, ai::resolve_algo(P, cfg, a.b_layout, a.dtype, a.M)) << at;
    EXPECT_EQ(plan.decode, ai::owner_tile_is_decode(a, plan.algo)) << at;
    EXPECT_EQ(fg::layout_signature(plan.lay), fg::layout_signature(ai::layout_for(a, P, cfg))) << at;
    EXPECT_EQ(plan.lay.total, tw::workspace_size(a, P, cfg)) << at;
    EXPECT_GT(plan.lay.total, 0u) << at;
  });
  EXPECT_GT(checked, 100);
}

// gemm_reducescatter's fused path: the relay where scatter_uses_relay says so, else the owner
// kernel (on its decode tile at small M); both built for every dtype and layout it runs.
TEST(FusedEngine, EveryReduceScatterKernelIsBuilt) {
  for (int P : {1, 2, 3, 4, 8})
    for (DType t : {DType::kBFloat16, DType::kFloat16})
      for (BLayout b : {BLayout::kNK, BLayout::kKN})
        for (int M : {1, 128, 256, 1024, 4096, 3000}) {
          const int S = (M + P - 1) / P;
          const int shard = (S + 127) / 128 * 128;
          const bool relay = ai::scatter_uses_relay(M, P, shard, t);
          const fg::KernelKey key{relay ? GemmAllReduceAlgo::kRelay : GemmAllReduceAlgo::kOwner, t, b,
                                  !relay && ai::scatter_tile_is_decode(M)};
          EXPECT_NE(fg::find_kernel(key), nullptr) << name(key) << " (P " << P << ", M " << M << ")";
        }
}

// The pairs no kernel is built for (check_args refuses them) are not in the table.
TEST(FusedEngine, UnbuiltPairsHaveNoKernel) {
  EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kExchange, DType::kBFloat16, BLayout::kKN, false}), nullptr);
  for (BLayout b : {BLayout::kNK, BLayout::kKN}) {
    EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kRelay, DType::kFloat16, b, false}), nullptr);
    EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kExchange, DType::kFloat16, b, false}), nullptr);
    EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kRelay, DType::kBFloat16, b, true}), nullptr);
    EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kAuto, DType::kBFloat16, b, false}), nullptr);
  }
  EXPECT_EQ(fg::find_kernel({GemmAllReduceAlgo::kOwner, DType::kFloat32, BLayout::kNK, false}), nullptr);
}

// A workspace record tells layouts apart by their signature; 0 and 1 are never one (they mean
// "nothing" and "the sequential path's data").
TEST(FusedEngine, LayoutsSignDifferently) {
  std::set<uint64_t> seen;
  int layouts = 0;
  for (int P : {2, 3, 4})
    for (int M : {512, 4096})
      for (int N : {1024, 8192}) {
        const GemmAllReduceArgs a{at(kA), at(kB), at(kC), M, N, 512, DType::kBFloat16, BLayout::kNK, at(kW)};
        for (GemmAllReduceAlgo algo : {GemmAllReduceAlgo::kOwner, GemmAllReduceAlgo::kRelay}) {
          GemmAllReduceConfig cfg;
          cfg.algo = algo;
          const uint64_t s = fg::layout_signature(ai::layout_for(a, P, cfg));
          EXPECT_GT(s, fg::kHeldSequential);
          seen.insert(s);
          ++layouts;
        }
      }
  EXPECT_EQ((int)seen.size(), layouts);
}

// The relay's pacing budget leaves the consumers' wait out of the period it paces over.
TEST(RelayPacing, TheConsumersWaitDoesNotGrowTheBudget) {
  constexpr uint64_t kMax = 1000000;
  EXPECT_EQ(ai::relay_pace_budget_ns(26000, 0, 60, kMax), 15600u);
  EXPECT_EQ(ai::relay_pace_budget_ns(36000, 10000, 60, kMax), 15600u);  // the same work, a 10 us wait
  EXPECT_EQ(ai::relay_pace_budget_ns(26000, 0, 0, kMax), 0u);           // unpaced
  EXPECT_EQ(ai::relay_pace_budget_ns(5000, 5000, 60, kMax), 0u);        // nothing but waiting
  EXPECT_EQ(ai::relay_pace_budget_ns(5000, 9000, 60, kMax), 0u);        // clocks of two threads: no underflow
  EXPECT_EQ(ai::relay_pace_budget_ns(10000000, 0, 60, kMax), kMax);
}

// One CTA's tiles in steady state, in ns: a mainloop of m, an epilogue of e after the consumers'
// wait for `ready`, which the comm warp completes `budget + c` after the last tile was staged (its
// paced pushes, then the fence, the flags and the next partial's load). Returns the consumers'
// wait per tile after many tiles; count_wait = false prices the budget on the whole period, as
// the pacing did before (the wait fed back into it).
uint64_t steady_wait_ns(uint64_t m, uint64_t e, uint64_t c, int pct, bool count_wait) {
  uint64_t staged = 0, period = m + e, waited = 0;
  for (int j = 0; j < 200; ++j) {
    const uint64_t ready = staged + ai::relay_pace_budget_ns(period, count_wait ? waited : 0, pct, 1000000) + c;
    const uint64_t mma_end = staged + m;
    waited = ready > mma_end ? ready - mma_end : 0;
    const uint64_t next = mma_end + waited + e;
    period = next - staged;
    staged = next;
  }
  return waited;
}

TEST(RelayPacing, NoFeedbackFromAShortMainloop) {
  // A 25 us mainloop (K_local 2048 at a virtual rank's 33 SMs) and 12 us of unpaced work per tile:
  // the pushes paced over 60% of the working period (15.6 us) end 2.6 us after the mainloop.
  const uint64_t w = steady_wait_ns(25000, 1000, 12000, 60, true);
  EXPECT_NEAR((double)w, 2600.0, 50.0);
  // Priced on the whole period, each wait lengthens the next budget by 60% of itself: 6.5 us.
  EXPECT_GT(steady_wait_ns(25000, 1000, 12000, 60, false), 2 * w);
  // A long mainloop (K_local 7168) waits for nothing either way.
  EXPECT_EQ(steady_wait_ns(70000, 1000, 12000, 60, true), 0u);
}

}  // namespace
