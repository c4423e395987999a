// tools/bench_gemm.hpp — what the two drivers of `tilewire bench gemm` share: bench_gemm.cu (the
// options, the seeded inputs, the check, one rank on GPU 0) and bench_gemm_virtual.cu (--virtual P:
// P ranks on GPU 0 at once, each on its SM budget). CLI-internal.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "testing/measurement.hpp"  // testing::GemmPlan
#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/dtype.hpp"

namespace tw::cli::gemm_bench {

struct Shape {
  int m, n, k;
};

struct GemmBenchArgs {
  std::vector<Shape> shapes;
  BLayout layout = BLayout::kNK;
  DType dtype = DType::kBFloat16;
  int iters = 20, warmup = 5, repeats = 5;
  GemmConfig cfg;  // cfg.reserved_sms: the user's (--virtual adds the SMs outside a rank's budget)
  std::string json_path;
  std::vector<std::string> plans = {"auto"};  // --plans
  int virtual_ranks = 0;                      // --virtual P; 0: one rank, the whole GPU
  bool help = false;
};

// GPU time of warm-up before a shape's first timing (time_pair_us in bench_gemm.cu says why).
inline constexpr double kWarmMs = 200.0;

// p[0, n) = uniform in [-1, 1) from (seed, i), in `dtype` (bf16 or fp16); 1024 x 256 threads.
void fill_operand(void* p, size_t n, DType dtype, uint64_t seed, cudaStream_t st);
// *wrong += the elements of got[0, n) farther from want than |want| 2^-6 + 2^-6 (NaN counts).
void count_wrong_async(const void* got, const void* want, size_t n, DType dtype, unsigned long long* wrong,
                       cudaStream_t st);
// "auto": nullopt (tw::gemm's rule); "hook", "streamk": that kernel; else a stream-K spec.
std::optional<testing::GemmPlan> measurement_plan_of(const std::string& spec);

// --virtual P (bench_gemm_virtual.cu): the sweep on P virtual ranks of GPU 0. Same exit status as
// bench_gemm: 0 when every check passed, 1 when not. The caller has checked that a GPU exists.
int bench_gemm_virtual(const GemmBenchArgs& a);

// --grouped (bench_grouped.cu): tw::grouped_gemm on MoE expert GEMMs against cuBLASLt, its own
// options (argv without --grouped). 0 when every check passed, 1 when not; throws
// tw::Error(kUnsupported) without a GPU.
int bench_grouped(const std::vector<std::string>& argv);

}  // namespace tw::cli::gemm_bench
