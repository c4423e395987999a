// tools/bench_gemm.cu — `tilewire bench gemm`: tilewire's sm90 GEMM against cuBLASLt, same run,
// same inputs, every result checked against cuBLASLt's on the device.
//
//   tilewire bench gemm -m 8192 -n 8192 -k 8192 [--layout nk|kn] [--dtype bf16|fp16]
//                       [--sweep acceptance|grid|skinny|tail|decode|decode-m|narrow|ragged]
//                       [--iters 20] [--warmup 5] [-R 5] [--reserved-sms 0] [--swizzle 4] [--json FILE]
//                       [--plans "auto;hook;tile=swap128x64,mode=splitk,splits=8;..."] [--virtual P]
//
// Inputs rotate over enough (A, B, C) sets to exceed twice the L2, so no timed call finds its
// operands cached by the previous one. Time: CUDA events around `iters` back-to-back calls, median
// of `repeats`, the two kernels timed in alternation after a warm-up of both (time_pair_us); each
// row also gives the host time per call (enqueueing only). TFLOP/s = 2*M*N*K / time. #wrong:
// elements of tilewire's C farther from cuBLASLt's than 2 bf16 ulps (relative 2^-6) + 2^-6
// absolute (the same bound for fp16, whose ulps are smaller).
// Sweeps: decode = M in {1, 16, 32, 64, 128, 256} x N in {4096, 8192, 14336, 57344} x K in
// {4096, 8192}; decode-m = every M from 1 to 256 at 8192 x 8192 and 14336 x 4096 (N x K: the
// decode plan's rows change with M between decode's points, and each M must hold, not only
// those); narrow = the decode M x N in {1024, 2048} x K in {4096, 8192} (tensor-parallel
// shards of N); ragged = M in {3000, 5000, 6143} x N in {5144, 10248} x K in {3584, 4000}. Exit 0
// when every check passed, 1 when not.
// --plans: every shape under each plan in turn (the same inputs; each plan checked and timed in
// alternation with cuBLASLt), then the best per shape: what a plan rule is read off. A plan is auto
// (tw::gemm's rule), hook, streamk (the stream-K kernel, its own plan) or a TILEWIRE_GEMM_STREAMK_PLAN
// spec (the stream-K kernel with those overrides), set through testing::set_gemm_plan.
// --virtual P: P ranks on GPU 0 at once, each its own inputs on SMs / P, slowest rank (bench_gemm_virtual.cu).
// --grouped: tw::grouped_gemm on MoE expert GEMMs, with its own options (bench_grouped.cu).
// cuBLASLt is dlopen()ed (cublaslt.hpp), so the CLI does not need it to start.
// Measured on nvidia-h200: docs/gemm.md names the result files.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.hpp"  // median, parse_virtual_ranks
#include "bench_gemm.hpp"
#include "commands.hpp"
#include "testing/measurement.hpp"  // testing::set_gemm_plan
#include "ops/gemm/cublaslt.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::cli {
using lt::LtHandle;
using lt::LtMatmul;
using gemm_bench::GemmBenchArgs;
using gemm_bench::Shape;

namespace gemm_bench {
namespace {

template <class T>
__global__ void fill(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = (seed + i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    p[i] = T(((float)(z >> 40) / (float)(1u << 24)) * 2.f - 1.f);  // [-1, 1)
  }
}

template <class T>
__global__ void count_wrong(const T* got, const T* want, size_t n, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float g = float(got[i]), w = float(want[i]);
    if (!(fabsf(g - w) <= fabsf(w) * (1.f / 64) + 1.f / 64)) ++local;  // NaN counts as wrong
  }
  if (local) atomicAdd(wrong, local);
}

}  // namespace

void fill_operand(void* p, size_t n, DType dtype, uint64_t seed, cudaStream_t st) {
  if (dtype == DType::kFloat16) fill<<<1024, 256, 0, st>>>(static_cast<__half*>(p), n, seed);
  else fill<<<1024, 256, 0, st>>>(static_cast<__nv_bfloat16*>(p), n, seed);
}

void count_wrong_async(const void* got, const void* want, size_t n, DType dtype, unsigned long long* wrong,
                       cudaStream_t st) {
  if (dtype == DType::kFloat16)
    count_wrong<<<1024, 256, 0, st>>>(static_cast<const __half*>(got), static_cast<const __half*>(want), n, wrong);
  else
    count_wrong<<<1024, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(got), static_cast<const __nv_bfloat16*>(want),
                                      n, wrong);
}

std::optional<testing::GemmPlan> measurement_plan_of(const std::string& spec) {
  using gemm_impl::KernelPref;
  if (spec == "auto") return std::nullopt;
  if (spec == "hook") return testing::GemmPlan{KernelPref::kHook, ""};
  if (spec == "streamk") return testing::GemmPlan{KernelPref::kStreamK, ""};
  return testing::GemmPlan{KernelPref::kStreamK, spec};
}

}  // namespace gemm_bench

namespace {
using gemm_bench::kWarmMs;
using gemm_bench::measurement_plan_of;

constexpr const char* kUsage =
    "usage: tilewire bench gemm [options]\n"
    "  -m M -n N -k K        one shape (bf16: A [M,K], B per --layout, C [M,N] row-major)\n"
    "  --sweep NAME          acceptance: the five headline shapes (8192^3, 8192x8192x4096, 16384x8192x4096,\n"
    "                        4096x8192x8192, 2048x8192x4096); grid: M {128,512,2048,8192} x N {4096,8192}\n"
    "                        x K {4096,8192}; skinny: the grid's M = 128 shapes; tail: 4096x8192x8192,\n"
    "                        2048x8192x4096 (ragged last waves); decode: M {1,16,32,64,128,256} x N {4096,\n"
    "                        8192,14336,57344} x K {4096,8192}; decode-m: every M 1..256 at N x K 8192 x\n"
    "                        8192 and 14336 x 4096; narrow: the decode M x N {1024,2048} x K\n"
    "                        {4096,8192}; ragged: M {3000,5000,6143} x N {5144,10248} x K {3584,4000}\n"
    "  --layout nk|kn        B as [N,K] (default, weights) or [K,N]\n"
    "  --dtype bf16|fp16     A, B and C (default bf16); fp32 accumulation either way\n"
    "  --iters N             timed calls per repeat (20)     --warmup N   untimed calls first (5)\n"
    "  -R N                  repeats, median reported (5)\n"
    "  --reserved-sms N      SMs left idle (0)   --swizzle 1|2|4|8 (4)   --raster auto|m|n (auto)\n"
    "  --json FILE           also write every row as JSON\n"
    "  --plans P1;P2;..      each shape under each plan, then the best: auto (the rule), hook, streamk, or a\n"
    "                        TILEWIRE_GEMM_STREAMK_PLAN spec (tile=128x256|128x128|128x64|swap128x64|\n"
    "                        256x160|256x160c2|256x112|256x64n2, or the ping-pong tiles, data-parallel only:\n"
    "                        swap64x16|swap64x32|swap64x64|swap128x64pp|\n"
    "                        swap128x128pp|128x128pp|128x112pp),\n"
    "                        mode=heuristic|dp|splitk|streamk, splits=N, det=0|1, swizzle=N, raster=m|n)\n"
    "  --virtual P           P ranks on GPU 0 at once, own inputs each, each on SMs / P; the slowest rank's times\n"
    "  --grouped             the grouped GEMM on MoE expert shapes instead (its options: --grouped --help)\n";

int to_int(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  TW_REQUIRE(errno == 0 && end && *end == '\0' && !v.empty() && x >= 0 && x <= (1l << 30), kInvalidArgument,
             "bench gemm: " + opt + " takes a non-negative integer, got '" + v + "'");
  return (int)x;
}

GemmBenchArgs parse(const std::vector<std::string>& argv) {
  GemmBenchArgs a;
  int m = 0, n = 0, k = 0;
  std::string sweep;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& o = argv[i];
    if (o == "-h" || o == "--help") {
      a.help = true;
      continue;
    }
    TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "bench gemm: " + o + " needs a value (--help)");
    const std::string v = argv[++i];
    if (o == "-m") m = to_int(o, v);
    else if (o == "-n") n = to_int(o, v);
    else if (o == "-k") k = to_int(o, v);
    else if (o == "--sweep") sweep = v;
    else if (o == "--dtype") {
      const std::optional<DType> t = parse_dtype(v);  // any spelling of bf16 or fp16
      TW_REQUIRE(t == DType::kBFloat16 || t == DType::kFloat16, kInvalidArgument,
                 "bench gemm: --dtype bf16|fp16, got '" + v + "'");
      a.dtype = *t;
    } else if (o == "--layout") {
      const std::optional<BLayout> l = parse_blayout(v);
      TW_REQUIRE(l.has_value(), kInvalidArgument, "bench gemm: --layout nk|kn, got '" + v + "'");
      a.layout = *l;
    } else if (o == "--iters") a.iters = std::max(1, to_int(o, v));
    else if (o == "--warmup") a.warmup = to_int(o, v);
    else if (o == "-R") a.repeats = std::max(1, to_int(o, v));
    else if (o == "--reserved-sms") a.cfg.reserved_sms = to_int(o, v);
    else if (o == "--swizzle") a.cfg.swizzle = to_int(o, v);
    else if (o == "--raster") {
      const std::optional<GemmRaster> r = parse_gemm_raster(v);
      TW_REQUIRE(r.has_value(), kInvalidArgument, "bench gemm: --raster auto|m|n, got '" + v + "'");
      a.cfg.raster = *r;
    } else if (o == "--json") a.json_path = v;
    else if (o == "--virtual") a.virtual_ranks = parse_virtual_ranks(o, v);
    else if (o == "--plans") {
      a.plans.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ';');)
        if (!p.empty()) a.plans.push_back(p);
      TW_REQUIRE(!a.plans.empty(), kInvalidArgument, "bench gemm: --plans needs at least one plan");
      for (const std::string& p : a.plans) {  // a bad spec fails here, before any GPU work
        gemm_impl::StreamKPlan probe;
        const bool named = p == "auto" || p == "hook" || p == "streamk";
        const Status st = gemm_impl::apply_streamk_plan_override(named ? "" : p, &probe);
        TW_REQUIRE(st.ok, kInvalidArgument, "bench gemm: --plans: " + st.reason);
      }
    }
    else TW_REQUIRE(false, kInvalidArgument, "bench gemm: unknown option '" + o + "' (--help)");
  }
  if (sweep == "acceptance") a.shapes = {{8192, 8192, 8192}, {8192, 8192, 4096}, {16384, 8192, 4096},
                                         {4096, 8192, 8192}, {2048, 8192, 4096}};
  else if (sweep == "grid") {
    for (int mm : {128, 512, 2048, 8192})
      for (int nn : {4096, 8192})
        for (int kk : {4096, 8192}) a.shapes.push_back({mm, nn, kk});
  } else if (sweep == "skinny") {
    for (int nn : {4096, 8192})
      for (int kk : {4096, 8192}) a.shapes.push_back({128, nn, kk});
  } else if (sweep == "tail") a.shapes = {{4096, 8192, 8192}, {2048, 8192, 4096}};  // last waves nearly empty
  else if (sweep == "decode") {
    for (int mm : {1, 16, 32, 64, 128, 256})
      for (int nn : {4096, 8192, 14336, 57344})
        for (int kk : {4096, 8192}) a.shapes.push_back({mm, nn, kk});
  } else if (sweep == "decode-m") {
    for (auto [nn, kk] : {std::pair{8192, 8192}, std::pair{14336, 4096}})
      for (int mm = 1; mm <= 256; ++mm) a.shapes.push_back({mm, nn, kk});
  } else if (sweep == "narrow") {
    for (int mm : {1, 16, 32, 64, 128, 256})
      for (int nn : {1024, 2048})
        for (int kk : {4096, 8192}) a.shapes.push_back({mm, nn, kk});
  } else if (sweep == "ragged") {
    for (int mm : {3000, 5000, 6143})
      for (int nn : {5144, 10248})
        for (int kk : {3584, 4000}) a.shapes.push_back({mm, nn, kk});
  } else
    TW_REQUIRE(sweep.empty(), kInvalidArgument,
               "bench gemm: --sweep acceptance|grid|skinny|tail|decode|decode-m|narrow|ragged, got '" + sweep + "'");
  if (m || n || k) {
    TW_REQUIRE(m > 0 && n > 0 && k > 0, kInvalidArgument, "bench gemm: -m, -n and -k go together, all positive");
    a.shapes.push_back({m, n, k});
  }
  if (a.shapes.empty() && !a.help) a.shapes.push_back({8192, 8192, 8192});
  return a;
}

struct Row {
  Shape s;
  std::string plan_spec = "auto";  // --plans entry
  double tw_us = 0, cublas_us = 0;
  double tw_host_us = 0, cublas_host_us = 0;  // host time per call to enqueue it (time_pair_us)
  unsigned long long wrong = 0;
  std::string tw_plan, cublas_algo;  // what ran: gemm_plan(), LtMatmul::describe()
  double tflops(double us) const { return us > 0 ? 2.0 * s.m * s.n * s.k / (us * 1e-6) / 1e12 : 0; }
};

// Times two candidates the same way: CUDA events around `iters` back-to-back calls, `repeats`
// times each, in alternation (A B, B A, A B, ...), after a warm-up of both that lasts at least
// kWarmMs of GPU time. Why: an H200 lowers its SM clock within tens of milliseconds of full-power
// GEMMs, so a candidate timed first from idle clocks and the other after it would be compared at
// different clocks (seen on nvidia-h200: cuBLASLt timed second drifted 686 -> 808 us on one shape
// within a run). Medians per candidate. Also the host's time per call (the loop that enqueues
// the calls, not waiting for them): where it reaches the GPU time, the GPU waited for the host
// and the figure is the host's launch path, not the kernel. (kWarmMs: bench_gemm.hpp.)

struct PairTimes {
  double a_us = 0, b_us = 0;            // GPU time per call (events)
  double a_host_us = 0, b_host_us = 0;  // host time per call to enqueue it
};

template <class FA, class FB>
PairTimes time_pair_us(int warmup, int iters, int repeats, cudaStream_t st, FA&& a, FB&& b, double warm_ms = kWarmMs) {
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  double host_ms = 0;  // of the last timed() call
  auto timed = [&](auto&& call, int n) {
    TW_CUDA_CHECK(cudaEventRecord(e0, st));
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) call(i);
    host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
    TW_CUDA_CHECK(cudaEventRecord(e1, st));
    TW_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return double(ms);
  };
  double warmed = 0;
  for (int round = 0; round < 1000 && (round == 0 || warmed < warm_ms); ++round)
    warmed += timed(a, std::max(1, warmup)) + timed(b, std::max(1, warmup));
  std::vector<double> ta, tb, ha, hb;
  auto time_a = [&] { ta.push_back(timed(a, iters) * 1e3 / iters), ha.push_back(host_ms * 1e3 / iters); };
  auto time_b = [&] { tb.push_back(timed(b, iters) * 1e3 / iters), hb.push_back(host_ms * 1e3 / iters); };
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) time_a(), time_b();
    else time_b(), time_a();
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return {median(ta), median(tb), median(ha), median(hb)};
}

// One row per --plans entry, on the same inputs.
std::vector<Row> bench_one(const GemmBenchArgs& a, Shape s, cublasLtHandle_t lt, cudaStream_t st, int l2_bytes) {
  std::vector<Row> rows;
  const size_t na = size_t(s.m) * s.k, nb = size_t(s.n) * s.k, nc = size_t(s.m) * s.n;
  const size_t set_bytes = 2 * (na + nb + nc);
  size_t free_b = 0, total_b = 0;
  TW_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int sets = (int)std::min<size_t>(std::max<size_t>(2, 2 * size_t(l2_bytes) / set_bytes + 1), 64);
  sets = (int)std::max<size_t>(1, std::min<size_t>(sets, free_b / 2 / set_bytes));
  std::vector<void*> A(sets), B(sets), C(sets);
  void *ref = nullptr, *ws = nullptr;
  const size_t ws_bytes = 64 << 20;
  unsigned long long* wrong = nullptr;
  for (int i = 0; i < sets; ++i) {
    TW_CUDA_CHECK(cudaMalloc(&A[i], 2 * na));
    TW_CUDA_CHECK(cudaMalloc(&B[i], 2 * nb));
    TW_CUDA_CHECK(cudaMalloc(&C[i], 2 * nc));
    gemm_bench::fill_operand(A[i], na, a.dtype, 1000 + i, st);
    gemm_bench::fill_operand(B[i], nb, a.dtype, 2000 + i, st);
  }
  TW_CUDA_CHECK(cudaMalloc(&ref, 2 * nc));
  TW_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  TW_CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));

  const LtMatmul mm(lt, s.m, s.n, s.k, a.layout, ws_bytes, a.dtype);
  auto cublas = [&](int i, void* out) {
    const int j = i % sets;
    mm.run(A[j], B[j], out, ws, st);
  };
  auto tilewire = [&](int i) {
    const int j = i % sets;
    gemm(GemmArgs{A[j], B[j], C[j], s.m, s.n, s.k, a.dtype, a.layout}, a.cfg, st);
  };

  for (const std::string& spec : a.plans) {
    Row row;
    row.s = s;
    row.plan_spec = spec;
    testing::set_gemm_plan(measurement_plan_of(spec));
    row.cublas_algo = mm.describe();
    try {
      row.tw_plan = gemm_plan(GemmArgs{A[0], B[0], C[0], s.m, s.n, s.k, a.dtype, a.layout}, a.cfg);
      tilewire(0);  // a plan the kernel refuses for this shape is reported, and the sweep goes on
    } catch (const Error& e) {
      if (a.plans.size() == 1) throw;
      std::printf("# %d x %d x %d, plan %s: not run: %s\n", s.m, s.n, s.k, spec.c_str(), e.what());
      continue;
    }
    TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), st));
    // Check every set once (before timing), then time both on the same rotation.
    for (int j = 0; j < sets; ++j) {
      tilewire(j);
      cublas(j, ref);
      gemm_bench::count_wrong_async(C[j], ref, nc, a.dtype, wrong, st);
    }
    TW_CUDA_CHECK(cudaGetLastError());
    // The clocks are down already after the shape's first plan: a tenth of the warm-up after it.
    const PairTimes t = time_pair_us(a.warmup, a.iters, a.repeats, st, tilewire, [&](int i) { cublas(i, C[i % sets]); },
                                     rows.empty() ? kWarmMs : kWarmMs / 10);
    row.tw_us = t.a_us, row.cublas_us = t.b_us, row.tw_host_us = t.a_host_us, row.cublas_host_us = t.b_host_us;
    TW_CUDA_CHECK(cudaMemcpyAsync(&row.wrong, wrong, sizeof(*wrong), cudaMemcpyDeviceToHost, st));
    TW_CUDA_CHECK(cudaStreamSynchronize(st));
    rows.push_back(row);
  }
  testing::set_gemm_plan(std::nullopt);

  for (int i = 0; i < sets; ++i) cudaFree(A[i]), cudaFree(B[i]), cudaFree(C[i]);
  cudaFree(ref), cudaFree(ws), cudaFree(wrong);
  return rows;
}

}  // namespace

int bench_gemm(const std::vector<std::string>& argv) {
  std::vector<std::string> rest;  // argv without --grouped
  std::copy_if(argv.begin(), argv.end(), std::back_inserter(rest), [](const std::string& s) { return s != "--grouped"; });
  if (rest.size() != argv.size()) return gemm_bench::bench_grouped(rest);
  const GemmBenchArgs a = parse(argv);
  if (a.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  require_gpus("bench gemm");
  if (a.virtual_ranks > 0) return gemm_bench::bench_gemm_virtual(a);
  std::ofstream json;
  if (!a.json_path.empty()) {
    json.open(a.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument, "--json " + a.json_path + ": cannot open for writing");
  }
  cudaDeviceProp prop{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t st;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const LtHandle lt;
  std::printf("# tilewire bench gemm: %s, %d SMs, L2 %d MiB; %s, B %s, reserved_sms %d, swizzle %d\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, dtype_name(a.dtype), blayout_name(a.layout),
              a.cfg.reserved_sms, a.cfg.swizzle);
  std::printf("%7s %7s %7s %10s %9s %10s %9s %7s %7s\n", "M", "N", "K", "tw_us", "tw_TF/s", "cublas_us", "cublas_TF",
              "ratio", "#wrong");
  std::vector<Row> rows;
  bool ok = true;
  const bool many = a.plans.size() > 1;
  for (Shape s : a.shapes) {
    const Row* best = nullptr;
    const std::vector<Row> shape_rows = bench_one(a, s, lt.get(), st, prop.l2CacheSize);
    for (const Row& r : shape_rows) {
      std::printf("%7d %7d %7d %10.1f %9.1f %10.1f %9.1f %7.3f %7llu\n", s.m, s.n, s.k, r.tw_us, r.tflops(r.tw_us),
                  r.cublas_us, r.tflops(r.cublas_us), r.tflops(r.tw_us) / r.tflops(r.cublas_us), r.wrong);
      std::printf("#   %s%stilewire: %s | cublasLt: %s | host us/call %.1f / %.1f\n", many ? r.plan_spec.c_str() : "",
                  many ? " -> " : "", r.tw_plan.c_str(), r.cublas_algo.c_str(), r.tw_host_us, r.cublas_host_us);
      ok = ok && r.wrong == 0;
      if (r.wrong == 0 && (!best || r.cublas_us / r.tw_us > best->cublas_us / best->tw_us)) best = &r;
      rows.push_back(r);
    }
    if (many && best) std::printf("#   best: %s (%.3f)\n", best->plan_spec.c_str(), best->cublas_us / best->tw_us);
    std::fflush(stdout);
  }
  cudaStreamDestroy(st);
  if (json.is_open()) {
    std::ostringstream o;
    o << "{\"device\":\"" << prop.name << "\",\"dtype\":\"" << dtype_name(a.dtype) << "\",\"layout\":\"" << blayout_name(a.layout)
      << "\",\"reserved_sms\":" << a.cfg.reserved_sms << ",\"swizzle\":" << a.cfg.swizzle << ",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      o << (i ? "," : "") << "{\"m\":" << r.s.m << ",\"n\":" << r.s.n << ",\"k\":" << r.s.k << ",\"tw_us\":" << r.tw_us
        << ",\"tw_tflops\":" << r.tflops(r.tw_us) << ",\"cublas_us\":" << r.cublas_us
        << ",\"cublas_tflops\":" << r.tflops(r.cublas_us) << ",\"tw_host_us\":" << r.tw_host_us
        << ",\"cublas_host_us\":" << r.cublas_host_us << ",\"ratio\":" << r.tflops(r.tw_us) / r.tflops(r.cublas_us)
        << ",\"wrong\":" << r.wrong << ",\"plan_spec\":\"" << r.plan_spec << "\",\"tw_plan\":\"" << r.tw_plan << "\",\"cublas_algo\":\"" << r.cublas_algo
        << "\"}";
    }
    o << "],\"ok\":" << (ok ? "true" : "false") << "}\n";
    json << o.str();
    json.close();
    std::printf("# wrote %s\n", a.json_path.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace tw::cli
